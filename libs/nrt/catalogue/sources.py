"""Map a manifest ``source`` string to what it names, without touching the disk or network.

* ``catalogue://<name>``       a built-in catalogue model (prepared once, cached)
* ``file:///abs/dir`` or a plain path (``./models/x``, ``/srv/x``, ``~/x``)
                               a local ONNX export directory (optimum layout)
* ``http(s)://host/.../v1``    a remote OpenAI-compatible endpoint (nothing to prepare)

Anything else, e.g. ``hf://neurometric/router-1b-v2``, is a :class:`SourceError` that says
why it cannot be used offline and how to map it to a real artifact. Resolution is pure;
:mod:`nrt.catalogue.artifacts` does the I/O.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from urllib.parse import unquote, urlsplit

import msgspec

from nrt.catalogue.catalogue import catalogue_names

CATALOGUE_SCHEME = "catalogue"
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


class RemoteSource(msgspec.Struct, frozen=True, tag="remote"):
    base_url: str  # an OpenAI-compatible API root ending in /v1, no trailing slash

    def __str__(self) -> str:
        return self.base_url


ResolvedSource = CatalogueSource | LocalSource | RemoteSource


def resolve_source(source: str, *, base_dir: PurePath | None = None) -> ResolvedSource:
    """What ``source`` names. Relative paths are taken relative to ``base_dir`` (e.g. the manifest's folder)."""
    text = source.strip()
    if not text:
        raise SourceError("the source is empty; " + _how_to_map())
    match = _SCHEME.match(text)
    if match is None:
        return LocalSource(path=_join(base_dir, text))
    scheme = match.group(1).lower()
    if scheme == CATALOGUE_SCHEME:
        return _catalogue(text, text[match.end() :])
    if scheme == "file":
        return _file(text, base_dir)
    if scheme in ("http", "https"):
        return _remote(text)
    raise SourceError(
        f"source {source!r}: the {scheme}:// scheme cannot be fetched here (NRT runs offline and only "
        f"reads artifacts already on this machine). " + _how_to_map()
    )


def _catalogue(text: str, rest: str) -> CatalogueSource:
    name = rest.strip("/")
    if name not in catalogue_names():
        raise SourceError(f"source {text!r}: {name!r} is not in the catalogue; available: {_names()}")
    return CatalogueSource(name=name)


def _file(text: str, base_dir: PurePath | None) -> LocalSource:
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise SourceError(f"source {text!r}: file:// URLs must name a local path (file:///abs/dir)")
    path = unquote(parts.path)
    if not path:
        raise SourceError(f"source {text!r}: the file:// URL has no path")
    return LocalSource(path=_join(base_dir, path))


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


def _join(base_dir: PurePath | None, path: str) -> str:
    if base_dir is None or path.startswith(("/", "~")):
        return path
    return str(base_dir / path)


def _names() -> str:
    return ", ".join(f"catalogue://{name}" for name in catalogue_names())


def _how_to_map() -> str:
    return (
        f"Map it to a real artifact: a built-in model ({_names()}), or a local ONNX export directory "
        f"in optimum layout (model.onnx, tokenizer.json, config.json; e.g. `source: ./models/my-router-onnx`, "
        f"exported with `optimum-cli export onnx --task text-generation-with-past`), "
        f"or, for tier remote, an OpenAI-compatible endpoint (`source: https://host/v1`)."
    )
