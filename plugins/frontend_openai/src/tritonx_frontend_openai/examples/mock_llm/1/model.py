"""mock_llm: a deterministic MOCK of a vLLM model, for tests and demos (no language model).

A Triton python-backend model (it runs unchanged under Triton) with the inputs and outputs of
Triton's vLLM backend, so that anything speaking to a vLLM model (Triton's OpenAI frontend,
tritonx's ``frontend_openai``, genai-perf, a KServe client) can be tested without a GPU.

What it answers (its "generation"), a fixed function of the prompt (``text_input``):

* by default the sentence :data:`DEFAULT_REPLY`;
* the last *directive* in the prompt, when there is one (the latest wins; a chat template puts
  the user's words in the prompt, so a user message can hold one):

  - ``[[reply:TEXT]]``: TEXT, without surrounding whitespace (TEXT runs to the last ``]]`` of
    the prompt, so it may hold brackets: tool calls such as
    ``[[reply:<|python_tag|>{"name": "f", "parameters": {}}]]``);
  - ``[[count:N]]``: the numbers ``1 2 3 ... N`` (N tokens, made as they are sent);
  - ``[[params]]``: the sampling parameters it received, as one token of compact JSON with
    sorted keys (so a client can check that ``temperature``, ``seed``... reached the model).

Tokens are words with the whitespace before them (``"Hello there"`` is ``"Hello"``,
``" there"``), as ``tritonx_frontend_openai.tokens.WhitespaceTokenizer`` counts them. The reply
is cut as vLLM cuts generation:

* after ``max_tokens`` tokens (``sampling_parameters``; default 16, as vLLM's): finish reason
  ``length`` when the reply had more tokens, else ``stop``;
* before the first ``stop`` string (a string or a list) that completes in a token (with it when
  ``include_stop_str_in_output`` is true): finish reason ``stop``. A stop string that begins in
  an already generated token leaves that token whole (no hold-back);
* ``n`` (default 1) choices, all the same text.

``temperature``, ``top_p`` and ``seed`` are checked as vLLM checks them and otherwise ignored
(the output is deterministic). The prompt is ``text_input`` (``image`` is accepted and
ignored); ``sampling_parameters`` (a JSON object) or else the request's parameters hold the
sampling parameters, as in vLLM's backend.

Responses, as Triton's vLLM backend sends them:

* ``stream`` true: one response per token, ``text_output`` the new text, the final flag on the
  last one (which may have empty text, e.g. when a stop string cut it); ``exclude_input_in_output``
  false is refused while streaming (vLLM's error);
* ``stream`` false or absent: one response with the whole text; the prompt comes first unless
  ``exclude_input_in_output`` is true (vLLM's default when not streaming is to prepend it);
* the ``return_*`` inputs add ``finish_reason`` (``"None"`` until the last response, as vLLM's
  ``str(None)``), ``cumulative_logprob``, ``logprobs`` (vLLM's JSON: per token
  ``{token_id: {"logprob", "rank", "decoded_token"}}``, or ``null`` when the sampling parameters
  do not ask for ``logprobs``), ``num_input_tokens`` (the prompt's tokens) and
  ``num_output_tokens`` (the tokens of this response). Every token has logprob
  :data:`LOGPROB`, rank 1 and the token id ``crc32(token) % 32000``;
* errors (a bad sampling parameter, ``embedding_request``) end the request with an error
  response ``Error generating stream: ...``; a cancelled request (``is_cancelled()``, checked
  before each token) ends with a ``CANCELLED`` error response.

Model config parameters (``parameters { key: ... value: { string_value: ... } }``), optional:

* ``token_delay_ms``: wait this long before each token (default 0), for latency demos;
* ``request_log``: a file to which each finished request appends one JSON line
  ``{"request_id", "prompt", "stream", "sampling_parameters", "text", "tokens",
  "finish_reason", "error"}`` (``finish_reason`` ``stop``, ``length``, ``cancelled`` or
  ``error``; ``text`` without the prompt), written before its last response is sent.

Requests are generated concurrently, each on a thread of its own.
"""

import json
import re
import threading
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

#: the reply when the prompt holds no directive (15 tokens)
DEFAULT_REPLY = "Hello! I am the tritonx mock LLM. This reply is fixed, one word per token."
#: vLLM's default max_tokens
DEFAULT_MAX_TOKENS = 16
#: the logprob of every generated token
LOGPROB = -0.5

_TOKEN = re.compile(r"\s*\S+|\s+")
_DIRECTIVE = re.compile(r"\[\[(reply:|count:|params\]\])")
_COUNT = re.compile(r"\s*(\d+)\s*\]\]")


class _Cancelled(Exception):
    pass


class _Closing(Exception):
    pass


def _bool_input(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return bool(tensor.as_numpy().reshape(-1)[0])


def _text_input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)[0]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def sampling_parameters(request):
    """The request's sampling parameters (a dict), checked as vLLM checks them."""
    text = _text_input(request, "sampling_parameters")
    if text is None:
        text = request.parameters() or "{}"
    params = json.loads(text)
    if not isinstance(params, dict):
        raise ValueError("sampling parameters must be a JSON object")
    checked = dict(params)
    checked["n"] = 1 if params.get("n") is None else int(params["n"])
    if checked["n"] < 1:
        raise ValueError(f"n must be at least 1, got {checked['n']}.")
    max_tokens = params.get("max_tokens")
    checked["max_tokens"] = DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens)
    if checked["max_tokens"] < 1:
        raise ValueError(f"max_tokens must be at least 1, got {checked['max_tokens']}.")
    if params.get("temperature") is not None:
        temperature = float(params["temperature"])
        if temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {temperature}.")
    if params.get("top_p") is not None:
        top_p = float(params["top_p"])
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if params.get("seed") is not None:
        int(params["seed"])
    stop = params.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ValueError("stop must be a string or a list of strings")
    checked["stop"] = [s for s in stop if s]
    return params, checked


def reply_tokens(prompt, params):
    """The tokens of the reply to ``prompt`` (see the module's documentation)."""
    last = None
    for last in _DIRECTIVE.finditer(prompt):  # noqa: B007 - the last one wins
        pass
    if last is None:
        yield from _TOKEN.findall(DEFAULT_REPLY)
        return
    kind, rest = last.group(1), prompt[last.end() :]
    if kind == "reply:":
        end = rest.rfind("]]")
        yield from _TOKEN.findall((rest[:end] if end >= 0 else rest).strip())
    elif kind == "count:":
        match = _COUNT.match(rest)
        if match is None:
            raise ValueError("[[count:N]] needs a whole number N")
        for number in range(1, int(match.group(1)) + 1):
            yield str(number) if number == 1 else f" {number}"
    else:
        yield json.dumps(params, sort_keys=True, separators=(",", ":"))


def generate(tokens, max_tokens, stops, include_stop=False):
    """``(text, tokens, finish_reason)`` per generated token, ``finish_reason`` ``None`` but
    on the last (``"stop"`` or ``"length"``); one ``("", 0, "stop")`` for an empty reply."""
    longest = max((len(s) for s in stops), default=0)
    tail = ""  # the end of the text so far, where a stop string may have begun
    count = 0
    tokens = iter(tokens)
    token = next(tokens, None)
    if token is None:
        yield "", 0, "stop"
        return
    while True:
        count += 1
        window = tail + token
        hits = [(window.find(s), s) for s in stops if s in window]
        if hits:
            start, stop = min(hits)
            cut = start - len(tail) + (len(stop) if include_stop else 0)
            yield token[: max(cut, 0)], 1, "stop"
            return
        following = next(tokens, None)
        if following is None:
            yield token, 1, "stop"
            return
        if count >= max_tokens:
            yield token, 1, "length"
            return
        yield token, 1, None
        tail = window[-(longest - 1) :] if longest > 1 else ""
        token = following


def _token_id(token):
    return zlib.crc32(token.encode("utf-8")) % 32000


class TritonPythonModel:
    """The mock (see the module's documentation)."""

    def initialize(self, args):
        self.model_name = args.get("model_name", "mock_llm")
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.delay = float(params.get("token_delay_ms") or 0) / 1000.0
        self.request_log = params.get("request_log") or None
        text_config = pb_utils.get_output_config_by_name(config, "text_output")
        self.output_dtype = pb_utils.triton_string_to_numpy(text_config["data_type"])
        self.log_lock = threading.Lock()
        self.closing = threading.Event()
        self.threads = []

    def execute(self, requests):
        self.threads = [t for t in self.threads if t.is_alive()]
        for request in requests:
            thread = threading.Thread(target=self.respond, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return None

    def finalize(self):
        self.closing.set()
        for thread in self.threads:
            thread.join(timeout=10)

    # ------------------------------------------------------------------ one request

    def respond(self, request):
        sender = request.get_response_sender()
        record = {
            "request_id": request.request_id(),
            "prompt": None,
            "stream": False,
            "sampling_parameters": None,
            "text": "",
            "tokens": 0,
            "finish_reason": None,
            "error": None,
        }
        try:
            self.generate_responses(request, sender, record)
        except _Cancelled:
            record["finish_reason"] = "cancelled"
            self.write_log(record)
            error = pb_utils.TritonError("Request was cancelled", pb_utils.TritonError.CANCELLED)
            sender.send(
                pb_utils.InferenceResponse(error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        except Exception as exc:
            message = (
                f"{self.model_name} is being unloaded" if isinstance(exc, _Closing) else str(exc)
            )
            record["finish_reason"] = "error"
            record["error"] = message
            self.write_log(record)
            sender.send(
                pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"Error generating stream: {message}")
                ),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    def generate_responses(self, request, sender, record):
        if pb_utils.get_input_tensor_by_name(request, "embedding_request") is not None:
            raise ValueError(f"Model {self.model_name} does not support 'embed' request")
        prompt = _text_input(request, "text_input") or ""
        stream = _bool_input(request, "stream", False)
        record["prompt"], record["stream"] = prompt, stream
        exclude = _bool_input(request, "exclude_input_in_output", None)
        prepend = not exclude if exclude is not None else not stream
        if prepend and stream:
            raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")
        raw, params = sampling_parameters(request)
        record["sampling_parameters"] = raw
        want = {
            name: _bool_input(request, f"return_{name}", False)
            for name in (
                "finish_reason",
                "cumulative_logprob",
                "logprobs",
                "num_input_tokens",
                "num_output_tokens",
            )
        }
        if want["logprobs"] and params.get("logprobs") is None:
            want["logprobs"] = "null"  # asked for, but the sampling parameters do not
        n = params["n"]
        steps = generate(
            reply_tokens(prompt, raw),
            params["max_tokens"],
            params["stop"],
            bool(params.get("include_stop_str_in_output", False)),
        )
        pieces = []
        try:
            for text, count, finish in steps:
                if self.delay and self.closing.wait(self.delay):
                    raise _Closing()
                if self.closing.is_set():
                    raise _Closing()
                if request.is_cancelled():
                    raise _Cancelled()
                record["tokens"] += count
                pieces.append((text, count))
                if finish is not None:
                    record["text"] = "".join(p for p, _ in pieces)
                    record["finish_reason"] = finish
                    self.write_log(record)
                    delta = [(text, count)] if stream else pieces
                elif stream:
                    delta = [(text, count)]
                else:
                    continue
                response = self.response(
                    prompt if prepend else "", prompt, delta, finish, n, want, record["tokens"]
                )
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if finish is not None else 0
                sender.send(response, flags=flags)
        except (_Cancelled, _Closing):
            record["text"] = "".join(p for p, _ in pieces)
            raise

    def response(self, prefix, prompt, delta, finish, n, want, total_tokens):
        """The response carrying ``delta`` (``(text, tokens)`` pieces) and what ``want``
        asks for."""
        output = prefix + "".join(p for p, _ in delta)
        tensors = [pb_utils.Tensor("text_output", np.array([output] * n, dtype=self.output_dtype))]
        if want["finish_reason"]:
            reason = np.array([str(finish)] * n, dtype=np.object_)
            tensors.append(pb_utils.Tensor("finish_reason", reason))
        if want["cumulative_logprob"]:
            total = np.array([LOGPROB * total_tokens] * n, dtype=np.float32)
            tensors.append(pb_utils.Tensor("cumulative_logprob", total))
        if want["logprobs"]:
            if want["logprobs"] == "null":
                value = "null"
            else:
                value = json.dumps(
                    [
                        {str(_token_id(p)): {"logprob": LOGPROB, "rank": 1, "decoded_token": p}}
                        for p, c in delta
                        if c
                    ]
                )
            tensors.append(pb_utils.Tensor("logprobs", np.array([value] * n, dtype=np.object_)))
        if want["num_input_tokens"]:
            count = np.array([len(_TOKEN.findall(prompt))], dtype=np.uint32)
            tensors.append(pb_utils.Tensor("num_input_tokens", count))
        if want["num_output_tokens"]:
            generated = np.array([sum(c for _, c in delta)] * n, dtype=np.uint32)
            tensors.append(pb_utils.Tensor("num_output_tokens", generated))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def write_log(self, record):
        if not self.request_log:
            return
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self.log_lock, open(self.request_log, "a", encoding="utf-8") as log:
            log.write(line)
