"""Prompt templates: render OpenAI-style messages into one prompt string, per model.

A template is plain data (a manifest can carry one): a format string per role with a
``{content}`` field, and a ``layout`` that places the rendered pieces. The renderer is
deliberately tiny and safe: templates are parsed up front, and only the known field
names below are accepted (no attribute access, indexing, conversions or format specs),
so a template can never reach into Python objects. Message text is inserted verbatim.

Fields a ``layout`` may use:
    ``{prefix}``             the template's fixed prefix (e.g. few-shot examples)
    ``{system}``             the system message(s) rendered with ``system``
    ``{turns}``              the conversation in order, each message rendered with ``user`` /
                             ``assistant`` (and ``system``, when the layout has no ``{system}``)
    ``{last_user}``          the raw content of the last user message
    ``{generation_prompt}``  the cue that starts the model's turn

Prefix stability: the prompt of turn N+1 extends turn N's prompt and answer exactly, so a
session's KV cache is reused and only the new tokens are prefilled. For that, an assistant
turn's content is inserted without its leading whitespace (the answer the model wrote after a
cue such as ``Agent:`` starts with a space that the ``assistant`` part, ``Agent: {content}``,
already places), and a layout puts the generation cue right after ``{turns}``.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import msgspec

from nrt.adapters.inference.errors import TemplateError
from nrt.core.protocol import ChatMessage, Role
from nrt.core.tool_calls import result_text

__all__ = [
    "BUILTIN_TEMPLATES",
    "CHATML",
    "COMPLETION",
    "GEMMA_CHAT",
    "PLAIN_CHAT",
    "ChatMessage",
    "PromptTemplate",
    "Role",
    "builtin_template",
    "few_shot",
]

_LAYOUT_FIELDS = frozenset({"prefix", "system", "turns", "last_user", "generation_prompt"})
_ROLE_FIELDS = frozenset({"content"})


class PromptTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """How one model wants its prompt. Defaults: a plain ``User:`` / ``Assistant:`` chat."""

    name: str = "plain-chat"
    layout: str = "{prefix}{system}{turns}{generation_prompt}"
    system: str = "{content}\n\n"
    user: str = "User: {content}\n"
    assistant: str = "Assistant: {content}\n"
    generation_prompt: str = "Assistant:"
    prefix: str = ""
    stop: tuple[str, ...] = ()  # stop sequences that fit this format (e.g. "\nUser:")

    def __post_init__(self) -> None:
        _check(self.layout, _LAYOUT_FIELDS, f"template {self.name!r} layout")
        for role in ("system", "user", "assistant"):
            _check(getattr(self, role), _ROLE_FIELDS, f"template {self.name!r} {role}")
        for literal in ("generation_prompt", "prefix"):
            _check(getattr(self, literal), frozenset(), f"template {self.name!r} {literal}")

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt for the model's next turn after ``messages``."""
        if not messages:
            raise TemplateError(f"template {self.name!r}: no messages to render")
        separate_system = "{system}" in self.layout
        system = "".join(_fill(self.system, {"content": m.content}) for m in messages if m.role == "system")
        turns = "".join(self._turn(m) for m in messages if not (separate_system and m.role == "system"))
        users = [m.content for m in messages if m.role == "user"]
        if "{last_user}" in self.layout and not users:
            raise TemplateError(f"template {self.name!r} needs a user message")
        return _fill(
            self.layout,
            {
                "prefix": _fill(self.prefix, {}),
                "system": system,
                "turns": turns,
                "last_user": users[-1] if users else "",
                "generation_prompt": _fill(self.generation_prompt, {}),
            },
        )

    def _turn(self, message: ChatMessage) -> str:
        if message.role == "assistant":
            return _fill(self.assistant, {"content": message.content.lstrip()})
        if message.role == "tool":  # a tool's result comes back as a user turn
            return _fill(self.user, {"content": result_text(message.content)})
        return _fill(self.user if message.role == "user" else self.system, {"content": message.content})


def _check(fmt: str, allowed: frozenset[str], where: str) -> None:
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError as exc:
        raise TemplateError(f"{where}: {exc} (write literal braces as {{{{ and }}}})") from exc
    for _, field_name, spec, conversion in parsed:
        if field_name is None:
            continue
        if field_name not in allowed or spec or conversion:
            valid = ", ".join("{" + f + "}" for f in sorted(allowed)) or "none"
            raise TemplateError(f"{where}: unknown or unsafe field {{{field_name}}}; valid fields: {valid}")


def _fill(fmt: str, values: dict[str, str]) -> str:
    return fmt.format_map(values)


PLAIN_CHAT = PromptTemplate(stop=("\nUser:",))

CHATML = PromptTemplate(
    name="chatml",
    system="<|im_start|>system\n{content}<|im_end|>\n",
    user="<|im_start|>user\n{content}<|im_end|>\n",
    assistant="<|im_start|>assistant\n{content}<|im_end|>\n",
    generation_prompt="<|im_start|>assistant\n",
    stop=("<|im_end|>",),
)

GEMMA_CHAT = PromptTemplate(
    name="gemma-chat",
    system="<start_of_turn>user\n{content}<end_of_turn>\n",
    user="<start_of_turn>user\n{content}<end_of_turn>\n",
    assistant="<start_of_turn>model\n{content}<end_of_turn>\n",
    generation_prompt="<start_of_turn>model\n",
    stop=("<end_of_turn>",),
)

COMPLETION = PromptTemplate(name="completion", layout="{prefix}{last_user}", generation_prompt="", stop=())
"""Base models: the last user message is the text to continue, after an optional prefix."""


def few_shot(
    examples: Sequence[tuple[str, str]],
    *,
    question: str = "Q: ",
    answer: str = "A:",
    instruction: str = "",
    name: str = "few-shot",
) -> PromptTemplate:
    """A few-shot completion template for base models: Q/A pairs, then the user's question."""
    shots = "".join(f"{question}{q}\n{answer} {a}\n\n" for q, a in examples)
    escape = _escape_braces
    return PromptTemplate(
        name=name,
        layout="{prefix}" + escape(question) + "{last_user}\n{generation_prompt}",
        prefix=escape(instruction + ("\n\n" if instruction else "") + shots),
        generation_prompt=escape(answer),
        stop=("\n",),
    )


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


BUILTIN_TEMPLATES: dict[str, PromptTemplate] = {t.name: t for t in (PLAIN_CHAT, CHATML, GEMMA_CHAT, COMPLETION)}


def builtin_template(name: str) -> PromptTemplate:
    try:
        return BUILTIN_TEMPLATES[name]
    except KeyError:
        valid = ", ".join(sorted(BUILTIN_TEMPLATES))
        raise TemplateError(f"no built-in prompt template {name!r}; valid: {valid}") from None
