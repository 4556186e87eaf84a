"""The OpenAI frontend rows of ``run.py`` (issue #33): streaming chat, plain chat and embeddings
through ``plugins/frontend_openai`` (``/v1``), driven by the official ``openai`` client
(``AsyncOpenAI``), in the same run.

One ``tritonx serve`` with ``--frontend-config openai,port=<port>`` over a repository holding the
bundled **mock** LLM (``tritonx_frontend_openai.examples.copy_mock_llm``: a deterministic
decoupled python model in vLLM's format, no language model inside; it generates its tokens as
fast as it can, so what is measured is the frontend, the pipeline and the python backend's
decoupled path, not a model) and, when MiniLM can be built (``minilm.missing()``), the
``minilm_embed`` ensemble and its three steps (``make_minilm.py``).

Rows (``N`` clients, each one request at a time, for a fixed window after an unmeasured warm-up;
every request's answer checked):

* **streaming chat** (``stream=True``, ``stream_options.include_usage``) at concurrency 1 and
  16: the prompt ``[[count:128]]`` with ``max_tokens`` 64, so the mock answers ``1 2 ... 64``
  (64 tokens, finish reason ``length``); every stream's text must equal that. TTFT: from
  sending the request (calling ``create``) to the first chunk with content (the role chunk
  before it has none); ITL: the gaps between consecutive content chunks of a stream (all
  streams' gaps pooled: mean and p99); requests/s; tokens/s (the usage chunk's
  ``completion_tokens``); the server's CPU per request (process and descendants: the python
  backend's worker too); the client's CPU per request (this process). Before it, at the same
  concurrency, two references read with a lean client (aiohttp, each event parsed with
  ``json``): the same generation through KServe's ``generate_stream`` on the server's HTTP
  port (what the OpenAI frontend adds to the server's CPU), and the same ``/v1`` stream (what
  the official client, which parses every chunk into pydantic models on the same two cores,
  costs).
* **chat, not streaming** (official client), at concurrency 16: the same request with
  ``stream=False`` (requests/s against the streaming row at 16).
* **embeddings** (``/v1/embeddings``, official client, ``minilm_embed``, one sentence per
  request as in the ``minilm`` rows) at concurrency 1 and 16, against the same three steps
  in-process (``minilm.in_process``: tokenizers, then onnxruntime on the same ONNX files,
  batch 1); before each, the same request over KServe HTTP JSON (aiohttp). The embedding of
  one sentence must equal the in-process one within 1e-4.

Alone: ``python benchmarks/openai_frontend.py [--smoke]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import minilm
import numpy as np

#: the server's HTTP, gRPC and metrics ports, then the OpenAI frontend's
PORTS = (28990, 28991, 28992, 28993)
SCENARIO = "openai"
MOCK = "mock_llm"
#: the in-process reference's row (its own model name: the minilm group has one too)
REFERENCE = "minilm 3 steps (openai rows)"
#: an embedding may differ from the in-process one by this much (float32 rounding)
TOLERANCE = 1e-4


@dataclass
class Settings:
    """The group's sizes (``smoke``: half-second windows)."""

    max_tokens: int = 64
    stream_concurrency: tuple[int, ...] = (1, 16)
    plain_concurrency: tuple[int, ...] = (16,)
    embed_concurrency: tuple[int, ...] = (1, 16)
    window_s: float = 4.0
    warmup_s: float = 0.5
    in_process_s: float = 3.0

    @classmethod
    def smoke(cls) -> Settings:
        return cls(window_s=0.5, warmup_s=0.2, in_process_s=0.3)

    @property
    def prompt(self) -> str:
        # more tokens than max_tokens: the reply is cut at max_tokens (finish reason "length")
        return f"[[count:{2 * self.max_tokens}]]"

    @property
    def expected(self) -> str:
        """The mock's answer to :attr:`prompt` (``1 2 ... max_tokens``)."""
        return " ".join(str(i) for i in range(1, self.max_tokens + 1))


def missing() -> str | None:
    """Why the rows cannot run here, or None."""
    for module, hint in (
        ("openai", "pip install openai"),
        ("tritonx_frontend_openai", "pip install -e plugins/frontend_openai"),
        ("tritonx_backend_python", "pip install -e plugins/backend_python"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({hint})"
    # what the server looks for: the plugin's entry point, not only its package
    if "frontend_openai" not in {e.name for e in importlib.metadata.entry_points(group="tritonx")}:
        return (
            "the tritonx entry point frontend_openai is missing "
            "(pip install -e plugins/frontend_openai)"
        )
    return None


def build(work: Path) -> tuple[Path, str | None]:
    """The repository (the mock LLM, and MiniLM when it can be built) and why MiniLM is not in
    it (None when it is)."""
    from tritonx_frontend_openai.examples import copy_mock_llm

    reason = minilm.missing()
    if reason is None and importlib.util.find_spec("tritonx_backend_onnx") is None:
        reason = "tritonx-backend-onnx is not installed"
    if reason is None:
        repo = minilm.build(work / "openai")  # work/openai/minilm
    else:
        repo = work / "openai" / "repo"
        repo.mkdir(parents=True, exist_ok=True)
    copy_mock_llm(repo, MOCK)
    return repo, reason


def wait_frontend(url: str, timeout: float = 60.0) -> None:
    """Until ``GET <url>/models`` answers (the frontend's listener starts after the HTTP one)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def reference_embedding(repo: Path, text: str) -> np.ndarray:
    """``text``'s embedding by the three steps in-process (``minilm.embedder``)."""
    return np.asarray(minilm.embedder(repo)(text)[0])


# ----------------------------------------------------------------------------- the load


@dataclass
class Sample:
    """One request as the client saw it."""

    seconds: float
    ttft_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)
    tokens: int = 0
    chunks: int = 0


@dataclass
class Load:
    """What ``concurrency`` clients did over one window."""

    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0


async def _window(
    call: Callable[[int], Awaitable[Sample]], concurrency: int, seconds: float
) -> tuple[list[Sample], list[str], float]:
    """``concurrency`` workers calling ``call(i)`` one at a time until ``seconds`` have passed
    (requests under way then are finished and counted)."""
    samples: list[Sample] = []
    errors: list[str] = []
    counter = iter(range(10**9))
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            try:
                samples.append(await call(next(counter)))
            except Exception as exc:  # reported in the row
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) > 100:
                    return

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, errors, time.perf_counter() - start


async def measure(
    call: Callable[[int], Awaitable[Sample]],
    concurrency: int,
    seconds: float,
    warmup_s: float,
    server_cpu: Callable[[], float],
) -> Load:
    """An unmeasured warm-up, then one measured window with the CPU of both sides."""
    await _window(call, concurrency, warmup_s)
    cpu, client = server_cpu(), time.process_time()
    samples, errors, elapsed = await _window(call, concurrency, seconds)
    return Load(samples, errors, elapsed, server_cpu() - cpu, time.process_time() - client)


def streaming_call(client: Any, s: Settings) -> Callable[[int], Awaitable[Sample]]:
    async def call(_: int) -> Sample:
        start = time.perf_counter()
        stream = await client.chat.completions.create(
            model=MOCK,
            messages=[{"role": "user", "content": s.prompt}],
            max_tokens=s.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        stamps: list[float] = []
        parts: list[str] = []
        finish, tokens, chunks = None, 0, 0
        async for chunk in stream:
            now = time.perf_counter()
            chunks += 1
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                if choice.delta.content:
                    stamps.append(now)
                    parts.append(choice.delta.content)
                if choice.finish_reason:
                    finish = choice.finish_reason
        end = time.perf_counter()
        text = "".join(parts)
        if text != s.expected or finish != "length":
            raise RuntimeError(f"stream answered {text[:40]!r}... (finish {finish})")
        return Sample(
            end - start,
            ttft_s=stamps[0] - start,
            gaps_s=[b - a for a, b in pairwise(stamps)],
            tokens=tokens,
            chunks=chunks,
        )

    return call


def sse_call(
    session: Any, url: str, body: dict[str, Any], s: Settings, chat: bool
) -> Callable[[int], Awaitable[Sample]]:
    """A lean client of the same stream: aiohttp, each server-sent event parsed with ``json``.
    ``chat``: ``/v1/chat/completions`` (the OpenAI frontend, as the official client would
    read it), else KServe's ``generate_stream`` (the built-in HTTP frontend)."""

    async def call(_: int) -> Sample:
        start = time.perf_counter()
        stamps: list[float] = []
        parts: list[str] = []
        finish, tokens, chunks = None, 0, 0
        async with session.post(url, json=body) as response:
            if response.status != 200:
                raise RuntimeError(f"{url}: {response.status} {await response.text()}")
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue  # blank lines, data: [DONE]
                now = time.perf_counter()
                chunks += 1
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"{url}: {event['error']}")
                if chat:
                    if event.get("usage"):
                        tokens = event["usage"]["completion_tokens"]
                    choices = event["choices"]
                    text = choices[0]["delta"].get("content") if choices else None
                    finish = (choices[0]["finish_reason"] if choices else None) or finish
                else:
                    text = event.get("text_output")
                    tokens += 1 if text else 0
                if text:
                    stamps.append(now)
                    parts.append(text)
        end = time.perf_counter()
        text = "".join(parts)
        if text != s.expected or (chat and finish != "length"):
            raise RuntimeError(f"{url} answered {text[:40]!r}... (finish {finish})")
        return Sample(
            end - start,
            ttft_s=stamps[0] - start,
            gaps_s=[b - a for a, b in pairwise(stamps)],
            tokens=tokens,
            chunks=chunks,
        )

    return call


def lean_calls(
    session: Any, url: str, http_port: int, s: Settings
) -> dict[str, Callable[[int], Awaitable[Sample]]]:
    """The aiohttp readers: ``generate`` (KServe ``generate_stream``), ``lean``
    (``/v1/chat/completions``, the request the official client sends)."""
    generate = {
        "text_input": s.prompt,
        "stream": True,
        "exclude_input_in_output": True,
        "sampling_parameters": json.dumps({"max_tokens": s.max_tokens}),
    }
    chat = {
        "model": MOCK,
        "messages": [{"role": "user", "content": s.prompt}],
        "max_tokens": s.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    kserve = f"http://127.0.0.1:{http_port}/v2/models/{MOCK}/generate_stream"
    return {
        "generate": sse_call(session, kserve, generate, s, chat=False),
        "lean": sse_call(session, f"{url}/chat/completions", chat, s, chat=True),
    }


def plain_call(client: Any, s: Settings) -> Callable[[int], Awaitable[Sample]]:
    async def call(_: int) -> Sample:
        start = time.perf_counter()
        answer = await client.chat.completions.create(
            model=MOCK, messages=[{"role": "user", "content": s.prompt}], max_tokens=s.max_tokens
        )
        seconds = time.perf_counter() - start
        text = answer.choices[0].message.content
        if text != s.expected or answer.choices[0].finish_reason != "length":
            raise RuntimeError(f"chat answered {str(text)[:40]!r}...")
        return Sample(seconds, tokens=answer.usage.completion_tokens if answer.usage else 0)

    return call


def embedding_call(client: Any, model: str) -> Callable[[int], Awaitable[Sample]]:
    async def call(i: int) -> Sample:
        start = time.perf_counter()
        answer = await client.embeddings.create(
            model=model, input=minilm.SENTENCES[i % len(minilm.SENTENCES)]
        )
        seconds = time.perf_counter() - start
        if len(answer.data) != 1 or len(answer.data[0].embedding) != 384:
            raise RuntimeError(f"{len(answer.data)} embeddings, not one of 384 floats")
        return Sample(seconds)

    return call


def kserve_embedding_call(session: Any, http_port: int) -> Callable[[int], Awaitable[Sample]]:
    """The same request over KServe HTTP (JSON, aiohttp): the built-in frontend's cost."""
    url = f"http://127.0.0.1:{http_port}/v2/models/{minilm.MODEL}/infer"

    async def call(i: int) -> Sample:
        text = minilm.SENTENCES[i % len(minilm.SENTENCES)]
        body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
        start = time.perf_counter()
        async with session.post(url, json=body) as response:
            answer = await response.json()
        seconds = time.perf_counter() - start
        if response.status != 200 or len(answer["outputs"][0]["data"]) != 384:
            raise RuntimeError(f"KServe answered {response.status}: {str(answer)[:80]}")
        return Sample(seconds)

    return call


# ----------------------------------------------------------------------------- the rows


def _p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _row(
    point: Callable[..., Any], model: str, protocol: str, c: int, load: Load, kind: str
) -> Any:
    n = len(load.samples)
    latencies = [x.seconds * 1000 for x in load.samples]
    ttft = [x.ttft_s * 1000 for x in load.samples]
    gaps = [g * 1000 for x in load.samples for g in x.gaps_s]
    extra: dict[str, Any] = {
        "kind": kind,
        "requests": n,
        "seconds": round(load.seconds, 2),
        "latency_p50_ms": round(_p(latencies, 50), 3),
        "latency_p99_ms": round(_p(latencies, 99), 3),
        "client_cpu_us_per_req": round(load.client_cpu_s / n * 1e6, 1) if n else 0.0,
    }
    if kind in ("stream", "generate", "lean"):
        tokens = sum(x.tokens for x in load.samples)
        extra |= {
            "ttft_p50_ms": round(_p(ttft, 50), 3),
            "ttft_p99_ms": round(_p(ttft, 99), 3),
            "itl_mean_ms": round(float(np.mean(gaps)), 3) if gaps else 0.0,
            "itl_p99_ms": round(_p(gaps, 99), 3),
            "tokens_per_s": round(tokens / load.seconds, 1) if load.seconds else 0.0,
            "tokens_per_req": round(tokens / n, 1) if n else 0.0,
            "chunks_per_req": round(sum(x.chunks for x in load.samples) / n, 1) if n else 0.0,
        }
    elif kind == "plain":
        tokens = sum(x.tokens for x in load.samples)
        extra["tokens_per_s"] = round(tokens / load.seconds, 1) if load.seconds else 0.0
    row = point(
        SCENARIO,
        "tritonx",
        protocol,
        model,
        c,
        infer_per_s=n / load.seconds if load.seconds else 0.0,
        # streaming rows: p50/p99 of the time to first token; others: of the request
        p50_ms=extra["ttft_p50_ms"] if "ttft_p50_ms" in extra else extra["latency_p50_ms"],
        p99_ms=extra["ttft_p99_ms"] if "ttft_p99_ms" in extra else extra["latency_p99_ms"],
        cpu_us_per_req=round(load.server_cpu_s / n * 1e6, 1) if n else 0.0,
        extra=extra,
    )
    if load.errors:
        row.error = f"{len(load.errors)} failed requests, e.g. {load.errors[0]}"
    elif not n:
        row.error = "no request completed"
    return row


async def _run(
    url: str,
    http_port: int,
    s: Settings,
    embeddings: bool,
    repo: Path,
    point: Callable[..., Any],
    server_cpu: Callable[[], float],
) -> list[Any]:
    import aiohttp
    import openai

    rows: list[Any] = []
    async with (
        openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120) as client,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
    ):
        ids = [m.id async for m in client.models.list()]
        if MOCK not in ids:
            raise RuntimeError(f"/v1/models lists {ids}, not {MOCK}")
        tokens = f"{s.max_tokens} tokens"
        calls = {**lean_calls(session, url, http_port, s), "stream": streaming_call(client, s)}
        streams = (
            ("generate", f"{MOCK} generate_stream, {tokens}, aiohttp", "http-sse"),
            ("lean", f"{MOCK} chat, {tokens}, aiohttp", "openai-sse"),
            ("stream", f"{MOCK} chat, {tokens}, openai client", "openai-sse"),
        )
        for c in s.stream_concurrency:
            # the references right before the official client's row: the same machine
            for kind, model, protocol in streams:
                load = await measure(calls[kind], c, s.window_s, s.warmup_s, server_cpu)
                rows.append(_row(point, model, protocol, c, load, kind))
        for c in s.plain_concurrency:
            load = await measure(plain_call(client, s), c, s.window_s, s.warmup_s, server_cpu)
            rows.append(
                _row(point, f"{MOCK} chat, {tokens}, openai client", "openai", c, load, "plain")
            )
        if embeddings:
            model = minilm.MODEL
            text = minilm.SENTENCES[0]
            answer = await client.embeddings.create(model=model, input=text)
            got = np.array(answer.data[0].embedding, np.float32)
            want = reference_embedding(repo, text)
            diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
            kserve = kserve_embedding_call(session, http_port)
            for c in s.embed_concurrency:
                load = await measure(kserve, c, s.window_s, s.warmup_s, server_cpu)
                rows.append(_row(point, f"{model}, aiohttp", "http", c, load, "kserve"))
                load = await measure(
                    embedding_call(client, model), c, s.window_s, s.warmup_s, server_cpu
                )
                row = _row(point, f"{model}, openai client", "openai", c, load, "embed")
                row.extra["max_abs_diff"] = diff
                if diff > TOLERANCE and not row.error:
                    row.error = f"embedding differs from in-process by {diff:.2e} (> {TOLERANCE})"
                rows.append(row)
    return rows


def points(
    work: Path,
    log_dir: Path,
    *,
    smoke: bool,
    point: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    cpu_seconds: Callable[[int], float],
    settings: Settings | None = None,
) -> list[Any]:
    """The rows (``point``, ``process``, ``tritonx_cmd`` and ``cpu_seconds`` are run.py's)."""
    reason = missing()
    if reason is not None:
        print(f"OpenAI frontend rows left out: {reason}", file=sys.stderr)
        return []
    s = settings or (Settings.smoke() if smoke else Settings())
    rows: list[Any] = []
    try:
        repo, no_minilm = build(work)
        if no_minilm is not None:
            print(f"OpenAI embeddings rows left out: {no_minilm}", file=sys.stderr)
        else:
            # the reference first, on a quiet machine (as the minilm rows)
            rate, p50 = minilm.in_process(repo, s.in_process_s)
            rows.append(
                point(
                    SCENARIO,
                    "in-process",
                    "in-process",
                    REFERENCE,
                    1,
                    infer_per_s=rate,
                    p50_ms=p50,
                    extra={"kind": "reference"},
                )
            )
        http, grpc, metrics, port = PORTS
        cmd = tritonx_cmd(repo, (http, grpc, metrics), "--frontend-config", f"openai,port={port}")
        with process(cmd, http, log_dir / "openai.log") as (proc, _):
            url = f"http://127.0.0.1:{port}/v1"
            wait_frontend(url)
            rows += asyncio.run(
                _run(url, http, s, no_minilm is None, repo, point, lambda: cpu_seconds(proc.pid))
            )
    except Exception as exc:  # the row says what failed
        rows.append(
            point(SCENARIO, "tritonx", "openai", MOCK, 0, error=f"{type(exc).__name__}: {exc}")
        )
    return rows


def table_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> str:
    """The row of run.py's table. Streaming rows: the time to first token in the p50/p99
    columns, ITL and tokens/s in the last; the ratio of the aiohttp reader of ``/v1`` is the
    server's CPU per request against KServe ``generate_stream`` at the same concurrency, the
    official client's is requests/s against the aiohttp reader of the same stream. The chat
    row's: requests/s against streaming (official client); the embeddings rows': requests/s
    against the three steps in-process."""
    e = p.extra
    head = f"| {SCENARIO} | {p.target} | {p.protocol} | {p.model} | {p.concurrency} |"
    if p.error:
        return f"{head} error: {p.error[:80]} | - | - | - | | |"
    cpu = f"{p.cpu_us_per_req:.0f}" if p.cpu_us_per_req else "-"
    value = f"{head} {p.infer_per_s:.0f} | {p.p50_ms:.2f} | {p.p99_ms:.2f} | {cpu} |"
    kind = e.get("kind")
    if kind == "reference":
        return f"{value} | batch 1, back to back |"

    def find(kind: str, concurrency: int | None = None) -> Any:
        return next(
            (
                q
                for q in by.values()
                if q.scenario == SCENARIO
                and not q.error
                and q.extra.get("kind") == kind
                and concurrency in (None, q.concurrency)
            ),
            None,
        )

    client = f"client CPU {e['client_cpu_us_per_req']:.0f} us/req"
    if kind in ("stream", "generate", "lean"):
        timing = (
            f"p50/p99 = TTFT; ITL mean {e['itl_mean_ms']:.2f} ms, p99 {e['itl_p99_ms']:.2f} ms; "
            f"{e['tokens_per_s']:.0f} tokens/s; request p50 {e['latency_p50_ms']:.1f} ms; {client}"
        )
        if kind == "lean":  # what the OpenAI frontend costs the server over KServe's stream
            ref = find("generate", p.concurrency)
            if ref and ref.cpu_us_per_req and p.cpu_us_per_req and ref.infer_per_s:
                r = f"{p.cpu_us_per_req / ref.cpu_us_per_req:.2f}x"
                return (
                    f"{value} {r} | server CPU/req vs KServe generate_stream (req/s "
                    f"{p.infer_per_s / ref.infer_per_s:.2f}x); {timing} |"
                )
        if kind == "stream":  # what the official client costs over a lean one
            ref = find("lean", p.concurrency)
            if ref and ref.infer_per_s:
                r = f"{p.infer_per_s / ref.infer_per_s:.2f}x"
                return (
                    f"{value} {r} | req/s vs the same stream read with aiohttp (TTFT p50 "
                    f"{ref.p50_ms:.1f} ms there); {timing} |"
                )
        return f"{value} | {timing} |"
    if kind == "plain":
        same = find("stream", p.concurrency)
        r = f"{p.infer_per_s / same.infer_per_s:.2f}x" if same and same.infer_per_s else ""
        vs = f"streaming, same concurrency (req/s); {client}"
        return f"{value} {r} | {vs if r else client} |"
    ref = find("reference")
    r = f"{p.infer_per_s / ref.infer_per_s:.2f}x" if ref and ref.infer_per_s else ""
    if kind == "kserve":
        return f"{value} {r} | 3 steps in-process (req/s); KServe JSON; {client} |"
    kserve = find("kserve", p.concurrency)
    than = (
        f"server CPU/req {p.cpu_us_per_req / kserve.cpu_us_per_req:.2f}x, req/s "
        f"{p.infer_per_s / kserve.infer_per_s:.2f}x KServe's; "
        if kserve and kserve.cpu_us_per_req and p.cpu_us_per_req and kserve.infer_per_s
        else ""
    )
    vs = (
        f"3 steps in-process (req/s); {than}max abs diff {e.get('max_abs_diff', 0):.1e} vs "
        f"in-process; {client}"
    )
    return f"{value} {r} | {vs} |"


def main(argv: list[str] | None = None) -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--window-s", type=float, default=Settings.window_s)
    parser.add_argument("--max-tokens", type=int, default=Settings.max_tokens)
    args = parser.parse_args(argv)
    settings = (
        Settings.smoke()
        if args.smoke
        else Settings(max_tokens=args.max_tokens, window_s=args.window_s)
    )
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-openai-"))
    try:
        found = points(
            work,
            work,
            smoke=args.smoke,
            point=run.Point,
            process=run.process,
            tritonx_cmd=run.tritonx_cmd,
            cpu_seconds=run.cpu_seconds,
            settings=settings,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(run.table(found))
    return 1 if any(p.error for p in found) else 0


if __name__ == "__main__":
    sys.exit(main())
