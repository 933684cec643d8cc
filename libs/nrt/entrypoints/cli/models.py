"""``nrt models``: list, prepare and inspect the model catalogue's artifacts."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from nrt.adapters import settings
from nrt.adapters.catalogue import (
    CATALOGUE,
    PROVIDERS,
    ROOT_PROVIDER,
    AnthropicSource,
    ArtifactError,
    ArtifactRecord,
    LocalSource,
    PreparedArtifact,
    Provider,
    RemoteSource,
    SourceError,
    UnknownModelError,
    default_providers,
    get_entry,
    parse_provider,
    prepare,
    prepare_local,
    prepare_steps,
    resolve_source,
    status,
    statuses,
    variant_path,
)
from nrt.adapters.catalogue.checkpoints import (
    Checkpoint,
    UserModel,
    checkpoint_entry,
    cpu_format,
    graph_path,
    hub_checkpoint,
    is_checkpoint,
    label_user_model,
    local_checkpoint,
    remove_user_model,
    user_model,
    user_models,
)
from nrt.adapters.catalogue.entry import CatalogueEntry
from nrt.adapters.catalogue.gguf_source import gguf_checkpoint
from nrt.adapters.catalogue.greedy import decode_speed
from nrt.adapters.catalogue.hub import checkout
from nrt.adapters.catalogue.record import encode_record
from nrt.adapters.catalogue.sources import GgufSource, HfSource
from nrt.core.vocabulary import WeightFormat

EXIT_UNKNOWN = 2

_out = Console()


@click.group(name="models")
def models() -> None:
    """The model catalogue: built-in models converted to ONNX once and cached under NRT_HOME."""


@models.command(name="list")
def list_models() -> None:
    """List the catalogue's models, whether each is prepared, and its size."""
    table = Table(title=f"Model catalogue ({settings.models_dir()})")
    for column in ("name", "kind", "prepared", "size", "variants", "description"):
        table.add_column(column, overflow="fold")
    for entry in CATALOGUE:
        current = status(entry.name)
        if current.state == "ready" and current.record is not None:
            prepared, size = "[green]yes[/green]", _size(current.record.total_bytes)
        else:
            prepared, size = _STATE_LABELS.get(current.state, current.state), f"~{_size(entry.approx_bytes)}"
        variants = ", ".join(
            f"{variant.provider} {variant.quantization}"
            + ("" if state.state == "ready" else f" ({_STATE_LABELS.get(state.state, state.state)})")
            for variant, state in zip(entry.variants, statuses(entry.name), strict=True)
        )
        table.add_row(entry.name, entry.kind, prepared, size, variants, entry.description)
    _out.print(table)
    own = user_models()
    if not own:
        click.echo(
            "operators' models: none prepared (nrt models add hf://org/name, a checkpoint directory or a .gguf file)"
        )
        return
    mine = Table(title=f"Operators' models ({settings.models_dir()})")
    mine.add_column("name", no_wrap=True)  # what `nrt models rm` takes: never broken
    mine.add_column("id", no_wrap=True)  # the name its operator gave it (`nrt models add --id`): rm takes it too
    for column in ("kind", "size", "variants", "source", "directory"):
        mine.add_column(column, overflow="fold")
    for model in own:
        kinds = {record.kind for record in model.variants}
        variants = ", ".join(
            f"{record.provider} {record.quantization} {_size(record.total_bytes)}" for record in model.variants
        )
        mine.add_row(
            model.name,
            model.label or "",
            ", ".join(sorted(kinds)) or "?",
            _size(model.total_bytes),
            variants,
            model.source,
            str(model.directory),
        )
    _out.print(mine)


@models.command(name="rm")
@click.argument("name")
def remove_model(name: str) -> None:
    """Delete an operator's model NAME (as `nrt models list` shows it) from this host's model cache;
    its Hugging Face download stays in the Hugging Face cache."""
    try:
        directory = remove_user_model(name)
    except ArtifactError as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    click.echo(f"removed {name} ({directory})")


_STATE_LABELS = {"missing": "no", "stale": "[yellow]stale[/yellow]", "invalid": "[red]invalid[/red]"}
_PROVIDER_CHOICES = (*PROVIDERS, "all")


_force_option = click.option("--force", is_flag=True, help="Rebuild even when a verified artifact is cached.")
_providers_option = click.option(
    "--provider",
    "providers",
    multiple=True,
    type=click.Choice(_PROVIDER_CHOICES),
    help="The variant(s) to build: cpu (the root artifact), cuda (fp16, for a GPU; it builds on a CPU host too), "
    "or all. Repeatable. Default: cpu, plus cuda where onnxruntime offers CUDA.",
)


@models.command(name="prepare")
@click.argument("name")
@_force_option
@_providers_option
def prepare_model(name: str, force: bool, providers: tuple[str, ...]) -> None:
    """Build the artifact of catalogue model NAME (or check a local ONNX directory / source)."""
    if name not in {entry.name for entry in CATALOGUE}:
        _prepare_source(name)
        return
    _build(get_entry(name), _chosen_providers(providers), force)


@models.command(name="add")
@click.argument("source")
@_force_option
@_providers_option
@click.option(
    "--quantization",
    type=click.Choice([w.value for w in WeightFormat]),
    default=None,
    help="How the cpu variant stores a decoder's weights: int8 (the default), int4, or none (fp32); fp16 builds the "
    "cuda variant. As the manifest's `quantization:` key says it.",
)
@click.option(
    "--id",
    "label",
    default=None,
    help="A name for it on this host (lower-case letters, digits, . _ -), shown by `nrt models list` and taken by "
    "`nrt models info` and `rm` beside its content-addressed name.",
)
def add_model(
    source: str, force: bool, providers: tuple[str, ...], quantization: str | None, label: str | None
) -> None:
    """Prepare an operator's own model: SOURCE is hf://org/name[@revision] (fetched into the Hugging Face
    cache, honouring HF_HOME, HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE), a local Hugging Face checkpoint
    directory (config.json, *.safetensors, tokenizer.json) or a local GGUF file (./x.gguf, de-quantised first)."""
    weights = WeightFormat(quantization) if quantization else None
    fmt = cpu_format(weights)
    try:
        resolved = resolve_source(source)
        if isinstance(resolved, HfSource):
            click.echo(f"fetching {resolved} into the Hugging Face cache")
            checkpoint = _readable_checkpoint(lambda: hub_checkpoint(checkout(resolved), fmt))
        elif isinstance(resolved, GgufSource):
            checkpoint = _readable_checkpoint(lambda: gguf_checkpoint(Path(resolved.path), fmt))
        elif isinstance(resolved, LocalSource) and is_checkpoint(Path(resolved.path).expanduser()):
            checkpoint = _readable_checkpoint(lambda: local_checkpoint(Path(resolved.path), fmt))
        else:
            _fail(
                f"{source} is not an operator's checkpoint (hf://org/name[@revision], a directory with config.json "
                f"and *.safetensors, or a .gguf file); `nrt models prepare` takes catalogue models and ONNX export "
                f"directories",
                EXIT_UNKNOWN,
            )
    except SourceError as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    click.echo(f"{checkpoint.provenance}: a {checkpoint.model_type} {checkpoint.kind}, as {checkpoint.name}")
    chosen = ("cuda",) if weights is WeightFormat.FP16 and not providers else _chosen_providers(providers)
    _build(checkpoint_entry(checkpoint), chosen, force)
    if label is not None:
        try:
            label_user_model(checkpoint.name, label)
        except ArtifactError as exc:
            _fail(str(exc), EXIT_UNKNOWN)
        click.echo(f"{checkpoint.name} is {label!r} on this host")


def _readable_checkpoint(read: Callable[[], Checkpoint]) -> Checkpoint:
    try:
        return read()
    except ArtifactError as exc:
        raise SourceError(str(exc)) from exc


def _build(entry: CatalogueEntry, chosen: tuple[Provider, ...], force: bool) -> None:
    """Build ``entry``'s variants for ``chosen`` that are not prepared and verified (all with ``force``)."""
    name = entry.name
    wanted = [variant.provider for variant in entry.variants if variant.provider in chosen]
    for provider in sorted(set(chosen) - {variant.provider for variant in entry.variants}):
        click.echo(f"{name} has no {provider} variant: its {entry.root.provider} artifact serves {provider} as it is")
    if not wanted:
        wanted = [entry.root.provider]
    todo = wanted
    if not force:
        started = time.perf_counter()
        todo = []
        for provider in wanted:
            current = status(name, provider=provider, checksums=True, entry=entry)
            label = _variant_label(name, provider)
            if current.state == "ready" and current.record is not None:
                elapsed = time.perf_counter() - started
                click.echo(
                    f"{label} is already prepared and verified (sha256 of {len(current.record.files)} files, "
                    f"{elapsed:.1f} s): {current.directory} ({_size(current.record.total_bytes)})"
                )
                continue
            todo.append(provider)
            if current.state != "missing":
                click.echo(f"{label} is {current.state}: {current.problem}; rebuilding")
        if not todo:
            return
    steps = prepare_steps(entry, todo)
    started = time.perf_counter()
    try:
        with _StepProgress(steps, title=name) as progress:
            prepare(name, providers=todo, force=force, progress=progress, entry=entry)
    except ArtifactError as exc:
        _fail(f"prepare {name} failed: {exc}", 1)
    elapsed = time.perf_counter() - started
    for provider in todo:
        built = status(name, provider=provider, entry=entry)
        size = _size(built.record.total_bytes) if built.record is not None else "?"
        click.echo(f"prepared {_variant_label(name, provider)} in {elapsed:.0f} s: {built.directory} ({size})")


def _chosen_providers(options: tuple[str, ...]) -> tuple[Provider, ...]:
    if not options:
        return default_providers()
    if "all" in options:
        return PROVIDERS
    return tuple(parse_provider(option) for option in options)


def _variant_label(name: str, provider: Provider) -> str:
    return name if provider == ROOT_PROVIDER else f"{name} ({provider} variant)"


@models.command(name="info")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print only the record, as JSON.")
@click.option(
    "--provider",
    type=click.Choice(PROVIDERS),
    default=ROOT_PROVIDER,
    show_default=True,
    help="Whose variant's record to print.",
)
@click.option("--speed", is_flag=True, help="Measure each built decoder variant's greedy decode speed on this host.")
def info(name: str, as_json: bool, provider: str, speed: bool) -> None:
    """Show a model's variants (provider, quantization, size, path, whether built; with --speed, the
    decode speed measured here) and the record (nrt-artifact.json) of one of them; or the record of a
    local ONNX directory. NAME is a catalogue model or an operator's (as `nrt models list` shows it)."""
    mine = user_model(name)
    if mine is not None:
        _print_user_variants(mine, speed)
        if mine.variants:
            root = mine.variants[0]
            _print_record(PreparedArtifact(directory=variant_path(mine.directory, root.provider), record=root), False)
        return
    if name not in {entry.name for entry in CATALOGUE}:
        artifact = _local_artifact(name)
        _print_record(artifact, as_json)
        return
    entry = get_entry(name)
    chosen = parse_provider(provider)
    if entry.variant(chosen) is None:
        _fail(f"{name} has no {chosen} variant: its {entry.root.provider} artifact serves {chosen} as it is", 1)
    if not as_json:
        _print_variants(name, speed)
    current = status(name, provider=chosen)
    if current.state != "ready" or current.record is None:
        flag = "" if chosen == ROOT_PROVIDER else f" --provider {chosen}"
        _fail(
            f"{_variant_label(name, chosen)} ({entry.kind}, ~{_size(entry.serving(chosen).approx_bytes)}) "
            "is not prepared"
            + (f" ({current.state}: {current.problem})" if current.problem else "")
            + f"; run: nrt models prepare {name}{flag}",
            1,
        )
    _print_record(PreparedArtifact(directory=current.directory, record=current.record), as_json)


def _print_variants(name: str, speed: bool) -> None:
    table = _variants_table(name, speed)
    entry = get_entry(name)
    for variant, current in zip(entry.variants, statuses(name), strict=True):
        if current.state == "ready" and current.record is not None:
            built, size = "[green]yes[/green]", _size(current.record.total_bytes)
        else:
            built = _STATE_LABELS.get(current.state, current.state)
            size = f"~{_size(variant.approx_bytes)}"
        measured = _speed(current.directory, current.record) if speed and current.state == "ready" else None
        graph = graph_path(current.record if current.state == "ready" else None)
        table.add_row(
            variant.provider,
            variant.quantization,
            graph,
            built,
            size,
            *_speed_cell(speed, measured),
            str(current.directory),
        )
    _out.print(table)


def _print_user_variants(model: UserModel, speed: bool) -> None:
    table = _variants_table(f"{model.name} ({model.source})", speed)
    for record in model.variants:
        directory = variant_path(model.directory, record.provider)
        measured = _speed(directory, record) if speed else None
        table.add_row(
            record.provider,
            record.quantization or "?",
            graph_path(record),
            "[green]yes[/green]",
            _size(record.total_bytes),
            *_speed_cell(speed, measured),
            str(directory),
        )
    _out.print(table)


def _variants_table(title: str, speed: bool) -> Table:
    table = Table(title=f"{title}: variants")
    for column in ("provider", "quantization", "graph", "built", "size"):
        table.add_column(column, overflow="fold")
    if speed:
        table.add_column("decode here", no_wrap=True)
    table.add_column("path", overflow="fold")
    return table


def _speed(directory: Path, record: ArtifactRecord | None) -> float | None:
    """The greedy decode speed of a built decoder variant on this host; None for an encoder."""
    if record is None or record.kind != "causal-lm":
        return None
    return decode_speed(directory, record)


def _speed_cell(speed: bool, measured: float | None) -> tuple[str, ...]:
    if not speed:
        return ()
    return ("-" if measured is None else f"{measured:.1f} tokens/s",)


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
    if isinstance(source, HfSource | GgufSource):
        _fail(f"{source} is an operator's model: prepare it with `nrt models add {source}`", EXIT_UNKNOWN)
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
            TextColumn("eta"),
            TimeRemainingColumn(),  # from the steps done so far
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
