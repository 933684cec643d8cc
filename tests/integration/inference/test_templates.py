"""Prompt templates: chat formats, completion and few-shot styles, and a safe renderer."""

from __future__ import annotations

import msgspec
import pytest

from nrt.adapters.inference import ChatMessage, PromptTemplate, TemplateError, builtin_template, few_shot

CHAT = [
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Capital of France?"),
    ChatMessage("assistant", "Paris."),
    ChatMessage("user", "And {Italy}?"),
]


def test_plain_chat_renders_every_turn_and_the_cue() -> None:
    assert PromptTemplate().render(CHAT) == (
        "Be brief.\n\nUser: Capital of France?\nAssistant: Paris.\nUser: And {Italy}?\nAssistant:"
    )


def test_gemma_and_chatml_templates() -> None:
    gemma = builtin_template("gemma-chat").render(CHAT[1:2])
    assert gemma == "<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>model\n"
    chatml = builtin_template("chatml").render(CHAT[:2])
    assert chatml.endswith("<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_end|>" in builtin_template("chatml").stop


def test_completion_template_continues_the_last_user_message() -> None:
    completion = builtin_template("completion")
    assert completion.render([ChatMessage("user", "The capital of France is")]) == "The capital of France is"
    with pytest.raises(TemplateError, match="needs a user message"):
        completion.render([ChatMessage("system", "x")])


def test_few_shot_template_for_base_models() -> None:
    template = few_shot([("Capital of Italy?", "Rome"), ("2+2?", "4")], instruction="Answer {briefly}.")
    prompt = template.render([ChatMessage("system", "ignored"), ChatMessage("user", "Capital of France?")])
    assert prompt == (
        "Answer {briefly}.\n\nQ: Capital of Italy?\nA: Rome\n\nQ: 2+2?\nA: 4\n\nQ: Capital of France?\nA:"
    )
    assert template.stop == ("\n",)


def test_unsafe_or_unknown_fields_are_rejected() -> None:
    with pytest.raises(TemplateError, match="unknown or unsafe field"):
        PromptTemplate(user="{content.__class__}")
    with pytest.raises(TemplateError, match="unknown or unsafe field"):
        PromptTemplate(layout="{turns!r}")
    with pytest.raises(TemplateError, match="valid fields"):
        PromptTemplate(layout="{history}")
    with pytest.raises(TemplateError, match="literal braces"):
        PromptTemplate(user="{content")
    with pytest.raises(TemplateError, match="no built-in prompt template"):
        builtin_template("jinja")


def test_templates_are_plain_data() -> None:
    raw = b'{"name": "custom", "user": "### Q\\n{content}\\n", "generation_prompt": "### A\\n", "layout": "{turns}{generation_prompt}"}'
    template = msgspec.json.decode(raw, type=PromptTemplate)
    assert template.render([ChatMessage("user", "hi")]) == "### Q\nhi\n### A\n"


CONVERSATION = PromptTemplate(
    name="support",
    layout="Be polite.\n\n{turns}Agent:",
    user="Customer: {content}\n",
    assistant="Agent: {content}\n\n",
    generation_prompt="",
)


def test_a_conversation_template_places_every_turn_in_order() -> None:
    messages = [
        ChatMessage("user", "My order is 1234."),
        ChatMessage("assistant", " Thanks."),
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Which order?"),
    ]
    assert CONVERSATION.render(messages) == (
        "Be polite.\n\nCustomer: My order is 1234.\nAgent: Thanks.\n\nBe brief.\n\nCustomer: Which order?\nAgent:"
    )


def test_the_next_turn_extends_the_last_prompt_and_its_answer() -> None:
    """Prefix stability: turn N+1's prompt starts with turn N's prompt and the answer the model wrote
    after it, whether the client sends the answer back as written (a leading space) or trimmed."""
    first = [ChatMessage("user", "My order is 1234.")]
    prompt = CONVERSATION.render(first)
    answer = " Thanks, I see order 1234."  # what the model wrote after "Agent:"
    for echoed in (answer, answer.strip()):
        second = CONVERSATION.render([*first, ChatMessage("assistant", echoed), ChatMessage("user", "Which order?")])
        assert second.startswith(prompt + answer)
        assert second.endswith("\n\nCustomer: Which order?\nAgent:")
    assert (
        PromptTemplate()
        .render([*first, ChatMessage("assistant", answer)])
        .startswith(PromptTemplate().render(first) + answer)
    )


def test_a_last_user_template_still_answers_the_last_message_alone() -> None:
    template = PromptTemplate(name="qa", layout="Q: {last_user}\nA:", generation_prompt="")
    messages = [ChatMessage("user", "first"), ChatMessage("assistant", "one"), ChatMessage("user", "second")]
    assert template.render(messages) == "Q: second\nA:"
