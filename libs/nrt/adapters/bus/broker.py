"""The services' messaging on FastStream: one ``NatsBroker`` per process, typed handlers.

Every service talks to the bus through a broker made by :func:`new_broker`: msgspec models
on the wire (``fast_depends``' msgspec serializer), OpenTelemetry over FastStream's
telemetry middleware (trace context in the message headers, as on the raw hot path), and
explicit error frames. FastStream sends no reply when a handler fails or its message does
not validate, so the caller would only see a timeout; here every failure is answered with
an ``Nrt-Frame: error`` reply carrying an ``ErrorFrame`` (bad input: 400 naming the field).

The hot path (``nrt.route`` and the ``nrt.infer.*`` token stream) stays on raw nats-py in
``nrt.adapters.bus.rpc``, over this broker's own connection: ``bench.gateway`` measures both.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from fast_depends.exceptions import ValidationError
from fast_depends.msgspec import MsgSpecSerializer
from faststream.message import StreamMessage
from faststream.middlewares import ExceptionMiddleware
from faststream.nats import NatsBroker, NatsResponse
from faststream.nats.opentelemetry import NatsTelemetryMiddleware
from faststream.nats.security import NatsNKey, NatsSecurity
from faststream.nats.subscriber.usecases import LogicSubscriber
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from nrt.adapters.bus.connection import processed, reconnecting
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.errors import BadRequest, DeadlineExceeded, ErrorFrame, RemoteError, Unavailable
from nrt.adapters.bus.servers import parse_servers

log = logging.getLogger("nrt.adapters.bus")

FRAME = "Nrt-Frame"  # the header every reply carries: data | last | end | error | accepted
DATA, LAST, END, ERROR = "data", "last", "end", "error"
ACCEPTED = "accepted"  # a worker has taken the request (an ``Accepted`` payload); no part of the answer

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)
Handler = Callable[[Req], Awaitable[Any]]

_error_decoder = msgspec.json.Decoder(ErrorFrame)


def as_remote(exc: BaseException, where: str = "handler") -> RemoteError:
    """The error frame a failure becomes: bad input is a 400 naming the field, the rest a 500."""
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, ValidationError):
        kinds = ", ".join(getattr(o.field_type, "__name__", str(o.field_type)) for o in exc.error_fields)
        message = str(exc.original_error)
        for option in exc.error_fields:  # the path names the handler's parameter: make it the message's root
            message = message.replace(f"$.{option.field_name}", "$")
        log.warning("refusing an invalid %s: %s", kinds, message)
        return BadRequest(f"invalid {kinds or 'message'}: {message}")
    if isinstance(exc, msgspec.DecodeError | UnicodeDecodeError):
        return BadRequest(f"the message is not valid JSON: {exc}")
    log.error("%s failed", where, exc_info=exc)
    return RemoteError("internal", f"{type(exc).__name__}: {exc}", 500)


def error_reply(exc: Exception) -> NatsResponse:
    """The reply a failed handler sends instead of FastStream's silence."""
    frame = as_remote(exc).frame()
    return NatsResponse(msgspec.json.encode(frame), headers={FRAME: ERROR})


async def decode_body(message: StreamMessage[Any], original: Any) -> Any:
    """Every body is JSON, whatever its content-type header says (raw nats-py senders set none);
    an empty body is an empty object, so a query without fields may be sent as nothing."""
    return msgspec.json.decode(message.body) if message.body else {}


def new_broker(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    credentials: BusCredentials | None = None,
    on_disconnect: Callable[[], None] | None = None,
) -> NatsBroker:
    """A broker for service ``name`` on the servers ``url`` lists (one URL, or a cluster's separated by commas):
    reconnects forever to any of them, msgspec on the wire, traced, error frames;
    authenticated by ``credentials`` (by default those the environment names: see ``reconnecting``),
    calling ``on_disconnect`` each time its connection drops."""
    options = reconnecting(url, name, connect_timeout, credentials, on_disconnect)
    security = _security(options.pop("nkeys_seed", None), options.pop("tls", None))
    return NatsBroker(
        list(parse_servers(url)),
        **options,
        security=security,
        serializer=MsgSpecSerializer(),
        decoder=decode_body,
        middlewares=(
            ExceptionMiddleware(publish_handlers={Exception: error_reply}),
            NatsTelemetryMiddleware(include_messages_counters=False),
        ),
        log_level=logging.DEBUG,  # one line per message at INFO would drown the services' own logs
        description=f"NRT {name}",
        graceful_timeout=5.0,
    )


def _security(seed_file: str | None, tls: ssl.SSLContext | None) -> NatsSecurity | None:
    """nats-py's ``nkeys_seed`` and ``tls`` options as FastStream takes them (its ``security``)."""
    if seed_file is not None:
        return NatsNKey(seed_file, ssl_context=tls, use_ssl=tls is not None or None)
    if tls is not None:
        return NatsSecurity(ssl_context=tls, use_ssl=True)
    return None


async def start_broker(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    credentials: BusCredentials | None = None,
    on_disconnect: Callable[[], None] | None = None,
) -> NatsBroker:
    """``new_broker`` connected and started; ConnectionError naming the URL when NATS is not there."""
    broker = new_broker(
        url, name, connect_timeout=connect_timeout, credentials=credentials, on_disconnect=on_disconnect
    )
    try:
        await broker.start()
    except Exception as exc:
        raise ConnectionError(f"cannot connect to NATS at {url}: {exc}") from exc
    return broker


async def serve(
    broker: NatsBroker,
    subject: str,
    handler: Handler[Req],
    *,
    queue: str = "",
    title: str | None = None,
    description: str | None = None,
    max_workers: int | None = None,
) -> LogicSubscriber[Any]:
    """Subscribe ``handler`` to ``subject`` on a running broker (a reply per request, or an error frame).

    ``max_workers`` > 1 lets requests run concurrently (a slow manifest swap does not hold up
    the next one); the default handles them one at a time, in arrival order.
    """
    subscriber = broker.subscriber(
        subject,
        queue=queue,
        title=title,
        description=description or handler.__doc__,
        max_workers=max_workers or 1,
    )
    subscriber(handler)
    await subscriber.start()
    # the server has the subscription when this returns: a request from another connection (or an
    # announcement that follows, such as a worker's tier events) never meets "no responders"
    await processed(broker.connection)
    return subscriber


def raise_if_error(headers: dict[str, str] | None, body: bytes) -> None:
    """Raise the RemoteError an ``error`` frame carries (or a no-responders status)."""
    headers = headers or {}
    if headers.get(FRAME) == ERROR:
        try:
            frame = _error_decoder.decode(body)
        except msgspec.DecodeError:
            frame = ErrorFrame(code="bad_frame", message=body.decode(errors="replace")[:500])
        raise RemoteError.from_frame(frame)


def decode_reply(body: bytes, kind: type[Resp], subject: str) -> Resp:
    try:
        return msgspec.json.decode(body, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RemoteError("bad_reply", f"the reply from {subject} is not a valid {kind.__name__}: {exc}", 502) from exc


async def call(
    broker: NatsBroker,
    subject: str,
    payload: msgspec.Struct,
    reply_type: type[Resp],
    timeout: float,  # noqa: ASYNC109
) -> Resp:
    """Request/reply through the broker; RemoteError on an error frame, DeadlineExceeded on no answer."""
    try:
        message = await broker.request(payload, subject, timeout=timeout)
    except NoRespondersError:
        raise Unavailable(f"nothing is serving {subject}", code="no_responders") from None
    except (NatsTimeout, TimeoutError):
        raise DeadlineExceeded(f"no reply from {subject} within {timeout:g}s") from None
    body = message.body
    raise_if_error(message.headers, body)
    return decode_reply(body, reply_type, subject)
