"""``POST /v1/completions``: text completion of one or more prompts.

The request's fields are read and checked (:func:`read_request`), the model found and its
choices started (``n`` a prompt, :mod:`.textgen`), and the answer is a ``text_completion``
object or its chunks as server-sent events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

import tritonx_frontend_openai.validation as v
from tritonx_frontend_openai.errors import invalid
from tritonx_frontend_openai.generation import Piece
from tritonx_frontend_openai.plumbing import MAX_EMBEDDING_INPUTS, texts
from tritonx_frontend_openai.sse import Chunks
from tritonx_frontend_openai.textgen import (
    GENERATION_FIELDS,
    Asked,
    Generation,
    GenerationPlumbing,
    MakeChoice,
    ranked,
    read_choices,
    read_sampling,
)

COMPLETION_FIELDS = frozenset({*GENERATION_FIELDS, "prompt", "best_of", "echo", "suffix"})
#: the most choices (prompts x n) one completion request may ask for: one model request each
MAX_CHOICES = 1024


@dataclass
class CompletionRequest:
    """A completion request's fields, checked.

    :ivar logprobs: how many candidates per token (None: no log probabilities).
    """

    asked: Asked
    prompts: list[str]
    logprobs: int | None
    echo: bool


def read_request(body: Mapping[str, Any], default_max_tokens: int) -> CompletionRequest:
    """Every field of a completion request checked, in the order OpenAI reports them."""
    model_id = v.required_str(body, "model")
    prompts = _prompts(body)
    stream, include_usage, n = read_choices(body)
    if len(prompts) * n > MAX_CHOICES:
        raise invalid(
            f"Invalid 'n': {len(prompts)} prompts with n={n} ask for more than "
            f"{MAX_CHOICES} choices.",
            param="n",
        )
    best_of = v.opt_int(body, "best_of", 0, 20)
    if best_of is not None and best_of > 1 and best_of != n:
        raise v.unsupported("best_of", "only best_of equal to n (or 1) is supported")
    if body.get("suffix") is not None:
        raise v.unsupported("suffix")
    logprobs = v.opt_int(body, "logprobs", 0, 5)
    echo = v.opt_bool(body, "echo")
    max_tokens = v.opt_int(body, "max_tokens", 1, v.INT32_MAX)
    sampling = read_sampling(body, max_tokens, default_max_tokens)
    asked = Asked(model_id, stream, include_usage, n, sampling)
    return CompletionRequest(asked, prompts, logprobs, echo)


def _prompts(body: Mapping[str, Any]) -> list[str]:
    prompts = texts(body, "prompt")
    if not prompts:
        raise v.wrong_type("prompt", "a string or an array of strings", body["prompt"])
    if any(not p for p in prompts):
        raise invalid("Invalid 'prompt': empty string.", param="prompt", code="empty_string")
    if len(prompts) > MAX_EMBEDDING_INPUTS:
        raise invalid(
            f"Invalid 'prompt': too many prompts (at most {MAX_EMBEDDING_INPUTS}).", "prompt"
        )
    return prompts


async def handle_completions(
    plumbing: GenerationPlumbing, request: web.Request
) -> web.StreamResponse:
    """The handler of ``POST /v1/completions``."""
    body = await plumbing.read_body(request, COMPLETION_FIELDS)
    req = read_request(body, plumbing.options.default_max_tokens)
    gen = await plumbing.open(request, req.asked, logprobs=req.logprobs is not None)
    streams = await gen.start("text_completion", req.prompts, logprobs=req.logprobs, echo=req.echo)
    if not req.asked.stream:
        return await gen.answer_whole(streams, _whole_choice(req.logprobs))
    return await gen.answer_stream(request, streams, _chunks(gen, req.logprobs, len(streams)), [])


def _whole_choice(logprobs: int | None) -> MakeChoice:
    """A choice of a whole answer, from its text, last piece and log probabilities."""

    def make(index: int, text: str, end: Piece, raw: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "index": index,
            "text": text,
            "logprobs": _logprobs(raw, logprobs, 0) if logprobs is not None else None,
            "finish_reason": end.finish_reason,
        }

    return make


def _chunks(gen: Generation, logprobs: int | None, count: int) -> Callable[[Piece], Chunks]:
    """The chunk each piece of a streamed answer becomes (a choice's text offsets kept for
    its log probabilities)."""
    offsets = [0] * count

    def chunks(piece: Piece) -> Chunks:
        item: dict[str, Any] = {
            "index": piece.index,
            "text": piece.text,
            "logprobs": None,
            "finish_reason": piece.finish_reason,
        }
        if logprobs is not None:
            item["logprobs"] = _logprobs(piece.logprobs, logprobs, offsets[piece.index])
        offsets[piece.index] += len(piece.text)
        chunk = {**gen.head, "choices": [item], "system_fingerprint": None}
        if gen.asked.include_usage:
            chunk["usage"] = None
        return [chunk]

    return chunks


def _logprobs(
    raw: Sequence[Mapping[str, Any]] | None, top: int, offset: int
) -> dict[str, Any] | None:
    """The completions API's log probabilities of a text (its first character at
    ``offset`` of the choice's text): None without any."""
    if not raw:
        return None
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    for entry in raw:
        candidates = ranked(entry)
        if not candidates:
            continue
        token = str(candidates[0].get("decoded_token", ""))
        offsets.append(offset)
        offset += len(token)
        tokens.append(token)
        token_logprobs.append(float(candidates[0].get("logprob", 0.0)))
        top_logprobs.append(
            {
                str(c.get("decoded_token", "")): float(c.get("logprob", 0.0))
                for c in candidates[:top]
            }
        )
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


__all__ = [
    "COMPLETION_FIELDS",
    "MAX_CHOICES",
    "CompletionRequest",
    "handle_completions",
    "read_request",
]
