"""A model's own chat template renders exactly as transformers' ``apply_chat_template`` does: system and
multi-turn messages, special tokens, loop controls, a template that refuses a conversation; and the
prompt's ids are those transformers would feed the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.adapters.inference.errors import TemplateError
from nrt.core.protocol import ChatMessage
from nrt.testing.hf_checkpoints import CHAT_TEMPLATE
from nrt.testing.tiny_models import build_tokenizer

# Gemma's shape: BOS written by the template, the system prompt folded into the first user turn,
# roles checked with raise_exception
GEMMA_LIKE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set first = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + message['content'] | trim + "
    "'<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
# Llama 3's shape: header tokens, a break in a loop, eos_token as a variable
LLAMA3_LIKE = """{{- bos_token }}
{%- for message in messages %}
    {%- if message['role'] == 'stop' %}{% break %}{% endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
{{- '' if add_generation_prompt else eos_token }}"""

CONVERSATION = [
    ChatMessage("system", "You are a billing assistant."),
    ChatMessage("user", "I was charged twice."),
    ChatMessage("assistant", "  Sorry to hear that. Which order?  "),
    ChatMessage("user", "Order 4417, {curly} and {{ braces }} stay text."),
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(directory)
    return directory


def transformers_tokenizer(directory: Path, template: str) -> Any:
    import transformers

    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=template,
    )


def saved(directory: Path, template: str, tmp_path: Path) -> Path:
    """The tokenizer saved as a checkpoint saves it (tokenizer_config.json carries the template)."""
    target = tmp_path / "artifact"
    transformers_tokenizer(directory, template).save_pretrained(target)
    return target


def as_dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


@pytest.mark.parametrize(
    ("template", "messages"),
    [
        (CHAT_TEMPLATE, CONVERSATION),
        (GEMMA_LIKE, CONVERSATION),
        (LLAMA3_LIKE, CONVERSATION),
        (LLAMA3_LIKE, [*CONVERSATION[:2], ChatMessage("stop", "x"), ChatMessage("user", "never shown")]),
        (CHAT_TEMPLATE, CONVERSATION[1:2]),
    ],
    ids=["chatml", "gemma-like", "llama3-like", "llama3-break", "chatml-one-turn"],
)
def test_the_template_renders_as_apply_chat_template_does(
    template: str, messages: list[ChatMessage], tokenizer_dir: Path, tmp_path: Path
) -> None:
    directory = saved(tokenizer_dir, template, tmp_path)
    ours = ChatTemplate.from_artifact(directory)
    assert ours is not None
    expected = transformers_tokenizer(tokenizer_dir, template).apply_chat_template(
        as_dicts(messages), tokenize=False, add_generation_prompt=True
    )
    assert ours.render(messages) == expected


@pytest.mark.parametrize("template", [CHAT_TEMPLATE, GEMMA_LIKE], ids=["chatml", "gemma-like"])
def test_the_prompt_ids_are_those_transformers_feeds_the_model(
    template: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    directory = saved(tokenizer_dir, template, tmp_path)
    ours = ChatTemplate.from_artifact(directory)
    assert ours is not None
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ids = tokenizer.encode(ours.render(CONVERSATION), add_special_tokens=False).ids  # as the runtime encodes it
    expected = transformers_tokenizer(tokenizer_dir, template).apply_chat_template(
        as_dicts(CONVERSATION), tokenize=True, add_generation_prompt=True
    )
    assert ids == list(expected)


def test_a_template_that_refuses_a_conversation_says_why(tokenizer_dir: Path, tmp_path: Path) -> None:
    ours = ChatTemplate.from_artifact(saved(tokenizer_dir, GEMMA_LIKE, tmp_path))
    assert ours is not None
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        ours.render([ChatMessage("user", "a"), ChatMessage("user", "b")])


def test_a_template_file_wins_over_the_tokenizer_config_and_none_means_none(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    directory = saved(tokenizer_dir, CHAT_TEMPLATE, tmp_path)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}?"  # as older transformers saved it
    config_path.write_text(json.dumps(config))
    (directory / "chat_template.jinja").unlink(missing_ok=True)
    in_config = ChatTemplate.from_artifact(directory)
    assert in_config is not None
    assert in_config.render(CONVERSATION[1:2]) == "I was charged twice.?"
    (directory / "chat_template.jinja").write_text("{{ messages[-1]['content'] }}!")  # as transformers saves it now
    in_file = ChatTemplate.from_artifact(directory)
    assert in_file is not None
    assert in_file.render(CONVERSATION[1:2]) == "I was charged twice.!"
    del config["chat_template"]
    config_path.write_text(json.dumps(config))
    (directory / "chat_template.jinja").unlink()
    assert ChatTemplate.from_artifact(directory) is None


def test_a_template_that_does_not_compile_is_a_clear_error(tokenizer_dir: Path, tmp_path: Path) -> None:
    directory = saved(tokenizer_dir, CHAT_TEMPLATE, tmp_path)
    (directory / "chat_template.jinja").write_text("{% for %}")
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate.from_artifact(directory)
