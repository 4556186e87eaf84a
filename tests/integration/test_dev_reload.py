"""``tritonx serve --reload``: a model whose files change is reloaded, no restart.

* A real ``tritonx serve --reload`` subprocess serves a Python model and an ONNX model:
  editing ``model.py`` changes the answers, replacing ``model.onnx`` too, each announced in
  the log ("reloading model '<m>': <file> changed"), in the same process, the other model
  untouched (its statistics go on). A ``model.py`` that does not compile fails its reload
  and the loaded version keeps answering until it is fixed; a model folder moved in is
  loaded and one removed is unloaded (the default control mode, none).
* In explicit mode only loaded models are reloaded (in-process server, model events).
* ``--reload`` is refused with a cloud repository, and without watchfiles (exit status 2).

The tests wait on the server's log and its model events, never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

import tritonx
from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx._runtime.settings_check import SettingsError
from tritonx.testing import ModelRepositoryBuilder, ServeProcess, identity, loopback_settings

pytest.importorskip("watchfiles", reason="--reload needs watchfiles (tritonx[reload])")

#: seconds any one wait may take before the test fails (a hang, not a measurement: a server
#: starting on a loaded 2-core machine, with the ONNX and Python backends, took over 60 s)
DEADLINE = 240.0

PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

K = {k}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (data + K).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def add_model(repo: ModelRepositoryBuilder, name: str, backend: str, files: dict[str, Any]) -> Path:
    """Model ``name`` (INPUT0 → OUTPUT0, FP32 [4], one CPU instance) with version 1's
    ``files``."""
    return repo.add(
        name,
        backend=backend,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        extra="instance_group [ { count: 1, kind: KIND_CPU } ]\n",
        versions={1: files},
    )


def onnx_model(k: int) -> bytes:
    """INPUT0 FP32 [4] → OUTPUT0 = INPUT0 + ``k``."""
    pytest.importorskip("onnxruntime", reason="the ONNX backend needs onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from tritonx_backend_onnx.models import make_model

    return make_model(
        [helper.make_node("Add", ["INPUT0", "K"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.FLOAT, [4])],
        [("OUTPUT0", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([k], np.float32), "K")],
    ).SerializeToString()


class Serve(ServeProcess):
    """``tritonx serve --reload`` over ``root`` (HTTP only), with the ONNX and Python
    backends; :meth:`wait_log` reads on from where the previous wait stopped."""

    def __init__(self, root: Path, log: Path, *options: str, **env: str | None) -> None:
        self.offset = 0
        super().__init__(
            root, log, "--reload", *options, listeners=("http",), env=env, timeout=DEADLINE
        )
        self.client = httpclient.InferenceServerClient(self.http_url)
        self.wait_log("--reload: watching")

    def wait_log(self, *patterns: str) -> int:  # type: ignore[override]
        """Wait until the log, after what earlier waits read, has lines matching
        ``patterns`` in that order. (A reload is complete at the model's "successfully
        loaded '<m>'", which follows the swap, not at its version's "successfully loaded
        '<m>' version <v>", which precedes it.)"""
        self.offset = super().wait_log(self.offset, *patterns)
        return self.offset

    def answer(self, model: str) -> float:
        """The K of ``model``'s answer (OUTPUT0 - INPUT0)."""
        data = np.arange(4, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        out = self.client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert out is not None
        (k,) = np.unique(out - data)
        return float(k)

    def successes(self, model: str) -> int:
        stats = self.client.get_inference_statistics(model)
        return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])

    def close(self) -> None:
        if hasattr(self, "client"):
            self.client.close()
        super().close()


def needs_backends() -> None:
    """Skip without the ONNX and Python backends."""
    pytest.importorskip("tritonx_backend_python", reason="needs the Python backend plugin")
    pytest.importorskip("tritonx_backend_onnx", reason="needs the ONNX backend plugin")


def test_edits_change_the_answers_without_restart(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    py = add_model(repo, "py", "python", {"model.py": PYTHON_MODEL.format(k=1)})
    onnx = add_model(repo, "onnx", "onnxruntime", {"model.onnx": onnx_model(10)})
    staging = tmp_path / "staging"
    staging.mkdir()
    needs_backends()
    with Serve(repo.root, tmp_path / "serve.log") as serve:
        pid = serve.proc.pid
        assert serve.answer("py") == 1 and serve.answer("onnx") == 10
        onnx_answers = 1

        # an editor saves model.py in place
        (py / "1" / "model.py").write_text(PYTHON_MODEL.format(k=2))
        serve.wait_log(
            r"reloading model 'py': py/1/model\.py changed", r"successfully loaded 'py'(?! version)"
        )
        assert serve.answer("py") == 2
        assert serve.answer("onnx") == 10
        onnx_answers += 1

        # a new model.onnx replaces the old one
        (staging / "model.onnx").write_bytes(onnx_model(20))
        os.replace(staging / "model.onnx", onnx / "1" / "model.onnx")
        serve.wait_log(
            r"reloading model 'onnx': onnx/1/model\.onnx changed",
            r"successfully loaded 'onnx'(?! version)",
        )
        assert serve.answer("onnx") == 20
        onnx_answers += 1

        # a model.py that does not compile: the loaded version goes on answering
        (py / "1" / "model.py").write_text("def execute(:\n")
        serve.wait_log(r"reloading model 'py'", r"--reload: load failed for model 'py'")
        assert serve.answer("py") == 2
        (py / "1" / "model.py").write_text(PYTHON_MODEL.format(k=3))
        serve.wait_log(r"reloading model 'py'", r"successfully loaded 'py'(?! version)")
        assert serve.answer("py") == 3

        # a model folder moved in is loaded; removed, it is unloaded
        added = add_model(
            ModelRepositoryBuilder(staging), "added", "onnxruntime", {"model.onnx": onnx_model(30)}
        )
        os.rename(added, repo.root / "added")
        serve.wait_log(
            r"\bloading model 'added': added", r"successfully loaded 'added'(?! version)"
        )
        assert serve.answer("added") == 30
        os.rename(repo.root / "added", staging / "gone")
        serve.wait_log(r"unloading model 'added': added", r"successfully unloaded 'added'")
        assert not serve.client.is_model_ready("added")

        # the same process all along; the ONNX model's counts went on across the reloads
        serve.check_alive()
        assert serve.proc.pid == pid
        assert serve.successes("onnx") == onnx_answers
        log = serve.log.read_text()
        assert "reloading model 'onnx'" in log
        assert log.count("Started HTTPService") == 1


def test_an_edit_of_the_same_size_in_the_same_second(tmp_path: Path) -> None:
    """A model's modules are compiled from their source at each load, never from a cached
    ``.pyc`` (trusted while the source's mtime in whole seconds and size match)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    py = add_model(repo, "py", "python", {"model.py": PYTHON_MODEL.format(k=1)})
    source = py / "1" / "model.py"
    second = time.time_ns() // 10**9 * 10**9
    os.utime(source, ns=(second, second + 1000))
    needs_backends()
    # what users have: bytecode cached
    with Serve(repo.root, tmp_path / "serve.log", PYTHONDONTWRITEBYTECODE=None) as serve:
        assert serve.answer("py") == 1
        source.write_text(PYTHON_MODEL.format(k=2))  # same size: one digit changed
        os.utime(source, ns=(second, second + 2000))  # the same second, another time
        serve.wait_log(r"reloading model 'py'", r"successfully loaded 'py'(?! version)")
        assert serve.answer("py") == 2


# ------------------------------------------------------------------------ explicit mode


class Events:
    """Model events (the ``tritonx_model_event`` hook): every one, and a condition to wait
    for one."""

    def __init__(self) -> None:
        self.seen: list[tritonx.ModelEvent] = []
        self.changed = asyncio.Event()

    @tritonx.hookimpl
    def tritonx_model_event(self, event: tritonx.ModelEvent) -> None:
        self.seen.append(event)
        self.changed.set()

    async def wait_for(self, name: str, state: tritonx.ModelState, after: int) -> None:
        """Wait until ``name`` reached ``state`` in an event after the first ``after``."""
        async with asyncio.timeout(DEADLINE):
            while not any(e.model_name == name and e.state is state for e in self.seen[after:]):
                self.changed.clear()
                await self.changed.wait()


async def test_explicit_mode_reloads_loaded_models_only(
    model_repository: ModelRepositoryBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = model_repository.add_identity("loaded")
    other = model_repository.add_identity("other")
    events = Events()
    pm = make_plugin_manager(autoload=False, extra=[identity, events])
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        model_control_mode="explicit",
        load_model=("loaded",),
        reload=True,
    )
    caplog.set_level("INFO", logger="tritonx")
    async with Server(settings, plugin_manager=pm) as server:
        start = len(events.seen)
        # the model not loaded changes first: by the time the loaded one's reload is done,
        # its change was seen (in the same batch or an earlier one). (A change that leaves
        # the config as it was, or changes only its instance groups, updates the model in
        # place, as Triton: no reload to wait for.)
        edit = 'parameters { key: "edit" value: { string_value: "1" } }\n'
        (other / "config.pbtxt").write_text((other / "config.pbtxt").read_text() + edit)
        (loaded / "config.pbtxt").write_text((loaded / "config.pbtxt").read_text() + edit)
        await events.wait_for("loaded", tritonx.ModelState.LOADING, start)
        await events.wait_for("loaded", tritonx.ModelState.UNAVAILABLE, start)  # old one gone
        assert server.model_ready("loaded")
        assert not server.model_ready("other")
        assert not [e for e in events.seen[start:] if e.model_name == "other"]
        messages = [r.getMessage() for r in caplog.records]
        assert "reloading model 'loaded': loaded/config.pbtxt changed" in messages


# ------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket/models", "as://acct/c/m"])
async def test_reload_refuses_cloud_repositories(url: str, tmp_path: Path) -> None:
    server = Server(
        loopback_settings([str(tmp_path), url], reload=True),
        plugin_manager=make_plugin_manager(autoload=False, extra=[identity]),
    )
    with pytest.raises(
        SettingsError, match=f"--reload watches local model repositories only, not '{url}'"
    ):
        await server.start()


def test_serve_reload_refusals_exit_with_status_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tritonx", "serve", "--reload", "--model-repository=s3://b/m"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert run.returncode == 2
    assert "--reload watches local model repositories only, not 's3://b/m'" in run.stderr
    # without watchfiles (hidden from the import system)
    hide = (
        "import sys; sys.modules['watchfiles'] = None; from tritonx.cli import cli; "
        f"cli(['serve', '--reload', '--model-repository={tmp_path}'])"
    )
    run = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, timeout=DEADLINE
    )
    assert run.returncode == 2
    assert "--reload needs the watchfiles package: pip install 'tritonx[reload]'" in run.stderr
