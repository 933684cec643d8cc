"""Fetch an ``hf://`` source into the Hugging Face cache: the checkpoint's files and the commit they are at.

``huggingface_hub`` does the work (``snapshot_download``) and reads its own environment:
``HF_HOME`` / ``HF_HUB_CACHE`` (where the cache is), ``HF_ENDPOINT`` (a mirror), ``HF_TOKEN`` (gated
and private repositories) and ``HF_HUB_OFFLINE`` (the cache alone, no network). Only what a
checkpoint needs is fetched: the config, the safetensors weights and the tokenizer's files. Each
failure becomes a :class:`~nrt.adapters.catalogue.sources.SourceError` that names the source and
says what to do: a gated or missing repository, a revision that does not exist, no network, a
repository without safetensors weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from nrt.adapters.catalogue.sources import HfSource, SourceError

# what a checkpoint needs: its config, its weights (safetensors only: no pickled code runs here),
# and its tokenizer (tokenizer.json, or the files transformers builds it from) with its chat template
CHECKPOINT_FILES = (
    "*.json",
    "*.safetensors",
    "*.jinja",
    "tokenizer.model",
    "*.tiktoken",
    "merges.txt",
    "vocab.txt",
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class NotCached(SourceError):
    """The Hugging Face cache does not hold the source (or its revision), and the Hub was not asked."""


@dataclass(frozen=True)
class Checkout:
    """A checkpoint in the Hugging Face cache: its directory and the commit it is at."""

    source: HfSource
    directory: Path
    commit: str

    @property
    def pinned(self) -> str:
        """The source pinned to its commit: what the log records."""
        return str(HfSource(repo=self.source.repo, revision=self.commit))


def checkout(source: HfSource, *, offline: bool | None = None) -> Checkout:
    """The checkpoint ``source`` names, fetched into the Hugging Face cache when it is not there yet
    (``offline``: the cache alone, whatever ``HF_HUB_OFFLINE`` says). A ``SourceError`` says why not."""
    import huggingface_hub
    from huggingface_hub import errors

    offline = offline_mode() if offline is None else offline
    try:
        path = Path(
            huggingface_hub.snapshot_download(
                source.repo,
                revision=source.revision,
                allow_patterns=list(CHECKPOINT_FILES),
                local_files_only=offline,
            )
        )
    except errors.GatedRepoError:
        raise SourceError(
            f"source {source}: the repository is gated; accept its terms on the Hub and give this host a token "
            f"that may read it ($HF_TOKEN, or `huggingface-cli login`)"
        ) from None
    except errors.RepositoryNotFoundError:
        raise SourceError(
            f"source {source}: the Hub has no repository {source.repo!r} this host may read "
            f"(a private one needs $HF_TOKEN){_elsewhere(source)}"
        ) from None
    except errors.RevisionNotFoundError:
        raise SourceError(f"source {source}: the repository has no revision {source.revision!r}") from None
    except errors.LocalEntryNotFoundError:
        raise NotCached(_not_cached(source, offline)) from None
    except (errors.HfHubHTTPError, OSError) as exc:
        raise SourceError(f"source {source}: the Hub could not be reached ({_first_line(exc)})") from None
    commit = path.name
    if not _COMMIT.match(commit):
        raise SourceError(f"source {source}: the Hugging Face cache returned {path}, which is not a commit's snapshot")
    if not any(path.glob("*.safetensors")):
        raise SourceError(
            f"source {source}: the repository holds no *.safetensors weights (NRT reads no pickled weights)"
        )
    return Checkout(source=source, directory=path, commit=commit)


def cached(source: HfSource) -> Checkout | None:
    """The checkpoint when the Hugging Face cache holds ``source`` already; None when it would have to be
    downloaded (no network is used). A ``SourceError`` when it is unusable even so."""
    try:
        return checkout(source, offline=True)
    except NotCached:
        return None


def offline_mode() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the Hub (as huggingface_hub read it at import)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def not_cached_problem(source: HfSource) -> str:
    """Why ``source`` cannot be used with the Hub out of reach (what the cache holds instead)."""
    return _not_cached(source, offline=True)


def _not_cached(source: HfSource, offline: bool) -> str:
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    repo_dir = cache / ("models--" + source.repo.replace("/", "--"))
    why = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
    if not repo_dir.is_dir():
        return (
            f"source {source}: not in the Hugging Face cache ({cache}) and {why}: nothing to prepare it from "
            f"(fetch it where the Hub is reachable, `huggingface-cli download {source.repo}`, into this cache)"
            f"{_elsewhere(source)}"
        )
    refs = sorted(path.name for path in (repo_dir / "refs").glob("*")) if (repo_dir / "refs").is_dir() else []
    snapshots = sorted(path.name[:12] for path in (repo_dir / "snapshots").glob("*"))
    held = ", ".join([*(f"{ref}" for ref in refs), *(f"commit {sha}" for sha in snapshots)]) or "nothing"
    return (
        f"source {source}: revision {source.revision or 'main'!r} is not in the Hugging Face cache ({cache}) "
        f"and {why}; the cache holds {held}"
    )


def _elsewhere(source: HfSource) -> str:
    """Where a model the Hub does not hold is served instead, when its owner says so."""
    if source.repo.lower().startswith("anthropic/"):
        return (
            "; Anthropic's models are not on the Hub: serve one at tier remote, as `source: anthropic://<model>` "
            "(its Messages API) or as this hf:// source through an inference endpoint"
        )
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
