"""``nrt manifest``: check a manifest file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from nrt.adapters.manifest_sources import check_sources, footprint_of, source_warnings
from nrt.core.manifest import ManifestError, load_manifest
from nrt.core.manifest.summary import summarize
from nrt.hosting.manifest_threshold import threshold_line

NO_SOURCES = "--no-sources"


@click.group()
def manifest() -> None:
    """Work with manifest files."""


@manifest.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    NO_SOURCES,
    is_flag=True,
    help="Do not check that this machine can use each model's source (for a manifest meant for another machine).",
)
def check(file: Path, no_sources: bool) -> None:
    """Validate FILE: print a summary and exit 0, or print every problem and exit 2.

    Each model's source is resolved as a worker here would (without loading weights): one this
    machine cannot use (an hf:// source not in the Hugging Face cache while HF_HUB_OFFLINE is set,
    or gated, missing or of an unsupported architecture; an unknown catalogue model; a directory
    that is neither an ONNX export nor a checkpoint) is a problem at its line. Sources a worker
    will fetch or prepare first are listed."""
    try:
        parsed = load_manifest(file, footprint_of)
    except ManifestError as exc:
        _fail(exc)
    unusable, pending = ([], []) if no_sources else check_sources(parsed)
    if unusable:
        _fail(
            ManifestError(str(file), unusable),
            f"(each source resolved on this machine; {NO_SOURCES} checks a manifest meant for another)",
        )
    click.echo(summarize(parsed, footprint_of, source_warnings(parsed), threshold_line(parsed)))
    if pending:
        click.echo("\nto fetch or prepare on this machine before they serve:")
        for line in pending:
            click.echo(f"  {line}")
    click.echo(f"\n{file}: valid")


def _fail(error: ManifestError, hint: str | None = None) -> NoReturn:
    """Every problem, on stderr, then exit 2."""
    for problem in error.problems:
        click.echo(problem.render(error.file), err=True)
    click.echo(f"{len(error.problems)} problem(s) in {error.file}", err=True)
    if hint is not None:
        click.echo(hint, err=True)
    sys.exit(2)
