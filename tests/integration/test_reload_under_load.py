"""Reloads without downtime, under load: a real ``tritonx serve`` subprocess serves an ONNX
model and a Python model to 16 concurrent clients (8 over HTTP, 8 over gRPC, the real
tritonclient clients) while the test reloads both models, 20 times each:

* in explicit mode (first server) by rewriting the model file in place, or by adding a new
  version folder (version policy ``latest 1``), then calling the load API (over HTTP and
  gRPC in turn); a load of a broken file in place, and of a broken new version folder,
  fails and leaves the loaded version serving;
* in poll mode (second server, ``--repository-poll-secs``) by replacing the model file, or
  by moving a new version folder in; the test learns that the repository poll completed
  the reload from the server's log ("loading: <m>:<v>", then "successfully loaded '<m>'").

A reload is all or nothing, as Triton's: with two versions served, one that fails to
reload leaves both old ones serving (in-process, a backend reading ``<version>/k.txt``).

Each model answers ``OUTPUT0 = INPUT0 + K``, where ``K = 100 * version + edit`` names the
content on disk. No request may fail; every answer's K must be one that was written, no
older than the last reload completed before the request was sent and no newer than the
last written; its ``model_version`` must be ``K // 100`` and it must name the model and
the request's id; every K written must have served requests (traffic switched every time);
the models, and the server, stay ready (but while a failed version is on display, as in
Triton); a load of the model unchanged loads nothing. At the end of each phase the statistics and the
``nv_inference_request_success`` counter of the version serving count exactly the answers
the clients got from it, over all its reloads in place (the counts continue across a
reload), and no failure.

The test waits on events only (the load API's answer, the log, the clients' answers); it
makes no timing assertion.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, ServeProcess, loopback_settings

pytest.importorskip("onnx", reason="the ONNX model is built with the onnx package")
pytest.importorskip("onnxruntime", reason="the ONNX backend needs onnxruntime")
pytest.importorskip("tritonx_backend_onnx", reason="needs the ONNX backend plugin")
pytest.importorskip("tritonx_backend_python", reason="needs the Python backend plugin")

from onnx import TensorProto, helper, numpy_helper

from tritonx_backend_onnx.models import make_model

ONNX = "add_onnx"
PYTHON = "add_py"
MODELS = (ONNX, PYTHON)
FILENAME = {ONNX: "model.onnx", PYTHON: "model.py"}
#: clients per protocol; each alternates between the two models
CLIENTS = 8
#: seconds any one wait may take before the test fails (a hang, not a measurement)
DEADLINE = 120.0

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

#: what a broken reload writes: no ONNX model, a model.py that does not compile
BROKEN: dict[str, bytes] = {ONNX: b"this is not an onnx model", PYTHON: b"def execute(:\n"}


def content(model: str, k: int) -> bytes:
    """The model file whose answers are ``INPUT0 + k``."""
    if model == PYTHON:
        return PYTHON_MODEL.format(k=k).encode()
    return make_model(
        [helper.make_node("Add", ["INPUT0", "K"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.FLOAT, [4])],
        [("OUTPUT0", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([k], np.float32), "K")],
    ).SerializeToString()


def write_repository(root: Path) -> None:
    """Both models at K = 100 (version 1, edit 0), one CPU instance each."""
    repo = ModelRepositoryBuilder(root)
    for model, backend in ((ONNX, "onnxruntime"), (PYTHON, "python")):
        repo.add(
            model,
            backend=backend,
            inputs=[("INPUT0", "FP32", [4])],
            outputs=[("OUTPUT0", "FP32", [4])],
            extra="instance_group [ { count: 1, kind: KIND_CPU } ]\n"
            "version_policy: { latest: { num_versions: 1 } }\n",
            versions={1: {FILENAME[model]: content(model, 100)}},
        )


# ---------------------------------------------------------------------------------- server


# ---------------------------------------------------------------------------------- traffic


@dataclass
class Answer:
    """One request: the model, the protocol, the K floor when it was sent, the K and
    version of its answer, the last K written when it came back, and who answered."""

    model: str
    protocol: str
    floor: int
    k: int
    version: int
    ceiling: int
    #: the model the answer names, its request id and the id the request was sent with
    answered_by: str = ""
    request_id: str = ""
    sent_id: str = ""


@dataclass
class Traffic:
    """16 client threads sending requests to both models until :meth:`stop`; what the
    reloads wrote and completed, shared with them."""

    serve: ServeProcess
    #: the K of the last reload completed, by model
    floor: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODELS, 100))
    #: the last K written, by model
    latest: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODELS, 100))
    #: every good K written, by model
    written: dict[str, set[int]] = field(default_factory=lambda: {m: {100} for m in MODELS})
    answers: list[Answer] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seen: Counter[tuple[str, int]] = field(default_factory=Counter)
    changed: threading.Condition = field(default_factory=threading.Condition)
    running: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    #: broken versions on display now (strict readiness is then false, as in Triton), and
    #: a count of their changes: a readiness sample counts only when neither changed
    broken: int = 0
    broken_changes: int = 0
    readiness_samples: int = 0
    unready: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.running.set()
        for index in range(2 * CLIENTS):
            protocol = "http" if index < CLIENTS else "grpc"
            thread = threading.Thread(
                target=self._client, args=(protocol, index), name=f"client-{index}"
            )
            thread.start()
            self.threads.append(thread)
        thread = threading.Thread(target=self._readiness, name="readiness")
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.running.clear()
        for thread in self.threads:
            thread.join(DEADLINE)
        self.threads.clear()

    def _client(self, protocol: str, index: int) -> None:
        module: Any = httpclient if protocol == "http" else grpcclient
        url = self.serve.http_url if protocol == "http" else self.serve.grpc_url
        client = module.InferenceServerClient(url)
        data = np.arange(4, dtype=np.float32) + index
        try:
            for n in itertools.count(index):
                if not self.running.is_set():
                    break
                model = MODELS[n % 2]
                floor = self.floor[model]
                tensor = module.InferInput("INPUT0", [4], "FP32")
                tensor.set_data_from_numpy(data)
                try:
                    result = client.infer(model, [tensor], request_id=f"{index}-{n}")
                except Exception as exc:
                    self._fail(f"{protocol} {model}: {exc}")
                    continue
                ceiling = self.latest[model]
                out = result.as_numpy("OUTPUT0")
                response = result.get_response()
                if protocol == "http":
                    version, by, rid = (
                        response["model_version"],
                        response["model_name"],
                        response.get("id", ""),
                    )
                else:
                    version, by, rid = response.model_version, response.model_name, response.id
                delta = np.unique(out - data)
                k = int(delta[0]) if len(delta) == 1 else -1
                with self.changed:
                    self.answers.append(
                        Answer(
                            model,
                            protocol,
                            floor,
                            k,
                            int(version),
                            ceiling,
                            by,
                            rid,
                            f"{index}-{n}",
                        )
                    )
                    self.seen[model, k] += 1
                    self.changed.notify_all()
        except BaseException as exc:  # the test fails with it
            self._fail(f"{protocol} client: {exc!r}")
        finally:
            client.close()

    def _fail(self, failure: str) -> None:
        with self.changed:
            self.failures.append(failure)
            self.changed.notify_all()

    def _readiness(self) -> None:
        """Both models stay ready all along; so does the server, but while a failed load's
        broken version is on display."""
        client = httpclient.InferenceServerClient(self.serve.http_url)
        try:
            while self.running.is_set():
                before = (self.broken, self.broken_changes)
                server = client.is_server_ready()
                models = [m for m in MODELS if not client.is_model_ready(m)]
                after = (self.broken, self.broken_changes)
                self.readiness_samples += 1
                if models:
                    self.unready.append(f"models {models}")
                if not server and before == after and before[0] == 0:
                    self.unready.append("server")
        except BaseException as exc:  # the test fails with it
            self._fail(f"readiness: {exc!r}")
        finally:
            client.close()

    def show_broken(self, shown: bool) -> None:
        """A broken version goes on display (``shown``) or away."""
        with self.changed:
            self.broken += 1 if shown else -1
            self.broken_changes += 1

    def wait_served(self, model: str, k: int) -> None:
        """Wait until a client got an answer of K ``k`` from ``model``."""
        with self.changed:
            assert self.changed.wait_for(
                lambda: self.seen[model, k] > 0 or bool(self.failures), DEADLINE
            ), f"{model} never answered K={k}"
        assert not self.failures, self.failures[:5]

    def check(self) -> None:
        """Every answer was right for its time; every K written served requests; the
        models and the server stayed ready."""
        assert not self.failures, self.failures[:5]
        assert self.readiness_samples > 0
        assert not self.unready, self.unready[:5]
        wrong = [
            a
            for a in self.answers
            if a.k not in self.written[a.model]
            or not a.floor <= a.k <= a.ceiling
            or a.version != a.k // 100
            or a.answered_by != a.model
            or a.request_id != a.sent_id
        ]
        assert not wrong, wrong[:5]
        for model in MODELS:
            for k in self.written[model]:
                assert self.seen[model, k] > 0, f"{model} K={k} served nothing"
            for protocol in ("http", "grpc"):
                assert any(a.model == model and a.protocol == protocol for a in self.answers)

    def check_counts(self) -> None:
        """The statistics and metrics of each model's serving version count exactly the
        answers the clients got from it (over all its reloads) and no failure."""
        client = httpclient.InferenceServerClient(self.serve.http_url)
        try:
            metrics = self.serve.metrics()
            for model in MODELS:
                version = self.latest[model] // 100
                got = sum(1 for a in self.answers if a.model == model and a.version == version)
                stats = client.get_inference_statistics(model, str(version))
                row = stats["model_stats"][0]
                assert row["version"] == str(version)
                assert row["inference_stats"]["success"]["count"] == got, (model, version)
                assert row["inference_stats"]["fail"]["count"] == 0
                labels = (("model", model), ("version", str(version)))
                assert metrics["nv_inference_request_success_total", labels] == got
                for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
                    failed = (*labels, ("reason", reason))
                    key = ("nv_inference_request_failure_total", tuple(sorted(failed)))
                    assert metrics[key] == 0
        finally:
            client.close()


@contextlib.contextmanager
def traffic(serve: ServeProcess) -> Iterator[Traffic]:
    load = Traffic(serve)
    load.start()
    try:
        yield load
    finally:
        load.stop()


# ---------------------------------------------------------------------------------- reloads


@dataclass
class Reloads:
    """One model's reloads: which version and edit it is at, and how each kind of reload
    puts a new K on disk."""

    model: str
    root: Path
    load: Traffic
    staging: Path
    version: int = 1
    edit: int = 0

    @property
    def folder(self) -> Path:
        return self.root / self.model

    def write_k(self, new_version: bool) -> int:
        """The next K (a new version, or the next edit of this one), announced to the
        clients as the latest before its file is written."""
        if new_version:
            self.version, self.edit = self.version + 1, 0
        else:
            self.edit += 1
        k = 100 * self.version + self.edit
        self.load.latest[self.model] = k
        self.load.written[self.model].add(k)
        return k

    def completed(self, k: int) -> None:
        """The reload to ``k`` completed: requests sent from now on must get ``k``; wait
        until the clients got it (before the next reload)."""
        self.load.floor[self.model] = k
        self.load.wait_served(self.model, k)

    def wait_more_answers(self, k: int) -> None:
        """Wait until the clients got another answer of K ``k``."""
        changed, seen = self.load.changed, self.load.seen
        with changed:
            before = seen[self.model, k]
            assert changed.wait_for(lambda: seen[self.model, k] > before, DEADLINE)

    # in place / new folder, as an editor or a deployment writes them

    def rewrite(self, data: bytes) -> None:
        """Rewrite the model file of the current version in place."""
        (self.folder / str(self.version) / FILENAME[self.model]).write_bytes(data)

    def replace(self, data: bytes) -> None:
        """Replace the model file of the current version at once (a poll never sees half
        of it): written beside the repository, then renamed over it."""
        staged = self.staging / FILENAME[self.model]
        staged.write_bytes(data)
        os.replace(staged, self.folder / str(self.version) / FILENAME[self.model])

    def add_version(self, data: bytes) -> None:
        """Move a complete new version folder in."""
        staged = self.staging / str(self.version)
        staged.mkdir()
        (staged / FILENAME[self.model]).write_bytes(data)
        os.rename(staged, self.folder / str(self.version))


def explicit_reloads(reloads: Reloads, serve: ServeProcess, plan: str) -> None:
    """``plan``: one letter per reload: ``e`` a rewrite in place, ``v`` a new version folder,
    ``x`` a broken rewrite in place, ``y`` a broken new version folder; each followed by the
    load API (over HTTP and gRPC in turn). A broken one fails and changes nothing served.
    Then a load of the model unchanged is a no-op, as in Triton (nothing is loaded)."""
    http = httpclient.InferenceServerClient(serve.http_url)
    grpc = grpcclient.InferenceServerClient(serve.grpc_url)
    model = reloads.model
    try:
        for step, kind in enumerate(plan):
            client: Any = http if step % 2 == 0 else grpc
            if kind in "xy":
                floor = reloads.load.floor[model]
                if kind == "x":
                    reloads.rewrite(BROKEN[model])
                    broken = None
                else:  # a failed version is on display until the folder goes
                    reloads.load.show_broken(True)
                    broken = reloads.folder / str(reloads.version + 1)
                    broken.mkdir()
                    (broken / FILENAME[model]).write_bytes(BROKEN[model])
                with pytest.raises(InferenceServerException, match="load failed"):
                    client.load_model(model)
                assert client.is_model_ready(model)
                reloads.wait_more_answers(floor)  # the old version still serves
                if broken is not None:
                    shutil.rmtree(broken)
                    client.load_model(model)  # the same version again: it goes away
                    reloads.load.show_broken(False)
                continue
            k = reloads.write_k(new_version=kind == "v")
            if kind == "v":
                reloads.add_version(content(model, k))
            else:
                reloads.rewrite(content(model, k))
            client.load_model(model)
            reloads.completed(k)
        offset = serve.log_size()
        http.load_model(model)
        grpc.load_model(model)
        with serve.log.open("rb") as log:
            log.seek(offset)
            assert f"loading: {model}:".encode() not in log.read()
    finally:
        http.close()
        grpc.close()


def poll_reloads(reloads: Reloads, serve: ServeProcess, plan: str) -> None:
    """``plan``: ``e`` replaces the model file, ``v`` moves a new version folder in; the
    repository poll reloads the model (seen in the log: a load of it that began after the
    change, then its success)."""
    model = reloads.model
    for kind in plan:
        k = reloads.write_k(new_version=kind == "v")
        offset = serve.log_size()
        if kind == "v":
            reloads.add_version(content(model, k))
        else:
            reloads.replace(content(model, k))
        serve.wait_log(
            offset,
            rf"loading: {model}:{reloads.version}\b",
            # the model's line (after the swap and the old version's unload), not the
            # version's ("successfully loaded '<m>' version <v>", before the swap)
            rf"successfully loaded '{model}'(?! version)",
        )
        reloads.completed(k)


def run_both(task: Callable[[str], None]) -> None:
    """``task(model)`` for both models at once (the ONNX and the Python model reload in
    parallel); re-raises the first failure."""
    errors: list[BaseException] = []

    def run(model: str) -> None:
        try:
            task(model)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m,)) for m in MODELS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


#: explicit mode: 10 good reloads per model (3 new versions) and two that fail; the last
#: ones are in place, so the serving version's counts span several reloads
EXPLICIT_PLAN = "evexeyevveee"  # (x, y: the broken ones)
#: poll mode: 10 reloads per model (2 new versions), the last ones in place
POLL_PLAN = "eevevee" + "eee"


def test_reloads_under_load_fail_no_request(tmp_path: Path) -> None:
    assert EXPLICIT_PLAN.count("e") + EXPLICIT_PLAN.count("v") == 10
    assert len(POLL_PLAN) == 10
    root = tmp_path / "explicit"
    write_repository(root)
    staging = tmp_path / "staging"
    with ServeProcess(
        root,
        tmp_path / "explicit.log",
        "--model-control-mode=explicit",
        "--load-model=*",
        timeout=DEADLINE,
    ) as serve:
        with traffic(serve) as load:
            reloads = {m: Reloads(m, root, load, staging / m) for m in MODELS}
            for folder in (staging / m for m in MODELS):
                folder.mkdir(parents=True)
            run_both(lambda m: explicit_reloads(reloads[m], serve, EXPLICIT_PLAN))
        load.check()
        load.check_counts()

    root = tmp_path / "poll"
    write_repository(root)
    with ServeProcess(
        root,
        tmp_path / "poll.log",
        "--model-control-mode=poll",
        "--repository-poll-secs=0.2",
        timeout=DEADLINE,
    ) as serve:
        with traffic(serve) as load:
            reloads = {m: Reloads(m, root, load, staging / m) for m in MODELS}
            run_both(lambda m: poll_reloads(reloads[m], serve, POLL_PLAN))
        load.check()
        load.check_counts()


# ---------------------------------------------------------------------------------- all or nothing


class TextBackend(tritonx.Backend):
    """Answers ``INPUT0 + K``, K read from ``<version>/k.txt`` (a load fails when it is not a
    number)."""

    name = "ktext"
    default_model_filename = "k.txt"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        assert ctx.model_path is not None
        return TextInstance(float(ctx.model_path.read_text()))


class TextInstance(tritonx.ModelInstance):
    def __init__(self, k: float) -> None:
        self.k = k

    def execute(
        self, requests: Sequence[tritonx.InferenceRequest]
    ) -> list[tritonx.InferenceResponse]:
        return [
            tritonx.InferenceResponse(outputs={"OUTPUT0": r.inputs["INPUT0"] + self.k})
            for r in requests
        ]


class TextPlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(TextBackend)


async def test_a_reload_is_all_or_nothing(model_repository: ModelRepositoryBuilder) -> None:
    model = model_repository.add(
        "m",
        backend="ktext",
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        extra="version_policy: { all: { } }\n",
        versions={1: {"k.txt": "1"}, 2: {"k.txt": "2"}},
    )
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        model_control_mode="explicit",
        load_model=("m",),
    )
    pm = make_plugin_manager(autoload=False, extra=[TextPlugin()])

    async def k(server: Server, version: int) -> float:
        data = np.zeros(4, np.float32)
        request = tritonx.InferenceRequest("m", {"INPUT0": data}, model_version=version)
        return float((await server.infer(request)).outputs["OUTPUT0"][0])

    async with Server(settings, plugin_manager=pm) as server:
        assert [await k(server, 1), await k(server, 2)] == [1, 2]
        (model / "1" / "k.txt").write_text("10")  # version 1 would load...
        (model / "2" / "k.txt").write_text("broken")  # ...but version 2 fails
        with pytest.raises(TritonXError, match="load failed for model 'm': version 2"):
            await server.load_model("m")
        assert [await k(server, 1), await k(server, 2)] == [1, 2]  # both old ones serve
        assert server.server_ready()
        (model / "2" / "k.txt").write_text("20")
        await server.load_model("m")
        assert [await k(server, 1), await k(server, 2)] == [10, 20]
