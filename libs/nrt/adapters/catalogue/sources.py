"""Map a manifest ``source`` string to what it names, without touching the disk or network.

* ``catalogue://<name>``       a built-in catalogue model (prepared once, cached)
* ``file:///abs/dir`` or a plain path (``./models/x``, ``/srv/x``, ``~/x``)
                               a local ONNX export directory (optimum layout)
* ``hf://org/name[@revision]``  a model on the Hugging Face Hub, fetched into the Hugging Face
                               cache (``HF_HOME``/``HF_HUB_CACHE``, ``HF_ENDPOINT``, ``HF_TOKEN``,
                               ``HF_HUB_OFFLINE`` as ``huggingface_hub`` reads them) and prepared
                               once per revision (``nrt.adapters.catalogue.checkpoints``)
                               at ``tier: remote``, the same repository served by an inference
                               endpoint (:class:`HubEndpoint`: nothing fetched or prepared here)
* ``http(s)://host/.../v1``    a remote OpenAI-compatible endpoint (nothing to prepare)
* ``anthropic://<model>``      a model behind the Anthropic Messages API (nothing to prepare);
                               reached at ``https://api.anthropic.com`` unless the manifest's
                               ``base_url`` says otherwise, its key in ``$ANTHROPIC_API_KEY``
                               unless ``api_key_env`` names another variable

A local directory is an ONNX export (optimum layout) or a Hugging Face checkpoint (config.json,
safetensors, tokenizer), which is prepared as an ``hf://`` model is. A local path ending in ``.gguf``
(plain or ``file://``) is a GGUF file (:class:`GgufSource`): de-quantised into a checkpoint, then
prepared as one (``nrt.adapters.catalogue.gguf_source``). Anything else is a
:class:`SourceError` that says how to map it to a real artifact. Resolution is pure;
:mod:`nrt.adapters.catalogue.artifacts` and :mod:`nrt.adapters.catalogue.hub` do the I/O.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from urllib.parse import unquote, urlsplit

import msgspec

from nrt.adapters.catalogue.catalogue import catalogue_names

CATALOGUE_SCHEME = "catalogue"
ANTHROPIC_SCHEME = "anthropic"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"  # where an anthropic:// model is reached by default
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"  # the variable holding its key, unless api_key_env names another
# where an hf:// model at tier remote is served by default: Hugging Face's OpenAI-compatible inference router,
# which takes the repository id as the model's name (a worker's NRT_WORKER_HF_INFERENCE_URL, or the model's
# base_url, names another server of Hub models: a vLLM or TGI deployment, say)
HF_INFERENCE_URL = "https://router.huggingface.co/v1"
HF_TOKEN_ENV = "HF_TOKEN"  # the variable holding its key, unless api_key_env names another
REMOTE_SCHEMES = ("http", "https", ANTHROPIC_SCHEME)  # sources served by the remote tier
HF_SCHEME = "hf"
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")
# a Hub repository id: an optional owner, then a name (letters, digits, - _ .; neither starts with - or .)
_HF_REPO = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_HF_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,255}$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class SourceError(ValueError):
    """A source string that does not name an artifact NRT can use (the message says how to fix it)."""


class CatalogueSource(msgspec.Struct, frozen=True, tag="catalogue"):
    name: str

    def __str__(self) -> str:
        return f"{CATALOGUE_SCHEME}://{self.name}"


class LocalSource(msgspec.Struct, frozen=True, tag="local"):
    path: str  # as written, joined to base_dir when relative; "~" is expanded by prepare

    def __str__(self) -> str:
        return self.path


class GgufSource(msgspec.Struct, frozen=True, tag="gguf"):
    path: str  # a GGUF file, as written, joined to base_dir when relative; "~" is expanded when it is read

    def __str__(self) -> str:
        return self.path


class RemoteSource(msgspec.Struct, frozen=True, tag="remote"):
    base_url: str  # an OpenAI-compatible API root ending in /v1, no trailing slash

    def __str__(self) -> str:
        return self.base_url


class HfSource(msgspec.Struct, frozen=True, tag="hf"):
    repo: str  # the Hub repository id, ``org/name``
    revision: str | None = None  # a branch, tag or commit; None: the repository's default branch

    def __str__(self) -> str:
        return f"{HF_SCHEME}://{self.repo}" + (f"@{self.revision}" if self.revision else "")


class HubEndpoint(msgspec.Struct, frozen=True, tag="hf-endpoint"):
    """An ``hf://`` model at ``tier: remote``: served by an OpenAI-compatible inference endpoint that knows
    the Hub's repositories by their ids, not fetched or prepared here."""

    repo: str

    def __str__(self) -> str:
        return f"{HF_SCHEME}://{self.repo}"


class AnthropicSource(msgspec.Struct, frozen=True, tag="anthropic"):
    model: str  # the model's name at the Anthropic Messages API, e.g. claude-haiku-3

    def __str__(self) -> str:
        return f"{ANTHROPIC_SCHEME}://{self.model}"


ResolvedSource = CatalogueSource | LocalSource | GgufSource | HfSource | RemoteSource | AnthropicSource
GGUF_SUFFIX = ".gguf"


def resolve_source(source: str, *, base_dir: PurePath | None = None) -> ResolvedSource:
    """What ``source`` names. Relative paths are taken relative to ``base_dir`` (e.g. the manifest's folder)."""
    text = source.strip()
    if not text:
        raise SourceError("the source is empty; " + _how_to_map())
    match = _SCHEME.match(text)
    if match is None:
        return _local(_join(base_dir, text))
    scheme = match.group(1).lower()
    if scheme == CATALOGUE_SCHEME:
        return _catalogue(text, text[match.end() :])
    if scheme == "file":
        return _file(text, base_dir)
    if scheme in ("http", "https"):
        return _remote(text)
    if scheme == ANTHROPIC_SCHEME:
        return _anthropic(text, text[match.end() :])
    if scheme == HF_SCHEME:
        return _hf(text, text[match.end() :])
    raise SourceError(
        f"source {source!r}: the {scheme}:// scheme cannot be fetched here (NRT runs offline and only "
        f"reads artifacts already on this machine). " + _how_to_map()
    )


def served_remotely(resolved: ResolvedSource, source: str) -> RemoteSource | AnthropicSource | HubEndpoint:
    """What serves a model declared at ``tier: remote``: an endpoint source as it is, an ``hf://`` model
    through an inference endpoint (a pinned revision cannot be: an endpoint serves what it deployed);
    a model a worker would load is a :class:`SourceError` (the manifest's parser says the same)."""
    if isinstance(resolved, RemoteSource | AnthropicSource):
        return resolved
    if isinstance(resolved, HfSource):
        if resolved.revision is not None:
            raise SourceError(
                f"source {source!r}: an inference endpoint serves the revision it deployed; a model at tier remote "
                f"cannot pin one: remove '@{resolved.revision}'"
            )
        return HubEndpoint(repo=resolved.repo)
    raise SourceError(
        f"source {source!r} is loaded by a worker; tier 'remote' is for a model served by an endpoint "
        f"(https://host/v1, anthropic://<model>, or hf://org/name through an inference endpoint)"
    )


def _catalogue(text: str, rest: str) -> CatalogueSource:
    name = rest.strip("/")
    if name not in catalogue_names():
        raise SourceError(f"source {text!r}: {name!r} is not in the catalogue; available: {_names()}")
    return CatalogueSource(name=name)


def _hf(text: str, rest: str) -> HfSource:
    repo, at, revision = rest.strip().rstrip("/").partition("@")
    if not _HF_REPO.match(repo) or ".." in repo or "--" in repo:
        raise SourceError(
            f"source {text!r}: expected hf://<org>/<name>[@revision], e.g. hf://HuggingFaceTB/SmolLM2-135M-Instruct "
            f"(letters, digits and - _ . in each part)"
        )
    if at and (not _HF_REVISION.match(revision) or ".." in revision):
        raise SourceError(f"source {text!r}: {revision!r} is not a branch, tag or commit name")
    return HfSource(repo=repo, revision=revision or None)


def _file(text: str, base_dir: PurePath | None) -> LocalSource | GgufSource:
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise SourceError(f"source {text!r}: file:// URLs must name a local path (file:///abs/dir)")
    path = unquote(parts.path)
    if not path:
        raise SourceError(f"source {text!r}: the file:// URL has no path")
    return _local(_join(base_dir, path))


def _local(path: str) -> LocalSource | GgufSource:
    """A GGUF file when the path ends in ``.gguf`` (any case), else a local directory."""
    return GgufSource(path=path) if path.rstrip("/").lower().endswith(GGUF_SUFFIX) else LocalSource(path=path)


def _remote(text: str) -> RemoteSource:
    parts = urlsplit(text)
    path = parts.path.rstrip("/")
    if not parts.hostname:
        raise SourceError(f"source {text!r}: the URL has no host")
    if not path.endswith("/v1"):
        raise SourceError(
            f"source {text!r}: a remote source must be the base URL of an OpenAI-compatible API, "
            f"ending in /v1 (e.g. https://api.example.com/v1)"
        )
    if parts.query or parts.fragment:
        raise SourceError(f"source {text!r}: a remote base URL takes no query or fragment")
    return RemoteSource(base_url=f"{parts.scheme.lower()}://{parts.netloc}{path}")


def _anthropic(text: str, rest: str) -> AnthropicSource:
    name = rest.strip("/")
    if not _MODEL_NAME.match(name):
        raise SourceError(
            f"source {text!r}: expected anthropic://<model name>, e.g. anthropic://claude-haiku-3 "
            f"(letters, digits and . _ : @ -)"
        )
    return AnthropicSource(model=name)


def _join(base_dir: PurePath | None, path: str) -> str:
    if base_dir is None or path.startswith(("/", "~")):
        return path
    return str(base_dir / path)


def _names() -> str:
    return ", ".join(f"catalogue://{name}" for name in catalogue_names())


def _how_to_map() -> str:
    return (
        f"Map it to a real artifact: a built-in model ({_names()}), a Hugging Face model "
        f"(`source: hf://org/name`, optionally `@revision`), a local Hugging Face checkpoint directory "
        f"(config.json, *.safetensors, tokenizer.json), a local GGUF file (`source: ./models/x.gguf`), "
        f"or a local ONNX export directory "
        f"in optimum layout (model.onnx, tokenizer.json, config.json; e.g. `source: ./models/my-router-onnx`, "
        f"exported with `optimum-cli export onnx --task text-generation-with-past`), "
        f"or, for tier remote, an OpenAI-compatible endpoint (`source: https://host/v1`) "
        f"or an Anthropic model (`source: anthropic://claude-haiku-3`)."
    )
