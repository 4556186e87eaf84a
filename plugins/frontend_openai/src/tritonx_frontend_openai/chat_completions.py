"""``POST /v1/chat/completions``: the assistant's next message in a conversation.

The request's fields are read and checked (:func:`read_request`, :mod:`.chat_request`), the
model found, the conversation rendered by the model's chat template, its choices started
(:mod:`.textgen`), and the answer is a ``chat.completion`` object or its chunks as
server-sent events (:class:`ChatChunks`). With tools, the text is parsed for tool calls by the
model's tool-call parser (:mod:`.tools`), or is the arguments of the one function named.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

import tritonx_frontend_openai.validation as v
from tritonx_frontend_openai.catalog import Entry
from tritonx_frontend_openai.chat_request import (
    CHAT_FIELDS,
    UNSUPPORTED,
    ToolMode,
    check_extras,
    read_messages,
    read_tool_mode,
)
from tritonx_frontend_openai.errors import invalid
from tritonx_frontend_openai.generation import Piece
from tritonx_frontend_openai.sse import Chunks
from tritonx_frontend_openai.textgen import (
    Asked,
    Generation,
    GenerationPlumbing,
    MakeChoice,
    ranked,
    read_choices,
    read_sampling,
)
from tritonx_frontend_openai.tools import ParsedOutput, content_prefix_length

log = logging.getLogger("tritonx.frontend.openai")

#: a model's tool-call parser (:data:`.tools.TOOL_PARSERS`)
Parser = Callable[[str], ParsedOutput]


@dataclass
class ChatRequest:
    """A chat completion request's fields, checked.

    :ivar top_logprobs: candidates per token when log probabilities are asked (None: none).
    """

    asked: Asked
    messages: list[dict[str, Any]]
    top_logprobs: int | None
    tools: ToolMode


def read_request(body: Mapping[str, Any], default_max_tokens: int) -> ChatRequest:
    """Every field of a chat completion request checked, in the order OpenAI reports them."""
    model_id = v.required_str(body, "model")
    messages = read_messages(body)
    stream, include_usage, n = read_choices(body)
    for name in UNSUPPORTED:
        if body.get(name) is not None:
            raise v.unsupported(name)
    check_extras(body)
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
    tools = read_tool_mode(body)
    sampling = read_sampling(body, max_tokens, default_max_tokens)
    asked = Asked(model_id, stream, include_usage, n, sampling)
    return ChatRequest(asked, messages, (top_logprobs or 0) if want_logprobs else None, tools)


async def handle_chat_completions(
    plumbing: GenerationPlumbing, request: web.Request
) -> web.StreamResponse:
    """The handler of ``POST /v1/chat/completions``."""
    body = await plumbing.read_body(request, CHAT_FIELDS)
    req = read_request(body, plumbing.options.default_max_tokens)
    logprobs = req.top_logprobs is not None
    gen = await plumbing.open(request, req.asked, logprobs=logprobs, kind="chat")
    tools, parser = _tool_parser(gen.entry, req.tools)
    prompt = await _render(gen.entry, req.messages, tools)
    streams = await gen.start("chat.completion", [prompt], logprobs=req.top_logprobs)
    if not req.asked.stream:
        return await gen.answer_whole(streams, _whole_choice(req.top_logprobs, tools, parser))
    gen.head["object"] = "chat.completion.chunk"
    chunks = ChatChunks(gen, req.top_logprobs, tools, parser)
    return await gen.answer_stream(request, streams, chunks, chunks.opening())


def _tool_parser(entry: Entry, tools: ToolMode) -> tuple[ToolMode, Parser | None]:
    """The tool mode the answer follows and the parser its text goes through: a request
    for ``auto`` tool calls needs one; ``required`` without one answers with the first
    tool, as Triton does."""
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
    return tools, parser


async def _render(entry: Entry, messages: list[dict[str, Any]], tools: ToolMode) -> str:
    """The prompt: the conversation and the tools through the model's chat template."""
    template = await entry.template()
    try:
        return template.render(messages, tools=tools.tools, add_generation_prompt=True)
    except Exception as exc:  # the template refused the conversation (jinja's raise)
        raise invalid(f"The chat template cannot render these messages: {exc}", "messages") from exc


def _whole_choice(top_logprobs: int | None, tools: ToolMode, parser: Parser | None) -> MakeChoice:
    """A choice of a whole answer, from its text, last piece and log probabilities."""

    def make(index: int, text: str, end: Piece, raw: list[dict[str, Any]]) -> dict[str, Any]:
        message, reason = assistant_message(text, tools, parser, end.finish_reason)
        return {
            "index": index,
            "message": message,
            "logprobs": {"content": _logprobs(raw, top_logprobs)}
            if top_logprobs is not None
            else None,
            "finish_reason": reason,
        }

    return make


class ChatChunks:
    """The chunks each piece of a streamed chat answer becomes (call it with the piece).

    Plain text goes as it comes. With a tool-call parser, text that cannot be the start of a
    tool call goes at once and the rest is held back and parsed when the choice ends; with a
    named function, the text goes as that call's arguments.
    """

    def __init__(
        self, gen: Generation, top_logprobs: int | None, tools: ToolMode, parser: Parser | None
    ) -> None:
        self.gen = gen
        self.top_logprobs = top_logprobs
        self.tools = tools
        self.parser = parser
        self.parsing = tools.mode in ("auto", "required") and parser is not None
        n = gen.asked.n
        #: per choice: its text so far (parsing), how much of it is sent
        self.texts: dict[int, str] = dict.fromkeys(range(n), "")
        self.sent: dict[int, int] = dict.fromkeys(range(n), 0)
        #: the choices whose named call has sent its id and name
        self.named_started: set[int] = set()

    def opening(self) -> Chunks:
        """The first chunk of every choice: the assistant's role."""
        return [
            self.chunk(i, {"role": "assistant", "content": ""}) for i in range(self.gen.asked.n)
        ]

    def chunk(self, index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """A chunk carrying choice ``index``'s ``delta``."""
        item = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        item.update(extra)
        chunk = {**self.gen.head, "system_fingerprint": None, "choices": [item]}
        if self.gen.asked.include_usage:
            chunk["usage"] = None
        return chunk

    def __call__(self, piece: Piece) -> Chunks:
        out = self._text(piece) if piece.text else []
        if piece.finish_reason is not None:
            out.extend(self._end(piece))
        return out

    def _text(self, piece: Piece) -> Chunks:
        i = piece.index
        lp = None
        if self.top_logprobs is not None and piece.logprobs:
            lp = {"content": _logprobs(piece.logprobs, self.top_logprobs)}
        if self.parsing:
            # content the parser says cannot become a tool call goes now, the rest
            # is held back and parsed once the choice ends
            self.texts[i] += piece.text
            ready = content_prefix_length(self.gen.entry.tool_parser_name or "", self.texts[i])
            if ready <= self.sent[i]:
                return []
            content, self.sent[i] = self.texts[i][self.sent[i] : ready], ready
            return [self.chunk(i, {"content": content}, logprobs=lp)]
        if self.tools.mode == "named":
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece.text}}
            if i not in self.named_started:
                self.named_started.add(i)
                call["id"] = _call_id()
                call["type"] = "function"
                call["function"] = {"name": self.tools.name, "arguments": piece.text}
            return [self.chunk(i, {"tool_calls": [call]}, logprobs=lp)]
        return [self.chunk(i, {"content": piece.text}, logprobs=lp)]

    def _end(self, piece: Piece) -> Chunks:
        """A choice's last chunks: what parsing its text held back, its finish reason."""
        i = piece.index
        out = []
        reason: str | None = piece.finish_reason
        if self.parsing:
            message, reason = assistant_message(self.texts[i], self.tools, self.parser, reason)
            calls = message.get("tool_calls") or []
            if not calls:
                rest = self.texts[i][self.sent[i] :]
                if rest:
                    out.append(self.chunk(i, {"content": rest}))
            else:
                if message.get("content") and not self.sent[i]:
                    out.append(self.chunk(i, {"content": message["content"]}))
                deltas = [{"index": k, **c} for k, c in enumerate(calls)]
                out.append(self.chunk(i, {"tool_calls": deltas}))
        out.append(self.chunk(i, {}, finish_reason=reason))
        return out


def assistant_message(
    text: str, tools: ToolMode, parser: Parser | None, reason: str | None
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


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _tool_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id or _call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _logprobs(raw: Sequence[Mapping[str, Any]] | None, top: int) -> list[dict[str, Any]]:
    """The chat API's log probabilities of a text's tokens, ``top`` candidates each."""
    out = []
    for entry in raw or ():
        candidates = ranked(entry)
        if not candidates:
            continue
        chosen = candidates[0]
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
                    for c in candidates[:top]
                ],
            }
        )
    return out


__all__ = [
    "ChatChunks",
    "ChatRequest",
    "assistant_message",
    "handle_chat_completions",
    "read_request",
]
