"""What ``--model-memory-budget`` bills (:mod:`tritonx._core.memory_accounting`), end to end:
a real ``tritonx serve`` subprocess serving Python models (tiny numpy ones), driven by the
real tritonclient HTTP client and read through ``/metrics``.

* Memory the server holds with no model loaded is not billed: nothing is in use before the
  first load, and the first Python model's footprint is a worker's, like the second's (the
  forkserver and resource tracker the Python backend starts at its first model are the
  server's, not that model's).
* With a budget just above the two models' footprints, loading them in turn 20 times (each
  unloaded through the repository API, then loaded again by a request while the other stays
  loaded) never fails for lack of budget and never evicts.
* A refusal lists what holds the budget: each loaded model with its footprint and why it
  stays (pinned, the load itself), the unattributed remainder, and what is not billed; with
  no pinned model loaded it names none.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonx.testing import ModelRepositoryBuilder, ServeProcess

pytest.importorskip("tritonx_backend_python", reason="needs the Python backend plugin")

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="the budgets measure memory through /proc"
)

MiB = 1 << 20
#: explicit mode, nothing loaded at start-up, loads on demand, the budgets' least recently
#: used order alone (``--model-min-residency-secs=0``)
ON_DEMAND = (
    "--model-control-mode=explicit",
    "--model-load-on-demand=true",
    "--model-min-residency-secs=0",
)
#: a budget no test here comes near, to measure the footprints
ROOMY = 1 << 30
ROUNDS = 20
IO: dict[str, Any] = {"inputs": [("INPUT0", "FP32", [4])], "outputs": [("OUTPUT0", "FP32", [4])]}
CPU_INSTANCE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
PINNED = 'parameters { key: "tritonx_pinned" value { string_value: "true" } }\n'

#: OUTPUT0 = OFFSET - INPUT0; ``BALLAST`` bytes held from ``initialize`` on (all touched)
PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

OFFSET = {offset}
BALLAST = {ballast}


class TritonPythonModel:
    def initialize(self, args):
        self.ballast = np.ones(BALLAST, dtype=np.uint8)

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (OFFSET - data).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def add_model(
    repo: ModelRepositoryBuilder, name: str, offset: int, extra: str = "", ballast: int = 0
) -> None:
    repo.add(
        name,
        backend="python",
        extra=CPU_INSTANCE + extra,
        versions={1: {"model.py": PYTHON_MODEL.format(offset=offset, ballast=ballast)}},
        **IO,
    )


def infer(client: httpclient.InferenceServerClient, model: str, offset: int) -> None:
    """One inference of ``model``, its answer checked."""
    data = np.arange(4, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(data)
    answer = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(answer, np.float32(offset) - data)


def by_model(metrics: dict[Any, float], sample: str, **match: str) -> dict[str, float]:
    """The values of ``sample`` by their ``model`` label, among those with labels ``match``."""
    out: dict[str, float] = {}
    for (name, labels), value in metrics.items():
        labelled = dict(labels)
        if name == sample and all(labelled.get(k) == v for k, v in match.items()):
            out[labelled["model"]] = value
    return out


def refusal(client: httpclient.InferenceServerClient, model: str) -> str:
    """The 503 a request for ``model`` gets (for want of room)."""
    with pytest.raises(InferenceServerException) as refused:
        infer(client, model, 0)
    assert refused.value.status() == "503", refused.value
    return str(refused.value.message())


def mib(size: float) -> str:
    """``size`` bytes as a refusal writes it."""
    return f"{size / MiB:.1f} MiB"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """``a`` and ``b``: pinned by their config (so a refusal has loaded models that cannot
    go); ``c``: like them, not pinned; ``big``: a worker holding 96 MiB more."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    add_model(repo, "a", 100, PINNED)
    add_model(repo, "b", 200, PINNED)
    add_model(repo, "c", 300)
    add_model(repo, "big", 400, ballast=96 * MiB)
    return repo.root


def footprints(repository: Path, log: Path) -> dict[str, float]:
    """The footprints of ``a`` and ``b`` under a roomy budget, ``a`` loaded first; checks
    that the server bills nothing with no model loaded."""
    with ServeProcess(repository, log, *ON_DEMAND, f"--model-memory-budget={ROOMY}") as server:
        before = server.metrics()
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            infer(client, "a", 100)
            infer(client, "b", 200)
        finally:
            client.close()
        after = server.metrics()
    # with no model loaded, everything the server holds is its own
    assert before[("tritonx_model_memory_used_bytes", ())] == 0
    sizes = by_model(after, "tritonx_model_memory_bytes")
    assert sorted(sizes) == ["a", "b"], sizes
    return sizes


def test_two_python_models_loaded_in_turn_fit_a_budget_just_above_their_footprints(
    repository: Path, tmp_path: Path
) -> None:
    sizes = footprints(repository, tmp_path / "roomy.log")
    # the first Python model's footprint is its worker's, as the second's: the helpers the
    # backend started for it (forkserver, resource tracker: ~48 MiB) are not billed to it
    assert sizes["a"] <= 1.5 * sizes["b"], sizes
    # room for both, and for half of one more: never for a third
    budget = int(sizes["a"] + sizes["b"] + min(sizes.values()) / 2)
    failures: list[str] = []
    with ServeProcess(
        repository, tmp_path / "serve.log", *ON_DEMAND, f"--model-memory-budget={budget}"
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for number in range(ROUNDS):
                model, offset = ("a", 100) if number % 2 == 0 else ("b", 200)
                if number >= 2:  # loaded: unload it; the other model stays loaded
                    client.unload_model(model)
                try:
                    infer(client, model, offset)  # loads it on demand
                except InferenceServerException as exc:
                    failures.append(f"load {number} ({model}): {exc}")
            metrics = server.metrics()
            # a refusal lists what holds the budget: 'a' and 'b' are pinned, 'c' does not fit
            held = refusal(client, "c")
            # unpinned: with 'a' and 'b' unloaded, 'big' alone exceeds the budget
            client.unload_model("a")
            client.unload_model("b")
            alone = refusal(client, "big")
            infer(client, "c", 300)  # and the budget still serves what fits
        finally:
            client.close()
        log = server.log_text()
    assert not failures, "\n".join(failures) + f"\n--- server log ---\n{log}"
    loads = by_model(metrics, "tritonx_model_on_demand_loads_total")
    assert loads == {"a": ROUNDS / 2, "b": ROUNDS / 2}, loads
    assert not any(by_model(metrics, "tritonx_model_evictions_total").values()), log
    assert metrics[("tritonx_model_memory_used_bytes", ())] <= budget

    loaded = by_model(metrics, "tritonx_model_memory_bytes")
    for model in ("a", "b"):
        assert f"'{model}' {mib(loaded[model])} (pinned)" in held, held
    assert re.search(r"'c' \d+\.\d MiB \(this load\)", held), held
    prefix = rf"cannot load model 'c': --model-memory-budget {budget} bytes \((\d+) bytes in use\)"
    match = re.match(prefix + " reached and no loaded model can be unloaded; in use: ", held)
    assert match, held
    assert re.search(r", unattributed \d+\.\d MiB; not billed: \d+\.\d MiB the server held", held)
    assert re.search(r"\d+\.\d MiB of multiprocessing helpers", held), held
    # the models listed and the remainder add up to what is in use (each rounded to 0.1 MiB)
    in_use = held.split("; in use: ", 1)[1].split("; not billed: ", 1)[0]
    listed = sum(float(size) for size in re.findall(r"(\d+\.\d) MiB", in_use))
    assert abs(listed * MiB - int(match.group(1))) <= 0.2 * MiB, held

    assert re.match(
        rf"cannot load model 'big': --model-memory-budget {budget} bytes \(\d+ bytes in use\) "
        r"reached and no loaded model can be unloaded; in use: 'big' \d+\.\d MiB \(this load\), "
        r"unattributed \d+\.\d MiB; not billed: ",
        alone,
    ), alone
    assert "pinned" not in alone and "ensemble" not in alone and "wait" not in alone, alone


def test_the_listeners_are_not_billed_to_models_pinned_at_start_up(
    repository: Path, tmp_path: Path
) -> None:
    """Models pinned with ``--load-model`` load before the listeners start: what the listeners
    allocate (~15 MiB here) is the server's, not unattributed model memory (the bill is the
    two footprints, give or take what a scrape allocates)."""
    with ServeProcess(
        repository,
        tmp_path / "serve.log",
        "--model-control-mode=explicit",
        "--model-load-on-demand=true",
        "--load-model=c",
        "--load-model=big",
        f"--model-memory-budget={ROOMY}",
    ) as server:
        metrics = server.metrics()
    sizes = by_model(metrics, "tritonx_model_memory_bytes")
    assert sorted(sizes) == ["big", "c"], sizes
    unattributed = metrics[("tritonx_model_memory_used_bytes", ())] - sum(sizes.values())
    assert unattributed < 4 * MiB, f"{unattributed / MiB:.1f} MiB billed to no model"
