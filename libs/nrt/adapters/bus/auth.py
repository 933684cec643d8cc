"""Who may do what on the bus: one NATS user (an nkey) per service, its permissions derived from the contract.

Each identity of :data:`nrt.adapters.bus.contract.SERVICES` (the four services and ``nrt``, the CLI and
``nrt up``) is a NATS user authenticated by an nkey; the server config lists their public keys
with their permissions, so an anonymous connection is refused and every publish is tied to
one identity. The permissions come from the contract's table (:data:`~nrt.adapters.bus.contract.CHANNELS`),
so they cannot drift from it:

- publish: the subjects of the channels it publishes (``nrt.control.*`` for cluster_state only,
  ``nrt.route`` for the gateway only...), its own event prefix ``nrt.events.<service>.*``,
  and replies to the requests it received (``allow_responses``, enough for a token stream);
- subscribe: the subjects of the channels it subscribes to, and its own inboxes
  (``_INBOX.<its public key>.>``: nobody reads another's replies);
- JetStream: reading the events stream through an ephemeral consumer (its followers);
  cluster_state's durable consumer, its acks and message reads (the recorder, the re-seed);
  managing the stream itself for its owners (cluster_state and ``nrt``) only; the object store of
  prepared artifacts (``NRT_ARTIFACTS``) for whoever hosts models (router_svc, specialist_worker);
- the rate-limit KV bucket (``NRT_RATE_LIMITS``): the gateways create it, read and compare-and-set its keys.

:func:`ensure_credentials` writes a directory with a seed per identity (``<identity>.nk``, mode
0600) and the server config (``nats-server.conf``, public keys only), reusing seeds already
there; ``nrt up`` keeps one in its data directory and ``nrt bus credentials DIR`` makes one for
compose or several hosts. A process gives its seed in ``NRT_NATS_NKEY_SEED_FILE`` (and a CA
bundle in ``NRT_NATS_TLS_CA`` for a ``tls://`` server); without one it connects anonymously,
as to a development server without authorization.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import nkeys

from nrt.adapters.bus import subjects
from nrt.adapters.bus.contract import CHANNELS, SERVICES, Service
from nrt.adapters.bus.credentials import inbox_prefix, public_key, seed_file
from nrt.adapters.bus.jetstream import ARTIFACTS_BUCKET, ARTIFACTS_STREAM

CONFIG_FILE = "nats-server.conf"
STREAM_OWNERS: tuple[Service, ...] = ("cluster_state", "nrt")  # they alone create, update and delete the stream
RECORDER: Service = "cluster_state"  # its durable consumer records the stream
RECORDER_CONSUMER = "cluster_state"  # the durable consumer's name (cluster_state.recorder.CONSUMER)
# A request's reply subject may take this many messages within this time (a token stream is one message
# per frame; the gateway gives up on a request after NRT_GATEWAY_REQUEST_TIMEOUT, 600 s by default).
RESPONSE_MAX_MSGS = 1_000_000
RESPONSE_EXPIRES = "15m"

RATE_LIMITERS: tuple[Service, ...] = ("api_gateway",)  # they share the per-key rate limits in a KV bucket

_JS = "$JS.API"
_STREAM = subjects.EVENTS_STREAM
_LIMITS = f"KV_{subjects.RATE_LIMITS_BUCKET}"  # the KV bucket's stream
# who reads and writes the object store of prepared artifacts: whoever hosts models
ARTIFACT_USERS: tuple[Service, ...] = ("router_svc", "specialist_worker")
_ARTIFACTS = ARTIFACTS_STREAM
ARTIFACT_RIGHTS = (
    f"$O.{ARTIFACTS_BUCKET}.>",  # its chunks and its objects' meta messages
    *(f"{_JS}.STREAM.{action}.{_ARTIFACTS}" for action in ("INFO", "CREATE", "MSG.GET", "PURGE")),
    f"{_JS}.DIRECT.GET.{_ARTIFACTS}.>",
    f"{_JS}.STREAM.NAMES",  # nats-py finds an object's stream by its chunks' subject before it reads them
    f"{_JS}.CONSUMER.CREATE.{_ARTIFACTS}",  # an object is read through an ordered consumer
    f"{_JS}.CONSUMER.CREATE.{_ARTIFACTS}.>",
    f"{_JS}.CONSUMER.DELETE.{_ARTIFACTS}.>",
    f"$JS.FC.{_ARTIFACTS}.>",
)


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


# Where a channel's ``{service}`` token is the identity's own name rather than any: a service answers only
# its own health subject, and publishes events only under its own prefix.
OWN_TOKEN: dict[tuple[str, str], str] = {
    ("nrt.health.{service}", "subscribe"): "service",
    ("nrt.events.{service}.{type}", "publish"): "service",
}


def _subject(address: str, identity: str, side: str) -> str:
    own = OWN_TOKEN.get((address, side))
    tokens = address.split(".")
    return ".".join(identity if t == f"{{{own}}}" else "*" if t.startswith("{") else t for t in tokens)


def permissions(identity: Service) -> Permissions:
    """What ``identity`` may publish and subscribe to besides its own inboxes, from the contract."""
    publish: set[str] = set()
    subscribe: set[str] = set()
    for channel in CHANNELS:
        if identity in channel.publishers:
            publish.add(_subject(channel.address, identity, "publish"))
        if identity not in channel.subscribers:
            continue
        if channel.transport == "jetstream":  # follow the stream: an ordered (ephemeral, unnamed) consumer
            publish |= {f"{_JS}.STREAM.INFO.{_STREAM}", f"{_JS}.CONSUMER.CREATE.{_STREAM}", f"$JS.FC.{_STREAM}.>"}
        else:
            subscribe.add(_subject(channel.address, identity, "subscribe"))
    health = next(c for c in CHANNELS if c.address == "nrt.health.{service}")
    if identity in health.subscribers and identity not in health.publishers:
        # its own health subject: a container's health check runs `nrt health` as the service
        publish.add(_subject(health.address, identity, "subscribe"))
    if identity == RECORDER:
        consumer = f"{_STREAM}.{RECORDER_CONSUMER}"
        publish |= {
            f"{_JS}.CONSUMER.CREATE.{consumer}",
            f"{_JS}.CONSUMER.CREATE.{consumer}.>",
            f"{_JS}.CONSUMER.DURABLE.CREATE.{consumer}",
            f"{_JS}.CONSUMER.INFO.{consumer}",
            f"{_JS}.CONSUMER.DELETE.{consumer}",
            f"{_JS}.CONSUMER.MSG.NEXT.{consumer}",
            f"$JS.ACK.{consumer}.>",
            f"{_JS}.STREAM.MSG.GET.{_STREAM}",
            f"{_JS}.DIRECT.GET.{_STREAM}",
            f"{_JS}.DIRECT.GET.{_STREAM}.>",
        }
    if identity in STREAM_OWNERS:
        publish |= {f"{_JS}.STREAM.{action}.{_STREAM}" for action in ("INFO", "CREATE", "UPDATE", "DELETE")}
    if identity in RATE_LIMITERS:  # bind or create the bucket, read a key's last value, write it (a publish, acked)
        publish |= {
            f"{_JS}.STREAM.INFO.{_LIMITS}",
            f"{_JS}.STREAM.CREATE.{_LIMITS}",
            f"{_JS}.DIRECT.GET.{_LIMITS}.>",
            f"{_JS}.STREAM.MSG.GET.{_LIMITS}",
            f"$KV.{subjects.RATE_LIMITS_BUCKET}.>",
        }
    if identity in ARTIFACT_USERS:
        publish |= set(ARTIFACT_RIGHTS)
    return Permissions(publish=tuple(sorted(publish)), subscribe=tuple(sorted(subscribe)))


# -- keys and the server config --------------------------------------------------------------------


def new_seed() -> bytes:
    """A fresh user nkey seed (``SU...``)."""
    return bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert_file: Path
    key_file: Path


def server_config(keys: dict[Service, str], *, tls: ServerTls | None = None) -> str:
    """The nats-server config: JetStream, one user per identity (public key + permissions), TLS if given.

    The listen address, the store and the monitoring port are left to the command line (``nrt up``,
    compose and the tests give their own)."""
    users = []
    for identity, key in keys.items():
        allowed = permissions(identity)
        users.append(
            {
                "nkey": key,
                "permissions": {
                    "publish": {"allow": list(allowed.publish)},
                    "subscribe": {"allow": [*allowed.subscribe, f"{inbox_prefix(key)}.>"]},
                    "allow_responses": {"max": RESPONSE_MAX_MSGS, "expires": RESPONSE_EXPIRES},
                },
            }
        )
    lines = ["# Written by NRT (nrt.adapters.bus.auth): one NATS user per service; re-written on every start.", ""]
    lines.append("jetstream: {}")
    lines.append(f"authorization: {json.dumps({'users': users}, indent=2)}")
    if tls is not None:
        lines.append(f"tls: {json.dumps({'cert_file': str(tls.cert_file), 'key_file': str(tls.key_file)})}")
    return "\n".join(lines) + "\n"


def ensure_credentials(directory: Path, *, tls: ServerTls | None = None) -> Path:
    """A seed per identity in ``directory`` (kept if already there, else made, mode 0600) and the server
    config for them (re-written, so a newer contract's permissions apply); returns the config's path."""
    directory.mkdir(parents=True, exist_ok=True)
    keys: dict[Service, str] = {}
    for identity in SERVICES:
        path = seed_file(directory, identity)
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(new_seed() + b"\n")
        try:
            keys[identity] = public_key(path.read_bytes())
        except Exception as exc:
            raise ValueError(f"{path} does not hold an nkey user seed: {exc}") from None
    config = directory / CONFIG_FILE
    config.write_text(server_config(keys, tls=tls))
    return config


# -- the README's table -----------------------------------------------------------------------------


def _jetstream_rights(identity: Service, rights: Permissions) -> str:
    said: list[str] = []
    if f"{_JS}.CONSUMER.CREATE.{_STREAM}" in rights.publish:
        said.append("follow the stream (ephemeral consumers)")
    if identity == RECORDER:
        said.append(f"its durable consumer `{RECORDER_CONSUMER}` (fetch, ack), message reads (re-seed)")
    if identity in STREAM_OWNERS:
        said.append("create, update, delete the stream")
    if identity in RATE_LIMITERS:
        said.append(f"the KV bucket `{subjects.RATE_LIMITS_BUCKET}` (create, read, compare-and-set)")
    if identity in ARTIFACT_USERS:
        said.append(f"read and write the prepared artifacts (object store `{ARTIFACTS_BUCKET}`)")
    return "; ".join(said) or "-"


def permission_table() -> str:
    """Who may do what on the bus, as the README shows it (``python -m nrt.adapters.bus.auth`` prints it)."""
    lines = ["| identity | publishes | subscribes | JetStream |", "|---|---|---|---|"]
    for identity in SERVICES:
        rights = permissions(identity)
        publish = [s for s in rights.publish if not s.startswith(("$JS", "$KV", "$O."))]
        lines.append(
            f"| `{identity}` | {', '.join(f'`{s}`' for s in publish) or '-'} "
            f"| {', '.join(f'`{s}`' for s in rights.subscribe) or '-'} | {_jetstream_rights(identity, rights)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(permission_table(), end="")
