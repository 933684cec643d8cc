"""A completion's raw prompt (``GenerateRequest.prompt``) reaches the engine as it is: no template, none of
the template's stop sequences, the tokenizer's special tokens added even for a model with its own chat
template; a chat request's messages are still rendered. Pure: no model."""

from __future__ import annotations

from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage, GenerateRequest, SamplingParams
from nrt.hosting.prompts import generation_request

MANIFEST = parse_manifest(
    """
cluster: raw
models:
  router: {source: catalogue://tiny-llama, tier: resident}
  specialists:
    - {id: chat, source: catalogue://tiny-llama, tier: resident, template: chatml, generation: {stop: ["END"]}}
routing: {entry: router, dispatch_rule: router.output.intent -> specialists.chat}
"""
)
SPEC = MANIFEST.model("chat")


def test_a_raw_prompt_gets_no_template_and_no_template_stops_but_the_clients_and_manifests() -> None:
    raw = GenerateRequest(
        request_id="r", model_id="chat", manifest_version=1, prompt="Once upon", params=SamplingParams(stop=("\n\n",))
    )
    engine = generation_request(raw, SPEC, None)
    assert engine.prompt == "Once upon"
    assert engine.stop == ("\n\n", "END")  # not chatml's <|im_end|>
    assert engine.add_special_tokens
    chat = GenerateRequest(
        request_id="c", model_id="chat", manifest_version=1, messages=(ChatMessage(role="user", content="Once upon"),)
    )
    rendered = generation_request(chat, SPEC, None)
    assert "<|im_start|>user\nOnce upon" in rendered.prompt
    assert "<|im_end|>" in rendered.stop


def test_a_raw_prompt_adds_the_special_tokens_a_models_own_chat_template_would_write() -> None:
    own = ChatTemplate("{% for m in messages %}<s>{{ m.content }}{% endfor %}", {})
    raw = GenerateRequest(request_id="r", model_id="m", manifest_version=1, prompt="Once upon")
    assert generation_request(raw, None, None, own).add_special_tokens
    chat = GenerateRequest(
        request_id="c", model_id="m", manifest_version=1, messages=(ChatMessage(role="user", content="x"),)
    )
    assert not generation_request(chat, None, None, own).add_special_tokens
