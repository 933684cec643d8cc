"""A model's own chat template: the Jinja template its tokenizer carries, rendered as transformers does.

Instruction-tuned checkpoints ship their conversation format as a Jinja template
(``tokenizer_config.json``'s ``chat_template``, or a ``chat_template.jinja`` file). NRT renders it
with the semantics of transformers' ``apply_chat_template``: a sandboxed Jinja environment with
``trim_blocks`` and ``lstrip_blocks``, the loop-controls extension, ``raise_exception`` and
``strftime_now``, the tokenizer's special tokens (``bos_token``, ``eos_token``, ...) as variables,
the messages as ``{"role", "content"}`` mappings and ``add_generation_prompt`` set. A manifest's
``template:`` still overrides it.

The rendered text holds every special token the model needs (the template writes them), so the
runtime tokenizes it without adding any (``GenerationRequest.add_special_tokens``): the prompt's ids
are those of ``apply_chat_template(..., tokenize=True)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nrt.adapters.inference.errors import TemplateError
from nrt.core.protocol import ChatMessage
from nrt.core.tool_calls import result_text

TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTemplate:
    """One model's Jinja chat template, compiled once."""

    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(f"the model's chat template refused the conversation: {message}")

        def strftime_now(format: str) -> str:
            return datetime.now(UTC).strftime(format)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = strftime_now
        try:
            self._template = environment.from_string(source)
        except Exception as exc:  # jinja2.TemplateSyntaxError and kin
            raise TemplateError(f"the model's chat template does not compile: {exc}") from exc
        self.special_tokens = special_tokens
        self.name = "chat-template"
        self.stop: tuple[str, ...] = ()  # the model's EOS/EOT token ids end its turn (generation_config)

    @classmethod
    def from_artifact(cls, directory: Path) -> ChatTemplate | None:
        """The template ``directory``'s tokenizer carries, or None when it carries none."""
        config: dict[str, Any] = {}
        path = directory / TOKENIZER_CONFIG
        if path.is_file():
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise TemplateError(f"{path} is not JSON: {exc}") from exc
        source = _template_source(config)
        if (directory / TEMPLATE_FILE).is_file():
            source = (directory / TEMPLATE_FILE).read_text(encoding="utf-8")
        if not source:
            return None
        tokens = {name: text for name in _SPECIAL_TOKENS if (text := _token_text(config.get(name)))}
        return cls(source, tokens)

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt for ``messages``, ending with the model's cue to answer (``add_generation_prompt``)."""
        conversation = [_turn(message) for message in messages]
        try:
            text: str = self._template.render(messages=conversation, add_generation_prompt=True, **self.special_tokens)
        except TemplateError:
            raise
        except Exception as exc:
            raise TemplateError(f"the model's chat template failed to render: {exc}") from exc
        return text


def _turn(message: ChatMessage) -> dict[str, str]:
    """A message as the template sees it: a tool's result is a user turn (``nrt.core.tool_calls``), the
    one format every model reads, whether or not its template knows a ``tool`` role."""
    if message.role == "tool":
        return {"role": "user", "content": result_text(message.content)}
    return {"role": message.role, "content": message.content}


def _template_source(config: dict[str, Any]) -> str | None:
    value = config.get("chat_template")
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # named templates: the default one
        named = {item.get("name"): item.get("template") for item in value if isinstance(item, dict)}
        default = named.get("default")
        return default if isinstance(default, str) else None
    return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson`` filter: json.dumps, not HTML-escaped as Jinja's own."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
