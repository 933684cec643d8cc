"""The bounds of a chat request's numbers, declared once as types.

Both API surfaces use these in their request types (``openai_types``, ``anthropic_types``); the
body is decoded into those types once (``api_gateway.body``), which enforces the bounds, and
Litestar writes them into the OpenAPI document from the same ``msgspec.Meta``. ``out_of_bounds``
words the 400 that names the field and its range. The upper limit of ``max_tokens`` is a setting
(``NRT_MAX_TOKENS_LIMIT``), so ``api_gateway.validate.check_max_tokens`` checks it for both surfaces, and
``api_gateway.openapi_docs`` writes it into the document.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin, get_type_hints

import msgspec

SEED_MAX = 2**63 - 1  # seeds are non-negative signed 64-bit integers
MAX_TOKENS = msgspec.Meta(ge=1)  # and at most the gateway's max_tokens_limit setting

Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]  # OpenAI: [0, 2]
AnthropicTemperature = Annotated[float, msgspec.Meta(ge=0, le=1)]  # Anthropic: [0, 1]
TopP = Annotated[float, msgspec.Meta(gt=0, le=1)]
TopK = Annotated[int, msgspec.Meta(ge=1)]
Seed = Annotated[int, msgspec.Meta(ge=0, le=SEED_MAX)]
TopLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]  # OpenAI: 0-20 alternatives per token
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]  # OpenAI presence/frequency penalties: [-2, 2]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def describe(meta: msgspec.Meta, low: float | None = None, high: float | None = None) -> str:
    """The range a ``Meta`` allows, in words: ``between 0 and 2``, ``in (0, 1]``, ``at least 1``.
    ``low`` / ``high`` override its ends (a limit that comes from a setting)."""
    ge = low if low is not None else meta.ge
    le = high if high is not None else meta.le
    if meta.gt is not None and le is not None:
        return f"in ({_number(meta.gt)}, {_number(le)}]"
    if ge is not None and le is not None:
        return f"between {_number(ge)} and {_number(le)}"
    if ge is not None:
        return f"at least {_number(ge)}"
    if meta.gt is not None:
        return f"greater than {_number(meta.gt)}"
    return f"at most {_number(le)}" if le is not None else "a number"


def bound_of(struct: type[msgspec.Struct], field: str) -> msgspec.Meta | None:
    """The ``Meta`` bounds of ``struct.field`` (through ``| None``), or None when it has none."""
    hint: Any = get_type_hints(struct, include_extras=True).get(field)
    options = get_args(hint) if get_origin(hint) is not Annotated else (hint,)
    for option in options or (hint,):
        if get_origin(option) is Annotated:
            for extra in option.__metadata__:
                if isinstance(extra, msgspec.Meta) and (extra.ge, extra.gt, extra.le) != (None, None, None):
                    return extra
    return None


def out_of_bounds(name: str, meta: msgspec.Meta, value: Any, high: float | None = None) -> str:
    """The message for ``value`` outside ``meta``'s range: ``'temperature' must be between 0 and 2, got 9``."""
    return f"'{name}' must be {describe(meta, high=high)}, got {value}"
