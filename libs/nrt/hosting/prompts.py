"""A model's prompt template and generation defaults, from the manifest in force."""

from __future__ import annotations

import msgspec

from nrt.adapters.inference import GenerationRequest, PromptTemplate, builtin_template
from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.adapters.inference.templates import BUILTIN_TEMPLATES
from nrt.core.manifest import Generation, ModelSpec
from nrt.core.protocol import ChatMessage, GenerateRequest, SamplingParams, Tools
from nrt.core.tool_calls import tools_prompt

DEFAULT_TEMPLATE = "plain-chat"


def template_for(spec: ModelSpec | None, own: ChatTemplate | None = None) -> PromptTemplate | ChatTemplate:
    """The manifest's template (a built-in's name, else its text as the template's layout, its
    ``turn_template`` parts, where given, writing each message of ``{turns}``); without one, the
    chat template the model's tokenizer carries (``own``), else the default plain chat."""
    if (spec is None or spec.template is None) and own is not None and (spec is None or spec.turn_template is None):
        return own
    if spec is None or spec.template is None:
        base = builtin_template(DEFAULT_TEMPLATE)
    elif spec.template in BUILTIN_TEMPLATES:
        base = builtin_template(spec.template)
    else:
        base = PromptTemplate(name=f"{spec.id}-template", layout=spec.template, generation_prompt="")
    turns = spec.turn_template if spec is not None else None
    if turns is None:
        return base
    parts = {role: text for role in ("system", "user", "assistant") if (text := getattr(turns, role)) is not None}
    return PromptTemplate(**(msgspec.structs.asdict(base) | parts))  # checked again, as any template


def requested_generation(params: SamplingParams, spec: ModelSpec | None) -> Generation:
    """The client's settings over the manifest's generation defaults (stop sequences: both, the client's first)."""
    defaults = spec.generation if spec is not None else Generation()
    return Generation(
        max_tokens=params.max_tokens if params.max_tokens is not None else defaults.max_tokens,
        temperature=params.temperature if params.temperature is not None else defaults.temperature,
        top_p=params.top_p if params.top_p is not None else defaults.top_p,
        stop=tuple(dict.fromkeys((*params.stop, *defaults.stop))),
    )


def generation_request(
    request: GenerateRequest, spec: ModelSpec | None, session_key: str | None, own: ChatTemplate | None = None
) -> GenerationRequest:
    """The engine request: the prompt rendered (``own``: the model's own chat template), client params
    over the manifest's defaults. A raw prompt (a completion) goes to the model as it is: no template,
    none of its stop sequences, the tokenizer's special tokens (a BOS) added."""
    template = template_for(spec, own)
    raw = request.prompt is not None
    messages = with_tools(request.messages, request.params.tools)
    prompt = request.prompt if request.prompt is not None else template.render(messages)
    params = request.params
    chosen = requested_generation(params, spec)
    return GenerationRequest(
        prompt=prompt,
        max_tokens=chosen.max_tokens,
        temperature=chosen.temperature,
        top_p=chosen.top_p,
        top_k=params.top_k or 0,
        seed=params.seed,
        stop=tuple(dict.fromkeys((*chosen.stop, *(() if raw else template.stop)))),
        session_id=session_key,
        prefix_owner=request.model_id,  # its template's (and system prompt's) KV is shared by its requests
        request_id=request.request_id,
        stream=request.stream,
        add_special_tokens=raw or not isinstance(template, ChatTemplate),  # a chat template writes its own
        response_format=params.response_format,
        tools=params.tools,
        answer_lead=answer_lead(template),
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        logit_bias=params.logit_bias,
        logprobs=params.logprobs,
        top_logprobs=params.top_logprobs,
    )


def with_tools(messages: tuple[ChatMessage, ...], tools: Tools | None) -> tuple[ChatMessage, ...]:
    """The conversation with the declared tools described in its system message (the first one's
    text, then the tools; a system message of their own when there is none): every turn of a
    conversation with the same tools starts with the same text, so a session's KV cache is reused."""
    if tools is None or not tools.functions:
        return messages
    described = tools_prompt(tools)
    if messages and messages[0].role == "system":
        first = ChatMessage(role="system", content=f"{messages[0].content}\n\n{described}")
        return (first, *messages[1:])
    return (ChatMessage(role="system", content=described), *messages)


def answer_lead(template: PromptTemplate | ChatTemplate) -> str:
    """The whitespace a template shows between its cue and an earlier answer (``" "`` for ``Assistant:``
    then ``Assistant: {content}``): an answer constrained to tool calls starts with it, as a free answer
    would, so the next turn's prompt extends this one's text exactly (``nrt.core.tool_calls``)."""
    if not isinstance(template, PromptTemplate) or not template.generation_prompt:
        return ""
    shown = template.assistant.split("{content}", 1)[0]
    if not shown.startswith(template.generation_prompt):
        return ""
    rest = shown[len(template.generation_prompt) :]
    return rest if rest.isspace() else ""
