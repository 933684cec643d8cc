"""The OpenAPI document of ``/v1/embeddings`` and ``/v1/completions``: the rules
``api_gateway.endpoint_validate`` enforces, written into their request schemas (as
``api_gateway.openapi_docs`` does for chat), so that a request the schema allows is served and one
it forbids gets a 400."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.openapi.spec import OpenAPI, OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Schema
from litestar.openapi.spec.operation import Operation

from api_gateway.endpoint_types import CompletionRequest, EmbeddingRequest
from api_gateway.endpoint_validate import MAX_INPUTS, MAX_PROMPTS
from api_gateway.openapi_docs import _document_bounds, _document_max_tokens, _document_stop, _value

COMPLETION_SSE_EVENT = Schema(
    type=OpenAPIType.OBJECT,
    required=["data"],
    properties={
        "data": Schema(
            type=OpenAPIType.STRING,
            description="a `Completion` chunk (`object: text_completion`) as JSON; after an error, an "
            "`ErrorResponse` as JSON; last, `[DONE]`",
        ),
        "event": Schema(type=OpenAPIType.STRING),
    },
    description="One server-sent event of a streamed completion (`stream: true`).",
)
_NULL = Schema(type=OpenAPIType.NULL)


@dataclass
class CompletionOperation(Operation):
    """``POST /v1/completions``: its 200 is JSON or, when the request asks to stream, server-sent events."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        assert isinstance(ok, OpenAPIResponse), "document the JSON 200 first"
        assert ok.content is not None
        ok.content["text/event-stream"] = OpenAPIMediaType(schema=COMPLETION_SSE_EVENT)


def _texts(description: str, limit: int) -> Schema:
    """A string, or a list of 1 to ``limit`` strings, none empty (token ids are refused)."""
    text = Schema(type=OpenAPIType.STRING, min_length=1)
    return Schema(
        one_of=[text, Schema(type=OpenAPIType.ARRAY, items=text, min_items=1, max_items=limit)],
        description=description,
    )


def _only(value: Schema, description: str) -> Schema:
    return Schema(one_of=[value, _NULL], description=description)


def document_endpoint_requests(openapi: OpenAPI, max_tokens_limit: int) -> None:
    schemas = openapi.components.schemas if openapi.components and openapi.components.schemas else {}
    embed = schemas["EmbeddingRequest"].properties or {}
    _value(embed["model"]).min_length = 1
    embed["input"] = _texts(f"a string or 1 to {MAX_INPUTS} strings, none empty; token ids are refused", MAX_INPUTS)
    _document_bounds(embed, EmbeddingRequest)
    embed["user"] = _NULL  # refused: an embedding has no conversation
    schemas["EmbeddingRequest"].examples = [{"model": "router", "input": ["I was charged twice"]}]

    request = schemas["CompletionRequest"]
    fields = request.properties or {}
    _value(fields["model"]).min_length = 1
    fields["prompt"] = _texts(
        f"a string or 1 to {MAX_PROMPTS} strings (one string when streaming), none empty; token ids are refused",
        MAX_PROMPTS,
    )
    request.any_of = [
        Schema(properties={"stream": Schema(const=False)}),
        Schema(properties={"prompt": Schema(type=OpenAPIType.STRING)}),
    ]
    _document_max_tokens(_value(fields["max_tokens"]), max_tokens_limit)
    _document_bounds(fields, CompletionRequest)
    _value(fields["n"]).const = 1
    _document_stop(fields["stop"])
    refused = "refused (400) unless left out or neutral"
    fields["echo"] = _only(Schema(const=False), refused)
    fields["suffix"] = _only(Schema(const=""), refused)
    fields["best_of"] = _only(Schema(const=1), refused)
    fields["logprobs"] = Schema(type=OpenAPIType.NULL, description=refused)
    for name in ("presence_penalty", "frequency_penalty"):
        fields[name] = _only(Schema(const=0), refused)
    fields["logit_bias"] = _only(Schema(type=OpenAPIType.OBJECT, max_properties=0), refused)
    fields["user"] = Schema(type=OpenAPIType.NULL, description=refused)
    request.examples = [{"model": "billing", "prompt": "Once upon a time", "max_tokens": 8}]
