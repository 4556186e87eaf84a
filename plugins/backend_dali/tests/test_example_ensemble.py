"""The example repository ``tritonx.examples.dali_preprocessing``: JPEG bytes → DALI
pre-processing → ONNX CNN, as an ensemble served over HTTP and gRPC.

References, computed in-process: Pillow + numpy pre-processing and ONNX Runtime for images
already at the CNN's size (DALI's resize is then the identity and its JPEG decoder matches
Pillow's exactly: within 1e-4); for other sizes DALI's resize differs from Pillow's bilinear
filter, so the exact reference is DALI in-process + ONNX Runtime (within 1e-4) and Pillow is a
looser sanity check (see the README for the measured difference).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("nvidia.dali")
Image = pytest.importorskip("PIL.Image")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
tritonx_backend_onnx = pytest.importorskip("tritonx_backend_onnx")

import tritonclient.grpc.aio as grpcclient  # noqa: E402
import tritonclient.http.aio as httpclient  # noqa: E402

import tritonx_backend_dali  # noqa: E402
from tritonx._runtime.plugins import make_plugin_manager  # noqa: E402
from tritonx.examples.dali_preprocessing import (  # noqa: E402
    SIZE,
    build_repository,
    cnn_model,
    pil_preprocess,
    preprocess_pipeline,
)
from tritonx.server import Server  # noqa: E402
from tritonx.testing import loopback_settings  # noqa: E402
from tritonx_backend_dali import pipelines  # noqa: E402


def photo(seed: int, height: int, width: int) -> bytes:
    """A JPEG made with Pillow: smooth colour gradients plus a little noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = np.stack(
        [(xx * 255 / width + seed * 40) % 256, yy * 255 / height, (xx + yy) * 2 % 256], axis=-1
    )
    rgb = np.clip(rgb + rng.normal(0, 6, rgb.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def padded(images: list[bytes]) -> np.ndarray:
    """``images`` as Triton's DALI examples send them: UINT8 rows, zero-padded to the longest."""
    data = np.zeros((len(images), max(len(b) for b in images)), np.uint8)
    for row, image in zip(data, images, strict=True):
        row[: len(image)] = np.frombuffer(image, np.uint8)
    return data


async def ensemble_logits(server: Server, images: list[bytes]) -> list[np.ndarray]:
    """The ensemble's LOGITS for ``images`` (one UINT8 row each), over HTTP and gRPC."""
    data = padded(images)
    results = []
    for module in (httpclient, grpcclient):
        url = server.http_url if module is httpclient else server.grpc_url
        client: Any = module.InferenceServerClient(url)
        try:
            tensor = module.InferInput("IMAGE", list(data.shape), "UINT8")
            tensor.set_data_from_numpy(data)
            result = await client.infer("dali_cnn", [tensor])
            results.append(result.as_numpy("LOGITS"))
        finally:
            await client.close()
    return results


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return build_repository(tmp_path / "models")


@pytest.fixture
def plugin_manager() -> Any:
    return make_plugin_manager(autoload=False, extra=[tritonx_backend_dali, tritonx_backend_onnx])


async def test_ensemble_matches_pillow_and_onnxruntime_at_the_cnn_size(
    repository: Path, plugin_manager: Any
) -> None:
    """Images of the CNN's size: the served ensemble equals Pillow/numpy pre-processing +
    ONNX Runtime within 1e-4, over HTTP and gRPC."""
    images = [photo(seed, SIZE, SIZE) for seed in range(3)]
    pixels = np.stack([pil_preprocess(image) for image in images])
    session = ort.InferenceSession(cnn_model(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["logits"], {"input": pixels})
    async with Server(loopback_settings(repository), plugin_manager=plugin_manager) as server:
        for logits in await ensemble_logits(server, images):
            assert logits.shape == (3, 10) and logits.dtype == np.float32
            np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)


async def test_ensemble_resizes_like_dali_in_process(repository: Path, plugin_manager: Any) -> None:
    """Images of other sizes and aspect ratios: the served ensemble equals DALI in-process +
    ONNX Runtime within 1e-4; Pillow's bilinear resize agrees within a few grey levels."""
    images = [photo(10, 48, 64), photo(11, 120, 90), photo(12, 20, 33)]
    dali_pixels = np.stack(
        pipelines.run(
            preprocess_pipeline(), {"IMAGE": [np.frombuffer(b, np.uint8) for b in images]}
        )[0]
    )
    pil_pixels = np.stack([pil_preprocess(image) for image in images])
    # Pillow's and DALI's resize filters differ a little (normalised units; 0.13 is ~7/255)
    assert np.abs(dali_pixels - pil_pixels).max() < 0.25
    assert np.abs(dali_pixels - pil_pixels).mean() < 0.02
    session = ort.InferenceSession(cnn_model(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["logits"], {"input": dali_pixels})
    (pil_expected,) = session.run(["logits"], {"input": pil_pixels})
    async with Server(loopback_settings(repository), plugin_manager=plugin_manager) as server:
        for logits in await ensemble_logits(server, images):
            np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)
            np.testing.assert_allclose(logits, pil_expected, rtol=0, atol=0.05)


def test_example_writes_a_repository_tritonx_check_accepts(tmp_path: Path) -> None:
    """``python -m tritonx.examples.dali_preprocessing`` writes the three models and
    ``tritonx check`` finds them all OK."""
    import json
    import os
    import subprocess
    import sys

    root = tmp_path / "example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    src = [str(Path(m.__file__).parent.parent) for m in (tritonx_backend_dali,)]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*src, env.get("PYTHONPATH")]))
    made = subprocess.run(
        [sys.executable, "-m", "tritonx.examples.dali_preprocessing", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    env["TRITONX_PLUGINS"] = "backend_dali,backend_onnx"
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    models = {m["name"]: m for m in json.loads(result.stdout)}
    assert {name: m["status"] for name, m in models.items()} == {
        "preprocess": "OK",
        "cnn": "OK",
        "dali_cnn": "OK",
    }


def test_tritonx_serve_answers_the_ensemble_beside_a_corrupt_pipeline(
    repository: Path, tmp_path: Path
) -> None:
    """A real ``tritonx serve`` process (the plugins found through their entry points): the
    ensemble answers the synchronous tritonclient over HTTP and gRPC while a corrupt DALI
    model failed alone, and ``/metrics`` counts the DALI model's compute time."""
    from tritonx.testing import ServeProcess
    from tritonx.testing import installed_plugins as installed

    if not {"backend_dali", "backend_onnx"} <= installed():
        pytest.skip("needs tritonx-backend-dali and tritonx-backend-onnx installed")
    import tritonclient.grpc as grpc_sync
    import tritonclient.http as http_sync

    broken = repository / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "model.dali").write_bytes(b"\x08\x01garbage")
    (broken / "config.pbtxt").write_text('backend: "dali"\n')
    images = [photo(20, SIZE, SIZE), photo(21, SIZE, SIZE)]
    pixels = np.stack([pil_preprocess(image) for image in images])
    session = ort.InferenceSession(cnn_model(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["logits"], {"input": pixels})
    data = padded(images)
    with ServeProcess(
        repository,
        tmp_path / "serve.log",
        "--exit-on-error=false",
        "--strict-readiness=false",
        plugins=("backend_dali", "backend_onnx"),
    ) as proc:
        for module, url in ((http_sync, proc.http_url), (grpc_sync, proc.grpc_url)):
            client: Any = module.InferenceServerClient(url)
            try:
                assert client.is_model_ready("dali_cnn")
                assert not client.is_model_ready("broken")
                tensor = module.InferInput("IMAGE", list(data.shape), "UINT8")
                tensor.set_data_from_numpy(data)
                got = client.infer("dali_cnn", [tensor]).as_numpy("LOGITS")
            finally:
                client.close()
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
        samples = proc.metrics()
        labels = (("model", "preprocess"), ("version", "1"))
        assert samples[("nv_inference_count_total", labels)] == 4
        assert samples[("nv_inference_compute_infer_duration_us_total", labels)] > 0
        assert "is not a serialized DALI pipeline" in proc.log_text()
