"""``nrt manifest``: check a manifest file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nrt.manifest import ManifestError, load_manifest
from nrt.manifest.summary import summarize
from nrt.manifest_sources import footprint_of, source_warnings
from nrt.manifest_threshold import threshold_line


@click.group()
def manifest() -> None:
    """Work with manifest files."""


@manifest.command()
@click.argument("file", type=click.Path(path_type=Path))
def check(file: Path) -> None:
    """Validate FILE: print a summary and exit 0, or print every problem and exit 2."""
    try:
        parsed = load_manifest(file, footprint_of)
    except ManifestError as exc:
        for problem in exc.problems:
            click.echo(problem.render(exc.file), err=True)
        click.echo(f"{len(exc.problems)} problem(s) in {exc.file}", err=True)
        sys.exit(2)
    click.echo(summarize(parsed, footprint_of, source_warnings(parsed), threshold_line(parsed)))
    click.echo(f"\n{file}: valid")
