"""``POST /v1/embeddings``: one vector a text.

The texts are split into the model's batches (:class:`.conventions.Embedder`), which run
concurrently, one request each, through the pipeline; the vectors are answered as floats or
as base64 (little-endian float32).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from aiohttp import web

import tritonx_frontend_openai.validation as v
from tritonx import TritonXError
from tritonx_frontend_openai.conventions import Embedder
from tritonx_frontend_openai.errors import from_triton, invalid
from tritonx_frontend_openai.generation import Context, Counter, infer_once
from tritonx_frontend_openai.plumbing import MAX_EMBEDDING_INPUTS, Plumbing, json_response, texts

EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


@dataclass
class EmbeddingRequest:
    """An embeddings request's fields, checked."""

    model_id: str
    texts: list[str]
    #: ``float`` or ``base64``
    encoding: str
    dimensions: int | None


def read_request(body: Mapping[str, Any]) -> EmbeddingRequest:
    """Every field of an embeddings request checked, in the order OpenAI reports them."""
    model_id = v.required_str(body, "model")
    inputs = _inputs(body)
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ("float", "base64"):
        raise invalid(
            f"Invalid value for 'encoding_format': expected 'float' or 'base64', but got "
            f"{orjson.dumps(encoding).decode()} instead.",
            param="encoding_format",
            code="invalid_value",
        )
    dimensions = v.opt_int(body, "dimensions", 1)
    v.opt_str(body, "user")
    return EmbeddingRequest(model_id, inputs, encoding, dimensions)


def _inputs(body: Mapping[str, Any]) -> list[str]:
    inputs = texts(body, "input")
    value = body["input"]
    v.array_length("input", inputs, low=1, high=MAX_EMBEDDING_INPUTS)
    for i, text in enumerate(inputs):
        if not text:
            where = "input" if isinstance(value, str) else f"input[{i}]"
            raise invalid(
                f"Invalid '{where}': empty string. Expected a string with minimum length 1.",
                param=where,
                code="empty_string",
            )
    return inputs


async def handle_embeddings(plumbing: Plumbing, request: web.Request) -> web.Response:
    """The handler of ``POST /v1/embeddings``."""
    body = await plumbing.read_body(request, EMBEDDING_FIELDS)
    req = read_request(body)
    ctx, entry = await plumbing.resolve(request, req.model_id, "embed")
    embedder = entry.convention
    assert isinstance(embedder, Embedder)
    if req.dimensions is not None and embedder.dimensions not in (None, req.dimensions):
        raise v.unsupported(
            "dimensions", f"model '{req.model_id}' gives {embedder.dimensions} dimensions"
        )
    vectors = await _vectors(ctx, embedder, req.texts)
    if req.dimensions is not None and vectors.shape[1] != req.dimensions:
        raise v.unsupported(
            "dimensions", f"model '{req.model_id}' gives {vectors.shape[1]} dimensions"
        )
    tokenizer = Counter(await entry.tokenizer())
    tokens = sum(tokenizer.count(t) for t in req.texts)
    answer = {
        "object": "list",
        "data": _data(vectors, req.encoding),
        "model": req.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return json_response(answer, ctx.reply_headers)


async def _vectors(ctx: Context, embedder: Embedder, inputs: list[str]) -> np.ndarray:
    """The vectors of ``inputs``, a row each: the model's batches run concurrently; the
    first failure is the answer."""
    batches = embedder.batches(inputs)
    sizes = [
        (batches[i + 1][0] if i + 1 < len(batches) else len(inputs)) - start
        for i, (start, _) in enumerate(batches)
    ]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(infer_once(ctx, tensors, decoupled=embedder.decoupled))
                for _, tensors in batches
            ]
    except* TritonXError as failed:
        raise from_triton(failed.exceptions[0]) from None
    except* Exception as failed:  # e.g. OpenAIError, a model that sent no response
        raise failed.exceptions[0] from None
    return np.concatenate(
        [embedder.vectors(t.result().outputs, size) for t, size in zip(tasks, sizes, strict=True)]
    )


def _data(vectors: np.ndarray, encoding: str) -> list[dict[str, Any]]:
    """The answer's embedding objects."""
    data = []
    for index, vector in enumerate(vectors):
        value: Any
        if encoding == "base64":
            value = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        else:
            value = vector
        data.append({"object": "embedding", "index": index, "embedding": value})
    return data


__all__ = ["EMBEDDING_FIELDS", "EmbeddingRequest", "handle_embeddings", "read_request"]
