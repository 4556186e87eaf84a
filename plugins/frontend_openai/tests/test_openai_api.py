"""The OpenAI API through the official ``openai`` client (sync and async, unchanged) against an
in-process ``tritonx.Server``: models, chat completions (plain, streamed token by token,
tool calls), completions, embeddings, the parameters reaching the models, and OpenAI's error
answers for bad input and faults (a client leaving mid-stream, a model failing mid-stream)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import openai
import pytest

from tritonx import Server

MOCK_REPLY = "Hello! I am the tritonx mock LLM. This reply is fixed, one word per token."
USER = "user"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
TOOL_CALL = '[[reply:<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}]]'


def client(server: Server, api_key: str = "unused") -> openai.OpenAI:
    """The official client, unchanged, on the server's OpenAI frontend."""
    url = server.frontend_urls["openai"]
    return openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)


def async_client(server: Server, api_key: str = "unused") -> openai.AsyncOpenAI:
    url = server.frontend_urls["openai"]
    return openai.AsyncOpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)


def ask(text: str) -> list[Any]:
    return [{"role": USER, "content": text}]


def words(text: str) -> int:
    """Tokens by the whitespace tokenizer (the mock LLM's and the frontend's count)."""
    return len(text.split())


# ---------------------------------------------------------------------- models


def test_lists_the_models_that_follow_a_convention(server: Server) -> None:
    with client(server) as c:
        models = c.models.list()
        ids = [m.id for m in models.data]
        assert ids == ["lab", "mock_bare", "mock_llm", "toy_embed", "trtllm_echo"]  # not "plain"
        assert {m.object for m in models.data} == {"model"}
        assert {m.owned_by for m in models.data} == {"tritonx"}
        model = c.models.retrieve("mock_llm")
        assert model.id == "mock_llm" and model.created > 0
        with pytest.raises(openai.NotFoundError) as caught:
            c.models.retrieve("plain")
        assert caught.value.code == "model_not_found"


async def test_lists_the_models_async(server: Server) -> None:
    async with async_client(server) as c:
        ids = [m.id async for m in c.models.list()]
        assert "mock_llm" in ids and "toy_embed" in ids
        assert (await c.models.retrieve("toy_embed")).id == "toy_embed"


# ---------------------------------------------------------------------- chat


def test_chat_completion(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm",
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
            ],
        )
    assert answer.object == "chat.completion"
    assert answer.model == "mock_llm"
    assert answer.id.startswith("chatcmpl-")
    (only,) = answer.choices
    assert only.message.role == "assistant"
    assert only.message.content == MOCK_REPLY
    assert only.finish_reason == "stop"
    assert only.message.tool_calls is None
    # the default template: <|system|>\nYou are terse.\n<|end|>\n<|user|>\nHello\n<|end|>\n
    # <|assistant|>\n: 9 words and the last line break, 10 whitespace tokens
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 10
    assert answer.usage.completion_tokens == words(MOCK_REPLY)
    assert answer.usage.total_tokens == 10 + words(MOCK_REPLY)


async def test_chat_streams_token_by_token(server: Server) -> None:
    async with async_client(server) as c:
        stream = await c.chat.completions.create(
            model="mock_llm",
            messages=ask("[[count:5]]"),
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    first, *tokens, last, usage = chunks
    assert first.choices[0].delta.role == "assistant"
    assert [t.choices[0].delta.content for t in tokens] == ["1", " 2", " 3", " 4", " 5"]
    assert all(t.choices[0].finish_reason is None for t in tokens)
    assert last.choices[0].finish_reason == "stop"
    assert usage.choices == []
    assert usage.usage is not None
    assert usage.usage.completion_tokens == 5
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + 5


def test_chat_stream_without_usage_and_sync(server: Server) -> None:
    with client(server) as c:
        chunks = list(
            c.chat.completions.create(model="mock_llm", messages=ask("[[count:3]]"), stream=True)
        )
    assert all(chunk.usage is None for chunk in chunks)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "1 2 3"


def test_chat_max_tokens_and_stop(server: Server) -> None:
    with client(server) as c:
        cut = c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:10]]"), max_completion_tokens=4
        )
        assert cut.choices[0].message.content == "1 2 3 4"
        assert cut.choices[0].finish_reason == "length"
        legacy = c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:10]]"), max_tokens=2
        )
        assert legacy.choices[0].message.content == "1 2"
        stopped = c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:10]]"), stop=[" 6", "nothing"]
        )
        assert stopped.choices[0].message.content == "1 2 3 4 5"
        assert stopped.choices[0].finish_reason == "stop"


def test_chat_n_choices_and_logprobs(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:3]]"), n=3, logprobs=True, top_logprobs=1
        )
    assert [ch.index for ch in answer.choices] == [0, 1, 2]
    assert {ch.message.content for ch in answer.choices} == {"1 2 3"}
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [t.token for t in logprobs.content] == ["1", " 2", " 3"]
    assert [t.logprob for t in logprobs.content] == [-0.5] * 3
    assert logprobs.content[1].bytes == list(b" 2")
    assert [len(t.top_logprobs) for t in logprobs.content] == [1, 1, 1]
    assert answer.usage is not None and answer.usage.completion_tokens == 9


async def test_chat_streams_several_choices(server: Server) -> None:
    async with async_client(server) as c:
        stream = await c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:3]]"), n=2, stream=True
        )
        texts = {0: "", 1: ""}
        reasons = {}
        async for chunk in stream:
            for ch in chunk.choices:
                texts[ch.index] += ch.delta.content or ""
                if ch.finish_reason:
                    reasons[ch.index] = ch.finish_reason
    assert texts == {0: "1 2 3", 1: "1 2 3"}
    assert reasons == {0: "stop", 1: "stop"}


def test_sampling_parameters_reach_a_vllm_model(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm",
            messages=ask("[[params]]"),
            temperature=0.25,
            top_p=0.5,
            seed=7,
            max_completion_tokens=9,
            frequency_penalty=0.1,
            presence_penalty=-0.1,
            extra_body={"top_k": 5, "repetition_penalty": 1.1},
        )
    params = json.loads(answer.choices[0].message.content or "")
    assert params == {
        "temperature": 0.25,
        "top_p": 0.5,
        "seed": 7,
        "max_tokens": 9,
        "frequency_penalty": 0.1,
        "presence_penalty": -0.1,
        "top_k": 5,
        "repetition_penalty": 1.1,
    }


def test_default_max_tokens_is_tritons(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(model="mock_llm", messages=ask("[[params]]"))
    assert json.loads(answer.choices[0].message.content or "") == {"max_tokens": 16}


def test_chat_template_from_the_model_config(server: Server, repository: Path) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(model="mock_bare", messages=ask("one two [[reply:ok]]"))
    assert answer.choices[0].message.content == "ok"
    # the bare template renders the user's words only: 3 tokens
    assert answer.usage is not None and answer.usage.prompt_tokens == 3
    assert "chat_template" in (repository / "mock_bare" / "config.pbtxt").read_text()


# ---------------------------------------------------------------------- tools


def test_tool_calls_are_parsed(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(model="mock_llm", messages=ask(TOOL_CALL), tools=TOOLS)
        (only,) = answer.choices
        assert only.finish_reason == "tool_calls"
        assert only.message.content is None
        (call,) = only.message.tool_calls or []
        assert call.type == "function"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        assert call.id.startswith("call_")
        # tools in the request but the answer is text: content as usual
        plain = c.chat.completions.create(
            model="mock_llm", messages=ask("[[reply:sunny]]"), tools=TOOLS
        )
        assert plain.choices[0].message.content == "sunny"
        assert plain.choices[0].finish_reason == "stop"
        # tool_choice none: never parsed
        none = c.chat.completions.create(
            model="mock_llm", messages=ask(TOOL_CALL), tools=TOOLS, tool_choice="none"
        )
        assert (none.choices[0].message.content or "").startswith("<|python_tag|>")


async def test_tool_calls_stream(server: Server) -> None:
    async with async_client(server) as c:
        stream = await c.chat.completions.create(
            model="mock_llm", messages=ask(TOOL_CALL), tools=TOOLS, stream=True
        )
        chunks = [chunk async for chunk in stream]
        calls = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
        assert len(calls) == 1
        assert calls[0].function is not None and calls[0].function.name == "get_weather"
        assert json.loads(calls[0].function.arguments or "") == {"city": "Paris"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        # text answers stream as content while tools are offered
        stream = await c.chat.completions.create(
            model="mock_llm", messages=ask("[[count:3]]"), tools=TOOLS, stream=True
        )
        content = [ch.choices[0].delta.content async for ch in stream if ch.choices]
        assert "".join(c or "" for c in content) == "1 2 3"


def test_named_tool_choice(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm",
            messages=ask('[[reply:{"city": "Oslo"}]]'),
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        (call,) = answer.choices[0].message.tool_calls or []
        assert call.type == "function"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Oslo"}
        chunks = list(
            c.chat.completions.create(
                model="mock_llm",
                messages=ask('[[reply:{"city": "Oslo"}]]'),
                tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "get_weather"}},
                stream=True,
            )
        )
    calls = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    arguments = "".join((tc.function.arguments or "") for tc in calls if tc.function)
    assert json.loads(arguments) == {"city": "Oslo"}


def test_required_tool_choice(server: Server) -> None:
    with client(server) as c:
        parsed = c.chat.completions.create(
            model="mock_llm", messages=ask(TOOL_CALL), tools=TOOLS, tool_choice="required"
        )
        (call,) = parsed.choices[0].message.tool_calls or []
        assert call.type == "function" and call.function.name == "get_weather"
        assert parsed.choices[0].finish_reason == "tool_calls"
        # no call in the text: the first tool, with the text as its arguments
        fallback = c.chat.completions.create(
            model="mock_llm", messages=ask("[[reply:{}]]"), tools=TOOLS, tool_choice="required"
        )
        (call,) = fallback.choices[0].message.tool_calls or []
        assert call.type == "function"
        assert (call.function.name, call.function.arguments) == ("get_weather", "{}")


def test_tools_go_to_the_chat_template(server: Server) -> None:
    with client(server) as c:
        with_tools = c.chat.completions.create(
            model="mock_llm", messages=ask("[[reply:x]]"), tools=TOOLS
        )
        without = c.chat.completions.create(model="mock_llm", messages=ask("[[reply:x]]"))
    assert with_tools.usage is not None and without.usage is not None
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens  # the <|tools|> block


def test_a_tool_conversation_renders(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm",
            messages=[
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "developer", "content": "[[reply:It is sunny.]]"},
            ],
            tools=TOOLS,
        )
    assert answer.choices[0].message.content == "It is sunny."


# ---------------------------------------------------------------------- completions


def test_completion(server: Server) -> None:
    with client(server) as c:
        answer = c.completions.create(model="mock_llm", prompt="[[count:4]]")
        assert answer.object == "text_completion"
        assert answer.id.startswith("cmpl-")
        (only,) = answer.choices
        assert only.text == "1 2 3 4"
        assert only.finish_reason == "stop"
        assert answer.usage is not None
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (1, 4)
        cut = c.completions.create(model="mock_llm", prompt="[[count:9]]", max_tokens=3)
        assert cut.choices[0].text == "1 2 3" and cut.choices[0].finish_reason == "length"
        echo = c.completions.create(model="mock_llm", prompt="[[count:2]]", echo=True)
        assert echo.choices[0].text == "[[count:2]]1 2"
        stop = c.completions.create(model="mock_llm", prompt="[[count:9]]", stop="3")
        assert stop.choices[0].text == "1 2 " and stop.choices[0].finish_reason == "stop"


def test_completion_prompts_n_and_logprobs(server: Server) -> None:
    with client(server) as c:
        answer = c.completions.create(
            model="mock_llm", prompt=["[[count:1]]", "[[count:2]]"], n=2, logprobs=1
        )
    assert [(ch.index, ch.text) for ch in answer.choices] == [
        (0, "1"),
        (1, "1"),
        (2, "1 2"),
        (3, "1 2"),
    ]
    logprobs = answer.choices[2].logprobs
    assert logprobs is not None
    assert logprobs.tokens == ["1", " 2"]
    assert logprobs.token_logprobs == [-0.5, -0.5]
    assert logprobs.text_offset == [0, 1]
    assert logprobs.top_logprobs == [{"1": -0.5}, {" 2": -0.5}]
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 2  # each prompt once
    assert answer.usage.completion_tokens == 6


async def test_completion_streams(server: Server) -> None:
    async with async_client(server) as c:
        stream = await c.completions.create(
            model="mock_llm",
            prompt="[[count:3]]",
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert [ch.choices[0].text for ch in chunks[:-2]] == ["1", " 2", " 3"]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_each_choice_gets_its_own_seed(server: Server) -> None:
    """With ``n`` choices and a seed, choice ``i`` is generated with ``seed + i``."""
    with client(server) as c:
        answer = c.completions.create(model="trtllm_echo", prompt="hi", n=3, seed=3)
        seeds = sorted(json.loads(choice.text)["seed"] for choice in answer.choices)
        assert seeds == [3, 4, 5]
        # ... wrapping around at the int64 edge (to -2**63, which this model's UINT64 seed
        # tensor holds as 2**63)
        answer = c.completions.create(model="trtllm_echo", prompt="hi", n=2, seed=(1 << 63) - 1)
        seeds = sorted(json.loads(choice.text)["seed"] for choice in answer.choices)
        assert seeds == [(1 << 63) - 1, 1 << 63]


def test_text_modalities_and_parallel_tool_calls_are_accepted(server: Server) -> None:
    with client(server) as c:
        answer = c.chat.completions.create(
            model="mock_llm",
            messages=ask("hi"),
            extra_body={"modalities": ["text"], "parallel_tool_calls": False, "store": False},
        )
        assert answer.choices


def test_a_tensorrt_llm_model_gets_one_tensor_per_parameter(server: Server) -> None:
    with client(server) as c:
        answer = c.completions.create(
            model="trtllm_echo",
            prompt="hello",
            max_tokens=7,
            temperature=0.5,
            seed=3,
            top_p=0.25,
        )
        seen = json.loads(answer.choices[0].text)
        assert seen["text_input"] == "hello" and seen["text_input.shape"] == [1]
        assert seen["max_tokens"] == 7
        assert seen["temperature"] == 0.5
        assert seen["top_p"] == 0.25
        assert seen["seed"] == 3
        assert seen["bad_words"] == ""  # required by the model: an empty list
        assert seen["stream"] is False  # the model is not decoupled
        assert "stop_words" not in seen  # optional, unset: not sent
        assert answer.usage is not None and answer.usage.prompt_tokens == 1
        # stop words go to the model as a list (the model's JSON repeats them: cut there)
        stopped = c.completions.create(model="trtllm_echo", prompt="x", stop=["QQ", "RR"])
        assert stopped.choices[0].text.endswith('"stop_words": ["')
        # a model that is not decoupled answers a stream once
        chunks = list(
            c.completions.create(model="trtllm_echo", prompt="hi", stream=True, max_tokens=99)
        )
    texts = [ch.choices[0].text for ch in chunks]
    assert len(texts) == 2 and json.loads(texts[0])["text_input"] == "hi" and texts[1] == ""
    assert chunks[-1].choices[0].finish_reason == "stop"


# ---------------------------------------------------------------------- embeddings


def test_embeddings(server: Server) -> None:
    texts = ["a b", "ccc", "d e f", "g"]  # the model batches 2: two requests
    expected = [[3, 2, 1.5], [3, 1, 1.5], [5, 3, 1.5], [1, 1, 1.5]]
    with client(server) as c:
        floats = c.embeddings.create(model="toy_embed", input=texts, encoding_format="float")
        assert floats.object == "list" and floats.model == "toy_embed"
        assert [d.index for d in floats.data] == [0, 1, 2, 3]
        assert [d.embedding for d in floats.data] == expected
        assert floats.usage.prompt_tokens == 7 and floats.usage.total_tokens == 7
        # the client's default: base64, decoded by the client
        default = c.embeddings.create(model="toy_embed", input="a b")
        assert default.data[0].embedding == expected[0]
        raw = c.embeddings.with_raw_response.create(
            model="toy_embed", input=texts, encoding_format="base64"
        )
    body = json.loads(raw.http_response.text)
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in body["data"]]
    assert np.array_equal(np.stack(vectors), np.array(expected, np.float32))


async def test_embeddings_async(server: Server) -> None:
    async with async_client(server) as c:
        answer = await c.embeddings.create(model="toy_embed", input=["x y"], dimensions=3)
    assert answer.data[0].embedding == [3, 2, 1.5]


# ---------------------------------------------------------------------- bad input


async def post(server: Server, path: str, data: bytes | str, **headers: str) -> tuple[int, Any]:
    url = server.frontend_urls["openai"] + path
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=data, headers=headers) as resp:
            return resp.status, await resp.json()


def assert_openai_error(body: Any, type_: str = "invalid_request_error") -> dict[str, Any]:
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == type_ and error["message"]
    return error


async def test_malformed_json_and_bodies(server: Server) -> None:
    status, body = await post(server, "/chat/completions", b"{not json")
    assert status == 400
    assert "could not parse the JSON body" in assert_openai_error(body)["message"]
    status, body = await post(server, "/completions", b"[1, 2]")
    assert status == 400 and assert_openai_error(body)["code"] == "invalid_type"
    status, body = await post(server, "/embeddings", b"")
    assert status == 400
    status, body = await post(server, "/nope", b"{}")
    assert status == 404 and "Invalid URL (POST /v1/nope)" in assert_openai_error(body)["message"]
    url = server.frontend_urls["openai"] + "/chat/completions"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 405
        assert_openai_error(await resp.json())


BAD_CHAT: list[tuple[dict[str, Any], str | None, str | None]] = [
    # (extra arguments, the param OpenAI names, its code)
    ({"n": "2"}, "n", "invalid_type"),
    ({"n": 0}, "n", "integer_below_min_value"),
    ({"n": 129}, "n", "integer_above_max_value"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({"max_completion_tokens": 1 << 40}, "max_completion_tokens", "integer_above_max_value"),
    ({"temperature": 3}, "temperature", "decimal_above_max_value"),
    ({"top_p": -0.5}, "top_p", "decimal_below_min_value"),
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"stream": "yes"}, "stream", "invalid_type"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length"),
    ({"stop": 5}, "stop", "invalid_type"),
    ({"seed": 1 << 64}, "seed", "integer_above_max_value"),
    ({"logit_bias": {"1": 5}}, "logit_bias", "unsupported_parameter"),
    ({"top_logprobs": 2}, "top_logprobs", None),
    ({"stream_options": {"include_usage": True}}, "stream_options", None),
    ({"colour": "blue"}, "colour", "unknown_parameter"),
    ({"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
    ({"store": True}, "store", "unsupported_parameter"),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
    ({"tool_choice": "auto"}, "tool_choice", None),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_required_parameter"),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tool_choice",
        "invalid_value",
    ),
]


@pytest.mark.parametrize(("extra", "param", "code"), BAD_CHAT)
def test_bad_chat_arguments(
    server: Server, extra: dict[str, Any], param: str | None, code: str | None
) -> None:
    with client(server) as c, pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="mock_llm", messages=ask("hi"), extra_body=extra)
    error = caught.value
    assert error.status_code == 400
    body = error.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert error.param == param and error.code == code


BAD_MESSAGES: list[tuple[Any, str]] = [
    ([], "messages"),
    ("hi", "messages"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"content": "hi"}], "messages[0].role"),
    ([{"role": "robot", "content": "hi"}], "messages[0].role"),
    ([{"role": ["user"], "content": "hi"}], "messages[0].role"),  # (unhashable: was a 500)
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": "a"}, {"role": "assistant"}], "messages[1].content"),
    ([{"role": "tool", "content": "sunny"}], "messages[0].tool_call_id"),
    (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        "messages[0].content[0]",
    ),
]


@pytest.mark.parametrize(("messages", "param"), BAD_MESSAGES)
def test_bad_messages(server: Server, messages: Any, param: str) -> None:
    with client(server) as c, pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="mock_llm", messages=messages)
    assert caught.value.param == param


def test_bad_completion_and_embedding_arguments(server: Server) -> None:
    with client(server) as c:
        cases: list[tuple[Any, dict[str, Any], str]] = [
            (c.completions.create, {"prompt": ""}, "prompt"),
            (c.completions.create, {"prompt": [1, 2, 3]}, "prompt"),
            (c.completions.create, {"prompt": []}, "prompt"),
            (c.completions.create, {"prompt": {"text": "x"}}, "prompt"),
            (c.embeddings.create, {"input": 7}, "input"),
            (c.completions.create, {"prompt": "x", "suffix": "y"}, "suffix"),
            (c.completions.create, {"prompt": "x", "best_of": 3}, "best_of"),
            (c.completions.create, {"prompt": "x", "logprobs": 6}, "logprobs"),
            (c.completions.create, {"prompt": "x", "max_tokens": -1}, "max_tokens"),
            (c.completions.create, {"prompt": ["x"] * 9, "n": 128}, "n"),
            (c.embeddings.create, {"input": ""}, "input"),
            (c.embeddings.create, {"input": []}, "input"),
            (c.embeddings.create, {"input": [[1, 2]]}, "input"),
            (c.embeddings.create, {"input": "x", "encoding_format": "hex"}, "encoding_format"),
            (c.embeddings.create, {"input": "x", "dimensions": 2}, "dimensions"),
        ]
        for create, arguments, param in cases:
            model = "toy_embed" if create == c.embeddings.create else "mock_llm"
            with pytest.raises(openai.BadRequestError) as caught:
                create(model=model, **arguments)
            assert caught.value.param == param, arguments


def test_unknown_models_and_the_wrong_kind(server: Server) -> None:
    with client(server) as c:
        for call in (
            lambda: c.chat.completions.create(model="nope", messages=ask("hi")),
            lambda: c.completions.create(model="plain", prompt="hi"),
            lambda: c.embeddings.create(model="nope", input="hi"),
        ):
            with pytest.raises(openai.NotFoundError) as caught:
                call()
            assert caught.value.code == "model_not_found"
            assert caught.value.param == "model"
        with pytest.raises(openai.BadRequestError):  # the input is checked first
            c.chat.completions.create(model="nope", messages=ask("hi"), temperature=5)
        with pytest.raises(openai.BadRequestError) as wrong:
            c.embeddings.create(model="mock_llm", input="hi")
        assert wrong.value.code == "model_not_supported"
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="toy_embed", messages=ask("hi"))
        with pytest.raises(openai.BadRequestError) as no_logprobs:
            c.completions.create(model="trtllm_echo", prompt="x", logprobs=1)
        assert no_logprobs.value.param == "logprobs"


def test_a_model_refusing_the_request_is_an_http_error(server: Server) -> None:
    # the mock refuses top_p 0 (vLLM's check) before its first response: no stream starts
    with client(server) as c, pytest.raises(openai.InternalServerError) as caught:
        c.chat.completions.create(model="mock_llm", messages=ask("hi"), top_p=0.0, stream=True)
    assert "top_p must be in (0, 1]" in str(caught.value)


# ---------------------------------------------------------------------- faults


class Signals:
    """Messages the lab model sends to the test over TCP (``started``, ``cancelled N``)."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[bytes] = asyncio.Queue()
        self.listener: asyncio.Server | None = None

    async def __aenter__(self) -> Signals:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.messages.put_nowait(await reader.read())
            writer.close()

        self.listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.listener is not None
        self.listener.close()
        await self.listener.wait_closed()

    @property
    def port(self) -> int:
        assert self.listener is not None
        return int(self.listener.sockets[0].getsockname()[1])

    async def next(self) -> bytes:
        return await asyncio.wait_for(self.messages.get(), 60)


async def test_a_client_leaving_mid_stream_cancels_the_generation(server: Server) -> None:
    async with Signals() as signals, async_client(server) as c:
        stream = await c.chat.completions.create(
            model="lab", messages=ask(f"[[forever:{signals.port}]]"), stream=True, max_tokens=10**6
        )
        assert await signals.next() == b"started"
        received = 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content == " tick":
                received += 1  # tokens arrive while the model still generates
                if received == 3:
                    break
        await stream.close()  # the client goes away mid-stream
        message = await signals.next()  # the model saw is_cancelled()
    assert message.startswith(b"cancelled ")


async def test_a_client_leaving_before_the_answer_cancels_the_generation(server: Server) -> None:
    url = server.frontend_urls["openai"] + "/completions"
    async with Signals() as signals, aiohttp.ClientSession() as session:
        body = {"model": "lab", "prompt": f"[[forever:{signals.port}]]", "max_tokens": 10**6}
        waiting = asyncio.ensure_future(session.post(url, json=body))
        assert await signals.next() == b"started"
        waiting.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (await signals.next()).startswith(b"cancelled ")


def test_a_character_split_over_two_tokens_arrives_whole(server: Server) -> None:
    with client(server) as c:
        chunks = list(c.completions.create(model="lab", prompt="[[utf8]]", stream=True))
        texts = [ch.choices[0].text for ch in chunks if ch.choices[0].text]
        assert texts == ["é", "!"]
        answer = c.completions.create(model="lab", prompt="[[utf8]]")
        assert answer.choices[0].text == "é!"


async def test_a_model_failing_mid_stream_ends_the_stream_with_an_error(server: Server) -> None:
    async with async_client(server) as c:
        stream = await c.chat.completions.create(
            model="lab", messages=ask("[[fail:3]]"), stream=True
        )
        texts = []
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                texts.append(chunk.choices[0].delta.content)
    assert texts == ["", " x", " x", " x"]
    assert "model failed mid-stream" in str(caught.value)
    # the raw stream: an error event, then [DONE]
    url = server.frontend_urls["openai"] + "/chat/completions"
    body = {"model": "lab", "messages": ask("[[fail:1]]"), "stream": True}
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        assert resp.status == 200
        events = (await resp.text()).strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))
    assert assert_openai_error(error, "server_error")["message"] == "model failed mid-stream"


def test_a_model_failing_without_streaming_is_a_server_error(server: Server) -> None:
    with client(server) as c, pytest.raises(openai.InternalServerError) as caught:
        c.chat.completions.create(model="lab", messages=ask("[[fail:2]]"))
    assert caught.value.status_code == 500
    assert "model failed mid-stream" in str(caught.value)


async def test_request_id_is_echoed(server: Server) -> None:
    url = server.frontend_urls["openai"] + "/completions"
    body = {"model": "mock_llm", "prompt": "[[count:1]]"}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body, headers={"X-Request-ID": "r-42"}) as resp:
            assert resp.status == 200
            assert resp.headers["X-Request-ID"] == "r-42"
        async with session.post(
            url, json={**body, "stream": True}, headers={"X-Request-ID": "r-43"}
        ) as resp:
            assert resp.headers["X-Request-ID"] == "r-43"
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert (await resp.text()).endswith("data: [DONE]\n\n")
