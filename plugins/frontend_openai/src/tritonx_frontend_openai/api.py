"""The OpenAI API's handlers: models, completions, chat completions, embeddings.

Each handler reads and checks the body (:mod:`.validation`), finds the model version
(:class:`.catalog.Catalog` and the pipeline's ``resolve_loaded``), writes the model's requests
(:mod:`.conventions`), runs them through the server's request pipeline (:mod:`.generation`)
and answers in OpenAI's JSON, or as server-sent events (``data: {...}`` chunks ending with
``data: [DONE]``) when the client streams.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import orjson
from aiohttp import web

from tritonx import Code, ServerHandle, TritonXError
from tritonx.pipeline import Headers, Pipeline
from tritonx_frontend_openai import validation as v
from tritonx_frontend_openai.catalog import Catalog, Entry
from tritonx_frontend_openai.conventions import EXTRA_SAMPLING, Embedder, GenerateParams, Generator
from tritonx_frontend_openai.errors import OpenAIError, from_triton, invalid, model_not_found
from tritonx_frontend_openai.generation import (
    Context,
    Counter,
    Piece,
    choice,
    collect,
    infer_once,
    merged,
)
from tritonx_frontend_openai.options import Options
from tritonx_frontend_openai.tools import content_prefix_length

log = logging.getLogger("tritonx.frontend.openai")

#: fields every generation endpoint reads
_GENERATION_FIELDS = {
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
COMPLETION_FIELDS = frozenset({*_GENERATION_FIELDS, "prompt", "best_of", "echo", "suffix"})
CHAT_FIELDS = frozenset(
    {
        *_GENERATION_FIELDS,
        "messages",
        "max_completion_tokens",
        "top_logprobs",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "store",
        "metadata",
        "service_tier",
        "modalities",
        "functions",
        "function_call",
        "audio",
        "prediction",
        "reasoning_effort",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
#: chat fields this server refuses when set (OpenAI features it has no model for)
_CHAT_UNSUPPORTED = (
    "functions",
    "function_call",
    "audio",
    "prediction",
    "reasoning_effort",
    "web_search_options",
    "verbosity",
)
EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})

_ROLES = {"system", "developer", "user", "assistant", "tool"}
#: OpenAI's limits: messages' tools, embeddings' inputs
MAX_TOOLS = 128
MAX_EMBEDDING_INPUTS = 2048
#: the most choices (prompts x n) one completion request may ask for: one model request each
MAX_CHOICES = 1024

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _json(data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY),
        content_type="application/json",
        headers=headers,
    )


def _event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


@dataclass
class ToolMode:
    """How a chat request's tools shape its answer.

    :ivar mode: ``none`` (plain text), ``auto`` (the text parsed for tool calls), ``named``
        (the text is the arguments of the function ``name``) or ``required`` (parsed; the
        first tool's arguments when the parser found no call).
    """

    mode: str = "none"
    name: str | None = None
    tools: list[dict[str, Any]] | None = None


class API:
    """The handlers of one frontend.

    :param server: the server's handle.
    :param options: the frontend's settings.
    :param catalog: the served model ids.
    """

    def __init__(self, server: ServerHandle, options: Options, catalog: Catalog) -> None:
        self.server = server
        self.options = options
        self.catalog = catalog
        self._pipeline: Pipeline | None = None

    @property
    def pipeline(self) -> Pipeline:
        """The server's request pipeline (``ServerHandle.pipeline``), made on first use."""
        if self._pipeline is None:
            self._pipeline = self.server.pipeline()
        return self._pipeline

    # ------------------------------------------------------------------ models

    async def list_models(self, request: web.Request) -> web.Response:
        data = [entry.describe() for entry in self.catalog.listing()]
        return _json({"object": "list", "data": data})

    async def get_model(self, request: web.Request) -> web.Response:
        return _json(self.catalog.find(request.match_info["model"]).describe())

    # ------------------------------------------------------------------ shared steps

    async def _body(self, request: web.Request, known: frozenset[str]) -> dict[str, Any]:
        body = v.parse_body(await request.read())
        v.check_fields(body, known)
        return body

    async def _resolve(
        self, request: web.Request, model_id: str, kind: str
    ) -> tuple[Context, Entry]:
        """The pipeline's model lookup for ``model_id`` (loading it on demand) and its
        entry; OpenAI's 404 for an id not served."""
        model = self.catalog.model_for(model_id)
        try:
            served, _ = await self.pipeline.resolve_loaded(model, "", streaming=True)
        except TritonXError as exc:
            if exc.code is Code.NOT_FOUND:
                raise model_not_found(model_id) from None
            raise from_triton(exc) from None
        entry = self.catalog.entry(model_id, served.config, kind)
        prefix = "embd" if kind == "embed" else "cmpl"
        # aiohttp's headers are what the pipeline reads (get, in, items), though mypy does
        # not match CIMultiDictProxy's overloaded get with the Headers protocol
        headers = cast(Headers, request.headers)
        ctx = Context(self.pipeline, served, headers, f"{prefix}-{uuid.uuid4().hex}")
        return ctx, entry

    def _sampling(self, body: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
        """The GenerateParams fields common to completions and chat (checked before the
        model is looked up: bad input never loads a model)."""
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
            "max_tokens": max_tokens if max_tokens is not None else self.options.default_max_tokens,
            "stop": v.stop_sequences(body),
            "temperature": v.opt_float(body, "temperature", 0.0, 2.0),
            "top_p": v.opt_float(body, "top_p", 0.0, 1.0),
            "seed": v.opt_int(body, "seed", *v.INT64),
            "frequency_penalty": v.opt_float(body, "frequency_penalty", -2.0, 2.0),
            "presence_penalty": v.opt_float(body, "presence_penalty", -2.0, 2.0),
            "extra": extra,
        }

    @staticmethod
    def _seeded(params: GenerateParams, i: int) -> GenerateParams:
        """Choice ``i`` of a request for several: its own seed when the request set one."""
        if i == 0 or params.seed is None:
            return params
        seed = (params.seed + i + (1 << 63)) % (1 << 64) - (1 << 63)
        return dataclasses.replace(params, seed=seed)

    async def _stream(
        self,
        request: web.Request,
        pieces: AsyncGenerator[Piece, None],
        chunks: Callable[[Piece], list[dict[str, Any]]],
        opening: list[dict[str, Any]],
        closing: Callable[[], list[dict[str, Any]]],
        ctx: Context,
    ) -> web.StreamResponse:
        """Answer with server-sent events: ``opening`` chunks, ``chunks(piece)`` for each
        piece, ``closing()`` chunks, ``[DONE]``. The first piece is awaited before the answer
        starts, so a request the model refuses gets an HTTP error; a later failure ends the
        stream with an error event. A client gone mid-stream closes ``pieces`` (the handler
        is cancelled), which cancels the model's requests."""
        async with contextlib.aclosing(pieces):
            try:
                first = await anext(pieces)
            except StopAsyncIteration:
                first = None
            except TritonXError as exc:
                raise from_triton(exc) from None
            response = web.StreamResponse(headers={**_SSE_HEADERS, **ctx.reply_headers})
            await response.prepare(request)
            try:
                for chunk in opening:
                    await response.write(_event(chunk))
                if first is not None:
                    for chunk in chunks(first):
                        await response.write(_event(chunk))
                    try:
                        async for piece in pieces:
                            for chunk in chunks(piece):
                                await response.write(_event(chunk))
                    except Exception as exc:  # the answer has begun: an error event ends it
                        if isinstance(exc, ConnectionError):
                            raise
                        error = from_triton(exc)
                        if isinstance(exc, OpenAIError | TritonXError):
                            log.info("stream %s ended by an error: %s", ctx.request_id, error)
                        else:
                            log.exception("stream %s failed", ctx.request_id)
                            error.message = "The server had an error while processing your request."
                        await response.write(_event(error.body()))
                        await response.write(b"data: [DONE]\n\n")
                        return response
                for chunk in closing():
                    await response.write(_event(chunk))
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
            except ConnectionError:  # the client went away: leaving closes ``pieces``
                log.debug("client of %s went away", ctx.request_id)
            return response

    # ------------------------------------------------------------------ completions

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request, COMPLETION_FIELDS)
        model_id = v.required_str(body, "model")
        prompts = _prompts(body)
        stream = v.opt_bool(body, "stream")
        include_usage = v.stream_options(body, stream)
        n = v.opt_int(body, "n", 1, 128) or 1
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
        v.opt_str(body, "user")
        common = self._sampling(body, max_tokens)
        ctx, entry = await self._resolve(request, model_id, "generate")
        convention = entry.convention
        assert isinstance(convention, Generator)
        if logprobs is not None and not convention.logprobs:
            raise _no_logprobs(model_id)
        common["stream"] = stream and convention.decoupled
        counter = Counter(await entry.tokenizer())
        streams = []
        for p, prompt in enumerate(prompts):
            params = GenerateParams(prompt=prompt, logprobs=logprobs, echo=echo, **common)
            for i in range(n):
                index = p * n + i
                streams.append(choice(ctx, convention, self._seeded(params, i), index, counter))
        created = int(time.time())
        head = {"id": ctx.request_id, "object": "text_completion", "created": created}
        head["model"] = model_id
        offsets = [0] * len(streams)

        def choice_json(piece: Piece) -> dict[str, Any]:
            out: dict[str, Any] = {
                "index": piece.index,
                "text": piece.text,
                "logprobs": None,
                "finish_reason": piece.finish_reason,
            }
            if logprobs is not None:
                out["logprobs"] = _completion_logprobs(
                    piece.logprobs, logprobs, offsets[piece.index]
                )
            offsets[piece.index] += len(piece.text)
            return out

        if not stream:
            pieces = await self._collect(merged(streams))
            outs, ends, raw = _gather(pieces, len(streams))
            choices = []
            for index, text in enumerate(outs):
                c = {
                    "index": index,
                    "text": text,
                    "logprobs": _completion_logprobs(raw[index], logprobs, 0)
                    if logprobs is not None
                    else None,
                    "finish_reason": ends[index].finish_reason,
                }
                choices.append(c)
            answer = {**head, "choices": choices, "usage": _usage(ends, len(prompts), n)}
            answer["system_fingerprint"] = None
            return _json(answer, ctx.reply_headers)
        finals: list[Piece] = []

        def chunks(piece: Piece) -> list[dict[str, Any]]:
            if piece.finish_reason is not None:
                finals.append(piece)
            chunk = {**head, "choices": [choice_json(piece)], "system_fingerprint": None}
            if include_usage:
                chunk["usage"] = None
            return [chunk]

        def closing() -> list[dict[str, Any]]:
            if not include_usage:
                return []
            usage = _usage(finals, len(prompts), n)
            return [{**head, "choices": [], "usage": usage, "system_fingerprint": None}]

        return await self._stream(request, merged(streams), chunks, [], closing, ctx)

    # ------------------------------------------------------------------ chat

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request, CHAT_FIELDS)
        model_id = v.required_str(body, "model")
        messages = _messages(body)
        stream = v.opt_bool(body, "stream")
        include_usage = v.stream_options(body, stream)
        n = v.opt_int(body, "n", 1, 128) or 1
        for name in _CHAT_UNSUPPORTED:
            if body.get(name) is not None:
                raise v.unsupported(name)
        _check_chat_extras(body)
        want_logprobs = v.opt_bool(body, "logprobs")
        top_logprobs = v.opt_int(body, "top_logprobs", 0, 20)
        if top_logprobs is not None and not want_logprobs:
            raise invalid(
                "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
                "'top_logprobs' is used.",
                param="top_logprobs",
            )
        max_tokens = v.opt_int(body, "max_completion_tokens", 1, v.INT32_MAX)
        if max_tokens is None:
            max_tokens = v.opt_int(body, "max_tokens", 1, v.INT32_MAX)
        tools = _tool_mode(body)
        v.opt_str(body, "user")
        common = self._sampling(body, max_tokens)
        ctx, entry = await self._resolve(request, model_id, "generate")
        ctx.request_id = "chat" + ctx.request_id
        convention = entry.convention
        assert isinstance(convention, Generator)
        if want_logprobs and not convention.logprobs:
            raise _no_logprobs(model_id)
        parser = entry.tool_parser() if tools.mode in ("auto", "required") else None
        if tools.mode == "auto" and parser is None:
            raise invalid(
                "Tools with tool_choice 'auto' need a tool call parser: set "
                "--frontend-config openai,tool_call_parser=<parser> or the model's "
                "tool_call_parser parameter.",
                param="tools",
            )
        if tools.mode == "required" and parser is None:  # the first tool, as Triton does
            tools = ToolMode("named", tools.name, tools=tools.tools)
        template = await entry.template()
        try:
            prompt = template.render(messages, tools=tools.tools, add_generation_prompt=True)
        except Exception as exc:  # the template refused the conversation (jinja's raise)
            raise invalid(
                f"The chat template cannot render these messages: {exc}", "messages"
            ) from exc
        common["stream"] = stream and convention.decoupled
        counter = Counter(await entry.tokenizer())
        params = GenerateParams(
            prompt=prompt, logprobs=(top_logprobs or 0) if want_logprobs else None, **common
        )
        streams = [choice(ctx, convention, self._seeded(params, i), i, counter) for i in range(n)]
        created = int(time.time())
        head = {
            "id": ctx.request_id,
            "object": "chat.completion",
            "created": created,
            "model": model_id,
        }
        if not stream:
            pieces = await self._collect(merged(streams))
            outs, ends, raw = _gather(pieces, n)
            choices = []
            for index, text in enumerate(outs):
                message, reason = _chat_message(text, tools, parser, ends[index].finish_reason)
                choices.append(
                    {
                        "index": index,
                        "message": message,
                        "logprobs": {"content": _chat_logprobs(raw[index], top_logprobs or 0)}
                        if want_logprobs
                        else None,
                        "finish_reason": reason,
                    }
                )
            answer = {**head, "choices": choices, "usage": _usage(ends, 1, n)}
            answer["system_fingerprint"] = None
            return _json(answer, ctx.reply_headers)

        head["object"] = "chat.completion.chunk"
        finals: list[Piece] = []
        parsing = tools.mode in ("auto", "required") and parser is not None
        texts: dict[int, str] = dict.fromkeys(range(n), "")
        sent: dict[int, int] = dict.fromkeys(range(n), 0)  # content already sent (parsing)
        named_started: set[int] = set()

        def chunk_of(index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
            item = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
            item.update(extra)
            chunk = {**head, "system_fingerprint": None, "choices": [item]}
            if include_usage:
                chunk["usage"] = None
            return chunk

        def chunks(piece: Piece) -> list[dict[str, Any]]:
            i = piece.index
            lp = (
                {"content": _chat_logprobs(piece.logprobs, top_logprobs or 0)}
                if want_logprobs and piece.logprobs
                else None
            )
            out = []
            if piece.text and parsing:
                # content the parser says cannot become a tool call goes now, the rest
                # is held back and parsed once the choice ends
                texts[i] += piece.text
                ready = content_prefix_length(entry.tool_parser_name or "", texts[i])
                if ready > sent[i]:
                    out.append(chunk_of(i, {"content": texts[i][sent[i] : ready]}, logprobs=lp))
                    sent[i] = ready
            elif piece.text and tools.mode == "named":
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece.text}}
                if i not in named_started:
                    named_started.add(i)
                    call["id"] = f"call_{uuid.uuid4().hex[:24]}"
                    call["type"] = "function"
                    call["function"] = {"name": tools.name, "arguments": piece.text}
                out.append(chunk_of(i, {"tool_calls": [call]}, logprobs=lp))
            elif piece.text:
                out.append(chunk_of(i, {"content": piece.text}, logprobs=lp))
            if piece.finish_reason is None:
                return out
            finals.append(piece)
            reason: str | None = piece.finish_reason
            if parsing:
                message, reason = _chat_message(texts[i], tools, parser, reason)
                calls = message.get("tool_calls") or []
                if not calls:
                    rest = texts[i][sent[i] :]
                    if rest:
                        out.append(chunk_of(i, {"content": rest}))
                else:
                    if message.get("content") and not sent[i]:
                        out.append(chunk_of(i, {"content": message["content"]}))
                    deltas = [{"index": k, **c} for k, c in enumerate(calls)]
                    out.append(chunk_of(i, {"tool_calls": deltas}))
            out.append(chunk_of(i, {}, finish_reason=reason))
            return out

        def closing() -> list[dict[str, Any]]:
            if not include_usage:
                return []
            usage = _usage(finals, 1, n)
            return [{**head, "choices": [], "usage": usage, "system_fingerprint": None}]

        opening = [chunk_of(i, {"role": "assistant", "content": ""}) for i in range(n)]
        return await self._stream(request, merged(streams), chunks, opening, closing, ctx)

    # ------------------------------------------------------------------ embeddings

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await self._body(request, EMBEDDING_FIELDS)
        model_id = v.required_str(body, "model")
        texts = _embedding_inputs(body)
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
        ctx, entry = await self._resolve(request, model_id, "embed")
        embedder = entry.convention
        assert isinstance(embedder, Embedder)
        if dimensions is not None and embedder.dimensions not in (None, dimensions):
            raise v.unsupported(
                "dimensions", f"model '{model_id}' gives {embedder.dimensions} dimensions"
            )
        batches = embedder.batches(texts)
        sizes = [
            (batches[i + 1][0] if i + 1 < len(batches) else len(texts)) - start
            for i, (start, _) in enumerate(batches)
        ]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(infer_once(ctx, inputs, decoupled=embedder.decoupled))
                    for _, inputs in batches
                ]
        except* TritonXError as failed:
            raise from_triton(failed.exceptions[0]) from None
        except* Exception as failed:  # e.g. OpenAIError, a model that sent no response
            raise failed.exceptions[0] from None
        vectors = np.concatenate(
            [
                embedder.vectors(t.result().outputs, size)
                for t, size in zip(tasks, sizes, strict=True)
            ]
        )
        if dimensions is not None and vectors.shape[1] != dimensions:
            raise v.unsupported(
                "dimensions", f"model '{model_id}' gives {vectors.shape[1]} dimensions"
            )
        tokenizer = Counter(await entry.tokenizer())
        tokens = sum(tokenizer.count(t) for t in texts)
        data = []
        for index, vector in enumerate(vectors):
            value: Any
            if encoding == "base64":
                value = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
            else:
                value = vector
            data.append({"object": "embedding", "index": index, "embedding": value})
        answer = {
            "object": "list",
            "data": data,
            "model": model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return _json(answer, ctx.reply_headers)

    @staticmethod
    async def _collect(stream: AsyncGenerator[Piece, None]) -> list[Piece]:
        try:
            return await collect(stream)
        except TritonXError as exc:
            raise from_triton(exc) from None


# ---------------------------------------------------------------------- request fields


def _texts(body: Mapping[str, Any], field: str) -> list[str]:
    """``body[field]``, a string or an array of strings, as a list (an empty array: []);
    absent, token ids or another type: OpenAI's 400."""
    value = body.get(field)
    if value is None:
        raise v.missing(field)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return value
    if isinstance(value, list) and all(isinstance(t, int | list) for t in value):
        raise v.unsupported(field, "token ids are not supported, send text")
    raise v.wrong_type(field, "a string or an array of strings", value)


def _prompts(body: Mapping[str, Any]) -> list[str]:
    prompts = _texts(body, "prompt")
    if not prompts:
        raise v.wrong_type("prompt", "a string or an array of strings", body["prompt"])
    if any(not p for p in prompts):
        raise invalid("Invalid 'prompt': empty string.", param="prompt", code="empty_string")
    if len(prompts) > MAX_EMBEDDING_INPUTS:
        raise invalid(
            f"Invalid 'prompt': too many prompts (at most {MAX_EMBEDDING_INPUTS}).", "prompt"
        )
    return prompts


def _text_content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise v.wrong_type(where, "a string or an array of content parts", value)
    parts = []
    for k, part in enumerate(value):
        if not isinstance(part, dict):
            raise v.wrong_type(f"{where}[{k}]", "an object", part)
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise v.wrong_type(f"{where}[{k}].text", "a string", text)
            parts.append(text)
        elif kind in ("image_url", "input_audio", "file", "refusal"):
            raise v.unsupported(f"{where}[{k}]", f"content parts of type '{kind}' (only text)")
        else:
            raise invalid(
                f"Invalid value for '{where}[{k}].type': expected 'text'.",
                param=f"{where}[{k}].type",
                code="invalid_value",
            )
    return "\n".join(parts)


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation for the chat template: roles checked, content as text (parts
    joined), tool calls' arguments as objects; ``developer`` becomes ``system``."""
    if "messages" not in body or body["messages"] is None:
        raise v.missing("messages")
    raw = body["messages"]
    if not isinstance(raw, list):
        raise v.wrong_type("messages", "an array", raw)
    v.array_length("messages", raw, low=1)
    out = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise v.wrong_type(where, "an object", message)
        role = message.get("role")
        if role is None:
            raise v.missing(f"{where}.role")
        if not isinstance(role, str):
            raise v.wrong_type(f"{where}.role", "a string", role)
        if role not in _ROLES:
            raise invalid(
                f"Invalid value: '{role}'. Supported values are: 'system', 'developer', "
                "'user', 'assistant' and 'tool'.",
                param=f"{where}.role",
                code="invalid_value",
            )
        item: dict[str, Any] = {"role": "system" if role == "developer" else role}
        content = message.get("content")
        calls = message.get("tool_calls") if role == "assistant" else None
        if content is None:
            if not calls:
                raise v.missing(f"{where}.content")
            item["content"] = None
        else:
            item["content"] = _text_content(content, f"{where}.content")
        name = message.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise v.wrong_type(f"{where}.name", "a string", name)
            item["name"] = name
        if calls:
            item["tool_calls"] = _message_tool_calls(calls, f"{where}.tool_calls")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                if call_id is None:
                    raise v.missing(f"{where}.tool_call_id")
                raise v.wrong_type(f"{where}.tool_call_id", "a string", call_id)
            item["tool_call_id"] = call_id
        out.append(item)
    return out


def _message_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise v.wrong_type(where, "an array", calls)
    out = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise v.wrong_type(f"{where}[{k}]", "a function tool call object", call)
        function = call["function"]
        name = function.get("name")
        if not isinstance(name, str):
            raise v.wrong_type(f"{where}[{k}].function.name", "a string", name)
        arguments = function.get("arguments", "{}")
        parsed: Any = arguments
        if isinstance(arguments, str):  # templates expect objects (transformers' convention)
            try:
                parsed = orjson.loads(arguments) if arguments else {}
            except orjson.JSONDecodeError:
                parsed = arguments
        out.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": name, "arguments": parsed},
            }
        )
    return out


def _tool_mode(body: Mapping[str, Any]) -> ToolMode:
    tools = body.get("tools")
    choice_ = body.get("tool_choice")
    v.opt_bool(body, "parallel_tool_calls", True)
    if tools is None:
        if choice_ is not None and choice_ != "none":
            raise invalid(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
                param="tool_choice",
            )
        return ToolMode()
    if not isinstance(tools, list):
        raise v.wrong_type("tools", "an array", tools)
    v.array_length("tools", tools, high=MAX_TOOLS)
    names = []
    for k, tool in enumerate(tools):
        where = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise v.wrong_type(where, "an object", tool)
        if tool.get("type") != "function":
            raise invalid(
                f"Invalid value for '{where}.type': only 'function' tools are supported.",
                param=f"{where}.type",
                code="invalid_value",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise v.missing(f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise v.missing(f"{where}.function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise v.wrong_type(f"{where}.function.parameters", "an object", parameters)
        names.append(name)
    if not tools:
        return ToolMode()
    if choice_ is None or choice_ == "auto":
        return ToolMode("auto", tools=tools)
    if choice_ == "none":
        return ToolMode("none", tools=tools)
    if choice_ == "required":
        return ToolMode("required", names[0], tools=tools)
    if isinstance(choice_, dict):
        function = choice_.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice_.get("type") != "function" or not isinstance(name, str):
            raise invalid(
                "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
                "{'type': 'function', 'function': {'name': ...}}.",
                param="tool_choice",
                code="invalid_value",
            )
        if name not in names:
            raise invalid(
                f"Invalid value for 'tool_choice': tool '{name}' is not in 'tools'.",
                param="tool_choice",
                code="invalid_value",
            )
        return ToolMode("named", name, tools=tools)
    raise invalid(
        f"Invalid value for 'tool_choice': {orjson.dumps(choice_).decode()}.",
        param="tool_choice",
        code="invalid_value",
    )


def _check_chat_extras(body: Mapping[str, Any]) -> None:
    """The chat fields that are accepted only in the form this server honours."""
    response_format = v.opt_object(body, "response_format")
    if response_format is not None and response_format.get("type", "text") != "text":
        raise v.unsupported("response_format", "only {'type': 'text'}")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise v.unsupported("modalities", "only ['text']")
    if v.opt_bool(body, "store"):
        raise v.unsupported("store", "completions are not stored")
    v.opt_object(body, "metadata")
    for name in ("service_tier", "prompt_cache_key", "safety_identifier"):
        v.opt_str(body, name)


def _embedding_inputs(body: Mapping[str, Any]) -> list[str]:
    texts = _texts(body, "input")
    value = body["input"]
    v.array_length("input", texts, low=1, high=MAX_EMBEDDING_INPUTS)
    for i, text in enumerate(texts):
        if not text:
            where = "input" if isinstance(value, str) else f"input[{i}]"
            raise invalid(
                f"Invalid '{where}': empty string. Expected a string with minimum length 1.",
                param=where,
                code="empty_string",
            )
    return texts


def _no_logprobs(model_id: str) -> OpenAIError:
    return invalid(
        f"logprobs are not available for model '{model_id}' (it has no return_logprobs input "
        "and logprobs output in vLLM's format).",
        param="logprobs",
        code="unsupported_parameter",
    )


# ---------------------------------------------------------------------- answers


def _gather(
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


def _usage(finals: Sequence[Piece], prompts: int, n: int) -> dict[str, int]:
    """OpenAI's usage: each prompt counted once, every choice's generated tokens."""
    seen: dict[int, int] = {}
    for piece in finals:
        seen.setdefault(piece.index // n, piece.prompt_tokens)
    prompt = sum(seen.values())
    completion = sum(p.completion_tokens for p in finals)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _chat_message(
    text: str, tools: ToolMode, parser: Callable[[str], Any] | None, reason: str | None
) -> tuple[dict[str, Any], str | None]:
    """The assistant message of a chat choice and its finish reason, tool calls parsed out
    of the text as the request's tool mode says."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tools.mode == "named":
        message["content"] = None
        message["tool_calls"] = [_tool_call(None, tools.name or "", text)]
        return message, reason
    if tools.mode in ("auto", "required") and parser is not None:
        try:
            parsed = parser(text)
        except Exception as exc:  # a parser's bug must not lose the answer
            log.warning("tool call parser failed: %s", exc)
            parsed = None
        if parsed is not None and parsed.tool_calls:
            message["content"] = parsed.content or None
            message["tool_calls"] = [
                _tool_call(c.id, c.name, c.arguments) for c in parsed.tool_calls
            ]
            return message, "tool_calls"
    if tools.mode == "required":
        message["content"] = None
        message["tool_calls"] = [_tool_call(None, tools.name or "", text)]
        return message, "tool_calls"
    return message, reason


def _tool_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id or f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _ranked(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """One position's candidates (vLLM: token id -> {logprob, rank, decoded_token}), the
    chosen token first."""
    values = [c for c in entry.values() if isinstance(c, dict)]
    return sorted(values, key=lambda c: c.get("rank") or sys.maxsize)


def _chat_logprobs(raw: Sequence[Mapping[str, Any]] | None, top: int) -> list[dict[str, Any]]:
    out = []
    for entry in raw or ():
        ranked = _ranked(entry)
        if not ranked:
            continue
        chosen = ranked[0]
        token = str(chosen.get("decoded_token", ""))
        out.append(
            {
                "token": token,
                "logprob": float(chosen.get("logprob", 0.0)),
                "bytes": list(token.encode("utf-8")),
                "top_logprobs": [
                    {
                        "token": str(c.get("decoded_token", "")),
                        "logprob": float(c.get("logprob", 0.0)),
                        "bytes": list(str(c.get("decoded_token", "")).encode("utf-8")),
                    }
                    for c in ranked[:top]
                ],
            }
        )
    return out


def _completion_logprobs(
    raw: Sequence[Mapping[str, Any]] | None, top: int, offset: int
) -> dict[str, Any] | None:
    if not raw:
        return None
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    for entry in raw:
        ranked = _ranked(entry)
        if not ranked:
            continue
        token = str(ranked[0].get("decoded_token", ""))
        offsets.append(offset)
        offset += len(token)
        tokens.append(token)
        token_logprobs.append(float(ranked[0].get("logprob", 0.0)))
        top_logprobs.append(
            {str(c.get("decoded_token", "")): float(c.get("logprob", 0.0)) for c in ranked[:top]}
        )
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


__all__ = ["API", "CHAT_FIELDS", "COMPLETION_FIELDS", "EMBEDDING_FIELDS"]
