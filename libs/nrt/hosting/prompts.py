"""A model's prompt template and generation defaults, from the manifest in force."""

from __future__ import annotations

import msgspec

from nrt.adapters.inference import GenerationRequest, PromptTemplate, builtin_template
from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.adapters.inference.templates import BUILTIN_TEMPLATES
from nrt.core.manifest import Generation, ModelSpec
from nrt.core.protocol import GenerateRequest, SamplingParams

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
    prompt = request.prompt if request.prompt is not None else template.render(request.messages)
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
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        logit_bias=params.logit_bias,
        logprobs=params.logprobs,
        top_logprobs=params.top_logprobs,
    )
