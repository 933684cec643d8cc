"""Which ``{fields}`` a manifest's prompt template text places, checked before any worker renders it.

The worker renders with ``str.format_map`` over known names only (see
:mod:`nrt.adapters.inference.templates`); a manifest is checked up front so a bad field is a manifest
problem with its key path and line, not a failed request later.
"""

from __future__ import annotations

import string
from collections.abc import Sequence


def fields_problem(text: str, allowed: Sequence[str]) -> str | None:
    """What is wrong with the ``{fields}`` of ``text`` (None: nothing)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        return f"{exc} (write literal braces as {{{{ and }}}})"
    valid = ", ".join("{" + f + "}" for f in allowed)
    for _, name, spec, conversion in parsed:
        if name is not None and (name not in allowed or spec or conversion):
            return f"unknown field {{{name}}}; valid fields: {valid}"
    return None


def places(text: str, field: str) -> bool:
    """Whether ``text`` (already checked) places ``{field}``."""
    return any(name == field for _, name, _, _ in string.Formatter().parse(text))
