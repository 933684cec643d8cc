"""``nrt models``: list, prepare and inspect the model catalogue's artifacts."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from nrt import settings
from nrt.catalogue import (
    CATALOGUE,
    AnthropicSource,
    ArtifactError,
    ArtifactRecord,
    LocalSource,
    PreparedArtifact,
    RemoteSource,
    SourceError,
    UnknownModelError,
    get_entry,
    prepare,
    prepare_local,
    prepare_steps,
    resolve_source,
    status,
)
from nrt.catalogue.record import encode_record

EXIT_UNKNOWN = 2

_out = Console()


@click.group(name="models")
def models() -> None:
    """The model catalogue: built-in models converted to ONNX once and cached under NRT_HOME."""


@models.command(name="list")
def list_models() -> None:
    """List the catalogue's models, whether each is prepared, and its size."""
    table = Table(title=f"Model catalogue ({settings.models_dir()})")
    for column in ("name", "kind", "prepared", "size", "description"):
        table.add_column(column, overflow="fold")
    for entry in CATALOGUE:
        current = status(entry.name)
        if current.state == "ready" and current.record is not None:
            prepared, size = "[green]yes[/green]", _size(current.record.total_bytes)
        else:
            label = {"missing": "no", "stale": "[yellow]stale[/yellow]", "invalid": "[red]invalid[/red]"}
            prepared, size = label.get(current.state, current.state), f"~{_size(entry.approx_bytes)}"
        table.add_row(entry.name, entry.kind, prepared, size, entry.description)
    _out.print(table)


@models.command(name="prepare")
@click.argument("name")
@click.option("--force", is_flag=True, help="Rebuild even when a verified artifact is cached.")
def prepare_model(name: str, force: bool) -> None:
    """Build the artifact of catalogue model NAME (or check a local ONNX directory / source)."""
    if name not in {entry.name for entry in CATALOGUE}:
        _prepare_source(name)
        return
    entry = get_entry(name)
    if not force:
        started = time.perf_counter()
        current = status(name, checksums=True)
        if current.state == "ready" and current.record is not None:
            elapsed = time.perf_counter() - started
            click.echo(
                f"{name} is already prepared and verified (sha256 of {len(current.record.files)} files, "
                f"{elapsed:.1f} s): {current.directory} ({_size(current.record.total_bytes)})"
            )
            return
        if current.state != "missing":
            click.echo(f"{name} is {current.state}: {current.problem}; rebuilding")
    steps = prepare_steps(entry)
    started = time.perf_counter()
    try:
        with _StepProgress(steps, title=name) as progress:
            artifact = prepare(name, force=force, progress=progress)
    except ArtifactError as exc:
        _fail(f"prepare {name} failed: {exc}", 1)
    elapsed = time.perf_counter() - started
    click.echo(f"prepared {name} in {elapsed:.0f} s: {artifact.directory} ({_size(artifact.record.total_bytes)})")


@models.command(name="info")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print only the record, as JSON.")
def info(name: str, as_json: bool) -> None:
    """Show the record (nrt-artifact.json) of a prepared model, or of a local ONNX directory."""
    if name not in {entry.name for entry in CATALOGUE}:
        artifact = _local_artifact(name)
        _print_record(artifact, as_json)
        return
    current = status(name)
    if current.state != "ready" or current.record is None:
        entry = get_entry(name)
        _fail(
            f"{name} ({entry.kind}, ~{_size(entry.approx_bytes)}) is not prepared"
            + (f" ({current.state}: {current.problem})" if current.problem else "")
            + f"; run: nrt models prepare {name}",
            1,
        )
    _print_record(PreparedArtifact(directory=current.directory, record=current.record), as_json)


def _prepare_source(text: str) -> None:
    artifact = _local_artifact(text)
    click.echo(
        f"{artifact.record.name} ({artifact.record.kind}) is usable: {artifact.directory} "
        f"({_size(artifact.record.total_bytes)})"
    )


def _local_artifact(text: str) -> PreparedArtifact:
    """A local directory named by a path or source string; exits 2 for anything else."""
    try:
        source = resolve_source(text)
    except SourceError as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    if isinstance(source, RemoteSource | AnthropicSource):
        click.echo(f"{source} is a remote endpoint: nothing to prepare")
        sys.exit(0)
    if not isinstance(source, LocalSource):
        return _ready_catalogue(source.name)
    path = Path(source.path).expanduser()
    if not path.is_dir():
        _fail(str(UnknownModelError(text)) + " (and it is not a local ONNX directory)", EXIT_UNKNOWN)
    try:
        return prepare_local(path)
    except ArtifactError as exc:
        _fail(f"{path} is not a usable artifact: {exc}", 1)


def _ready_catalogue(name: str) -> PreparedArtifact:
    try:
        return prepare(name)
    except ArtifactError as exc:
        _fail(f"prepare {name} failed: {exc}", 1)


def _fail(message: str, code: int) -> NoReturn:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(code)


def _print_record(artifact: PreparedArtifact, as_json: bool) -> None:
    text = encode_record(artifact.record).decode()
    if as_json:
        click.echo(text, nl=False)
        return
    record: ArtifactRecord = artifact.record
    click.echo(f"{record.name} ({record.kind}) at {artifact.directory}, {_size(record.total_bytes)}")
    _out.print_json(text)


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


class _StepProgress:
    """A rich progress bar over a build's steps; each finished step is printed with its duration."""

    def __init__(self, steps: tuple[str, ...], title: str) -> None:
        self._steps = steps
        self._title = title
        self._bar = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_out,
        )
        self._task: TaskID | None = None
        self._current: str | None = None
        self._since = 0.0

    def __enter__(self) -> _StepProgress:
        self._bar.start()
        self._task = self._bar.add_task(self._title, total=len(self._steps))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is None:
            self._finish_current()
        elif self._current is not None:
            self._bar.console.print(
                f"[red]✗[/red] {escape(self._current)} (failed after {time.perf_counter() - self._since:.1f} s)"
            )
        self._bar.stop()

    def step(self, description: str) -> None:
        self._finish_current()
        self._current = description
        self._since = time.perf_counter()
        if self._task is not None:
            self._bar.update(self._task, description=escape(f"{self._title}: {description}"))

    def _finish_current(self) -> None:
        if self._current is None or self._task is None:
            return
        self._bar.console.print(f"[green]✓[/green] {escape(self._current)} ({time.perf_counter() - self._since:.1f} s)")
        self._bar.advance(self._task)
        self._current = None
