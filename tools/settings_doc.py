"""The README's configuration table, rendered from the settings classes.

    python -m tools.settings_doc                    # print the table (Markdown)
    python -m tools.settings_doc --write README.md  # replace the table between the README's markers

Each row is one environment variable: its name, default and meaning come from the field
that reads it; "read by" lists the processes whose settings class has the field. A test
checks that the README holds exactly what this renders.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from pydantic.fields import FieldInfo

from nrt.adapters.settings import Settings, env_name

BEGIN = (
    "<!-- settings table: generated from the settings classes by `python -m tools.settings_doc --write README.md` -->"
)
END = "<!-- end of the settings table -->"
EVERY = "every process"


def readers() -> list[tuple[str, type[Settings]]]:
    """Each process that reads the environment, with its settings class."""
    from api_gateway.settings import GatewaySettings
    from cluster_state.settings import ClusterStateSettings
    from nrt.entrypoints.cli.settings import CliSettings
    from router_svc.settings import RouterSettings
    from specialist_worker.settings import WorkerSettings

    return [
        ("api_gateway", GatewaySettings),
        ("router_svc", RouterSettings),
        ("specialist_worker", WorkerSettings),
        ("cluster_state", ClusterStateSettings),
        ("`nrt`", CliSettings),
    ]


@dataclass
class Variable:
    name: str
    default: str
    meaning: str
    read_by: list[str] = field(default_factory=list)


def default_text(info: FieldInfo) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("default_text"), str):
        return str(extra["default_text"])
    if info.default is None:
        return "unset"
    if isinstance(info.default, bool):
        return "`1`" if info.default else "`0`"
    return f"`{info.default}`"


def variables() -> list[Variable]:
    """Every variable, the shared ones first, then each process's own in the order of ``readers()``."""
    found: dict[str, Variable] = {}
    processes = readers()
    for process, cls in processes:
        for name, info in cls.model_fields.items():
            variable = env_name(cls, name)
            if variable not in found:
                if not info.description:
                    raise ValueError(f"{cls.__name__}.{name} ({variable}) has no description for the README")
                found[variable] = Variable(variable, default_text(info), info.description)
            found[variable].read_by.append(process)
    return list(found.values())


def render_table() -> str:
    every = [process for process, _ in readers()]
    lines = ["| variable | default | read by | meaning |", "|---|---|---|---|"]
    for v in variables():
        read_by = EVERY if v.read_by == every else ", ".join(v.read_by)
        lines.append(f"| `{v.name}` | {v.default} | {read_by} | {v.meaning} |")
    return "\n".join(lines) + "\n"


def generated_block() -> str:
    return f"{BEGIN}\n{render_table()}{END}"


def table_in(readme: str) -> str:
    """The block between the markers in ``readme``, markers included."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no settings table between the markers {BEGIN!r} and {END!r}")
    return readme[start : end + len(END)]


def with_table(readme: str) -> str:
    """``readme`` with its settings table replaced by the one the settings classes render."""
    return readme.replace(table_in(readme), generated_block())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.settings_doc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="README", help="replace the table between the markers")
    args = parser.parse_args(argv)
    if args.write is None:
        print(render_table(), end="")
        return
    text = args.write.read_text(encoding="utf-8")
    args.write.write_text(with_table(text), encoding="utf-8")


if __name__ == "__main__":
    main()
