"""The steps the two text-generation endpoints (``/v1/completions``, ``/v1/chat/completions``)
share, in the order a request takes them:

1. read the fields both know (:func:`read_choices`, then :func:`read_sampling`), before the
   model is looked up, so that bad input never loads a model;
2. find the model (:meth:`GenerationPlumbing.open`): a :class:`Generation`;
3. start its choices (:meth:`Generation.start`): one model request each, ``n`` per prompt;
4. answer: whole (:meth:`Generation.answer_whole`) or as server-sent events
   (:meth:`Generation.answer_stream`), each endpoint writing its own choice objects.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

import tritonx_frontend_openai.validation as v
from tritonx import TritonXError
from tritonx_frontend_openai.catalog import Entry
from tritonx_frontend_openai.conventions import EXTRA_SAMPLING, GenerateParams, Generator
from tritonx_frontend_openai.errors import OpenAIError, from_triton, invalid
from tritonx_frontend_openai.generation import Context, Counter, Piece, choice, collect, merged
from tritonx_frontend_openai.plumbing import Plumbing, json_response
from tritonx_frontend_openai.sse import Chunks, stream_events

#: fields every generation endpoint reads
GENERATION_FIELDS = frozenset(
    {
        "model",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "user",
        *EXTRA_SAMPLING,
    }
)

Stream = AsyncGenerator[Piece, None]
#: a choice object of a whole answer, from its index, text, last piece and log probabilities
MakeChoice = Callable[[int, str, Piece, list[dict[str, Any]]], dict[str, Any]]


@dataclass
class Asked:
    """What both generation endpoints read of a request body.

    :ivar sampling: the :class:`.conventions.GenerateParams` fields both set
        (:func:`read_sampling`).
    """

    model_id: str
    stream: bool
    include_usage: bool
    n: int
    sampling: dict[str, Any] = field(default_factory=dict)


def read_choices(body: Mapping[str, Any]) -> tuple[bool, bool, int]:
    """``stream``, ``stream_options.include_usage`` and ``n``."""
    stream = v.opt_bool(body, "stream")
    include_usage = v.stream_options(body, stream)
    n = v.opt_int(body, "n", 1, 128) or 1
    return stream, include_usage, n


def read_sampling(
    body: Mapping[str, Any], max_tokens: int | None, default_max_tokens: int
) -> dict[str, Any]:
    """The GenerateParams fields common to completions and chat (``user`` checked too)."""
    v.opt_str(body, "user")
    extra: dict[str, Any] = {}
    for name in EXTRA_SAMPLING:
        if body.get(name) is None:
            continue
        if name == "ignore_eos":
            extra[name] = v.opt_bool(body, name)
        elif name in ("top_k", "min_tokens"):
            extra[name] = v.opt_int(body, name, -1 if name == "top_k" else 0, v.INT32_MAX)
        else:
            extra[name] = v.opt_float(body, name, 0.0)
    if body.get("logit_bias"):
        raise v.unsupported("logit_bias")
    return {
        "max_tokens": max_tokens if max_tokens is not None else default_max_tokens,
        "stop": v.stop_sequences(body),
        "temperature": v.opt_float(body, "temperature", 0.0, 2.0),
        "top_p": v.opt_float(body, "top_p", 0.0, 1.0),
        "seed": v.opt_int(body, "seed", *v.INT64),
        "frequency_penalty": v.opt_float(body, "frequency_penalty", -2.0, 2.0),
        "presence_penalty": v.opt_float(body, "presence_penalty", -2.0, 2.0),
        "extra": extra,
    }


def seeded(params: GenerateParams, i: int) -> GenerateParams:
    """Choice ``i`` of a request for several: its own seed when the request set one."""
    if i == 0 or params.seed is None:
        return params
    seed = (params.seed + i + (1 << 63)) % (1 << 64) - (1 << 63)
    return dataclasses.replace(params, seed=seed)


def no_logprobs(model_id: str) -> OpenAIError:
    """OpenAI's 400 for logprobs asked of a model that cannot give them."""
    return invalid(
        f"logprobs are not available for model '{model_id}' (it has no return_logprobs input "
        "and logprobs output in vLLM's format).",
        param="logprobs",
        code="unsupported_parameter",
    )


class GenerationPlumbing(Plumbing):
    """:class:`.plumbing.Plumbing` with the generation endpoints' model lookup."""

    async def open(
        self, request: web.Request, asked: Asked, *, logprobs: bool, kind: str = ""
    ) -> Generation:
        """Find the text-generation model the request names (step 2); ``kind`` prefixes the
        request id (``chat``); OpenAI's 400 for ``logprobs`` asked of a model without."""
        ctx, entry = await self.resolve(request, asked.model_id, "generate")
        ctx.request_id = kind + ctx.request_id
        convention = entry.convention
        assert isinstance(convention, Generator)
        if logprobs and not convention.logprobs:
            raise no_logprobs(asked.model_id)
        return Generation(asked, ctx, entry, convention)


@dataclass
class Generation:
    """One generation request, its model found.

    :ivar head: the fields every answer object starts with (``id``, ``object``,
        ``created``, ``model``), set by :meth:`start`.
    """

    asked: Asked
    ctx: Context
    entry: Entry
    convention: Generator
    head: dict[str, Any] = field(default_factory=dict)

    async def start(self, obj: str, prompts: Sequence[str], **fields: Any) -> list[Stream]:
        """The choices (step 3): ``n`` a prompt, choice ``p * n + i`` the ``i``-th of prompt
        ``p``, each a :class:`.conventions.GenerateParams` of ``fields`` and the sampling
        fields; ``obj`` names the answer's ``object``."""
        asked = self.asked
        asked.sampling["stream"] = asked.stream and self.convention.decoupled
        counter = Counter(await self.entry.tokenizer())
        streams = []
        for p, prompt in enumerate(prompts):
            params = GenerateParams(prompt=prompt, **fields, **asked.sampling)
            for i in range(asked.n):
                index = p * asked.n + i
                streams.append(choice(self.ctx, self.convention, seeded(params, i), index, counter))
        created = int(time.time())
        self.head = {"id": self.ctx.request_id, "object": obj, "created": created}
        self.head["model"] = asked.model_id
        return streams

    async def answer_whole(
        self,
        streams: Sequence[Stream],
        make_choice: MakeChoice,
    ) -> web.Response:
        """The JSON answer of a request that does not stream: ``make_choice(index, text,
        last piece, log probabilities)`` a choice, then the usage."""
        pieces = await collect_pieces(merged(streams))
        outs, ends, raw = gather(pieces, len(streams))
        choices = [make_choice(i, text, ends[i], raw[i]) for i, text in enumerate(outs)]
        answer = {**self.head, "choices": choices, "usage": self.usage(ends)}
        answer["system_fingerprint"] = None
        return json_response(answer, self.ctx.reply_headers)

    async def answer_stream(
        self,
        request: web.Request,
        streams: Sequence[Stream],
        chunks: Callable[[Piece], Chunks],
        opening: Chunks,
    ) -> web.StreamResponse:
        """The server-sent events of a streaming request: ``opening``, ``chunks(piece)``
        each piece, the usage chunk when the client asked for it."""
        finals: list[Piece] = []

        def counted(piece: Piece) -> Chunks:
            if piece.finish_reason is not None:
                finals.append(piece)
            return chunks(piece)

        def closing() -> Chunks:
            if not self.asked.include_usage:
                return []
            usage = self.usage(finals)
            return [{**self.head, "choices": [], "usage": usage, "system_fingerprint": None}]

        return await stream_events(request, merged(streams), counted, opening, closing, self.ctx)

    def usage(self, finals: Sequence[Piece]) -> dict[str, int]:
        """OpenAI's usage: each prompt counted once, every choice's generated tokens."""
        seen: dict[int, int] = {}
        for piece in finals:
            seen.setdefault(piece.index // self.asked.n, piece.prompt_tokens)
        prompt = sum(seen.values())
        completion = sum(p.completion_tokens for p in finals)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


async def collect_pieces(stream: Stream) -> list[Piece]:
    """Every piece of a request that does not stream; a model's error as OpenAI's."""
    try:
        return await collect(stream)
    except TritonXError as exc:
        raise from_triton(exc) from None


def gather(
    pieces: Sequence[Piece], count: int
) -> tuple[list[str], list[Piece], list[list[dict[str, Any]]]]:
    """Per choice: its text, its last piece (reason, counts) and its log probabilities."""
    texts: list[list[str]] = [[] for _ in range(count)]
    logprobs: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    finals: list[Piece | None] = [None] * count
    for piece in pieces:
        texts[piece.index].append(piece.text)
        if piece.logprobs:
            logprobs[piece.index].extend(piece.logprobs)
        if piece.finish_reason is not None:
            finals[piece.index] = piece
    done = [f if f is not None else Piece(i, finish_reason="stop") for i, f in enumerate(finals)]
    return ["".join(t) for t in texts], done, logprobs


def ranked(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """One position's candidates (vLLM: token id -> {logprob, rank, decoded_token}), the
    chosen token first."""
    values = [c for c in entry.values() if isinstance(c, dict)]
    return sorted(values, key=lambda c: c.get("rank") or sys.maxsize)


__all__ = [
    "GENERATION_FIELDS",
    "Asked",
    "Generation",
    "GenerationPlumbing",
    "MakeChoice",
    "Stream",
    "collect_pieces",
    "gather",
    "no_logprobs",
    "ranked",
    "read_choices",
    "read_sampling",
    "seeded",
]
