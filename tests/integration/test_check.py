"""``tritonx check``: the real command in a subprocess over good and bad repositories; the
table, ``--json``, exit codes, and that it agrees with what ``serve`` does (same messages)
without loading any instance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env

pytest.importorskip("onnx")
from onnx import TensorProto

from tritonx_backend_onnx.models import identity

# the identity test backend as an installed plugin whose load() leaves a trace: check must
# never load an instance
ECHO = """
import os
from pathlib import Path

from tritonx.testing import identity
from tritonx.testing.identity import tritonx_register_backends  # noqa: F401

_load = identity.IdentityBackend.load


def _traced(self, ctx):
    Path(os.environ["LOAD_TRACE"]).write_text("loaded")
    return _load(self, ctx)


identity.IdentityBackend.load = _traced
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = echo_plugin_env(tmp_path / "site", ECHO, plugins=("backend_echo", "backend_onnx"))
    environ["LOAD_TRACE"] = str(tmp_path / "trace")
    # the table's width is the terminal's (COLUMNS first): pin it to the width off a terminal
    # (500), so that an inherited COLUMNS (a narrow terminal, a CI runner) cuts no cell
    environ["COLUMNS"] = "500"
    return environ


def check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonx", "check", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def good_models(repo: ModelRepositoryBuilder) -> None:
    repo.add_identity("echo", dims=[4], max_batch_size=8)
    # no config.pbtxt: ONNX auto-complete reads the model file
    repo.add(
        "onnx_auto",
        write_config=False,
        versions={1: {"model.onnx": identity(TensorProto.FLOAT, [None, 3])}, 2: {}},
    )
    repo.add(
        "ens",
        config="""
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN", data_type: TYPE_FP32, dims: [4] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [4] } ]
ensemble_scheduling { step [ { model_name: "echo" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
""",
    )


def test_good_repository_table_and_json(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], tmp_path: Path
) -> None:
    good_models(model_repository)
    result = check(env, str(model_repository.root))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [c.strip() for c in lines[1].split("|")[1:-1]] == [
        "Model", "Versions", "Status", "Backend", "Max batch", "Inputs", "Outputs", "Instances",
    ]  # fmt: skip
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in lines[3:-1]
    }
    assert rows["echo"] == [
        "1",
        "OK",
        "identity",
        "8",
        "INPUT0:FP32[4]",
        "OUTPUT0:FP32[4]",
        "1xKIND_CPU",
    ]
    # auto-complete: the batch dimension became max_batch_size 4 (ORT's default), 2 CPU
    # instances (ORT's default count), latest version only
    assert rows["onnx_auto"] == [
        "2", "OK", "onnxruntime_onnx/onnxruntime", "4", "INPUT0:FP32[3]", "OUTPUT0:FP32[3]",
        "2xKIND_CPU",
    ]  # fmt: skip
    assert rows["ens"] == ["1", "OK", "ensemble", "8", "IN:FP32[4]", "OUT:FP32[4]", "-"]
    assert not (tmp_path / "trace").exists()  # no instance was loaded

    result = check(env, "--json", str(model_repository.root))
    assert result.returncode == 0, result.stderr
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert out["onnx_auto"]["status"] == "OK" and out["onnx_auto"]["versions"] == [2]
    config = out["onnx_auto"]["config"]
    assert config["max_batch_size"] == 4
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert config["input"][0]["dims"] == [3]
    assert out["echo"]["repository"] == str(model_repository.root)
    # --backend-config reaches the backend's auto-complete, as with serve
    result = check(
        env, "--json", "--backend-config", "onnxruntime,default-max-batch-size=2",
        str(model_repository.root),
    )  # fmt: skip
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert out["onnx_auto"]["config"]["max_batch_size"] == 2
    # --model-config-name reads configs/<name>.pbtxt where a model has one, as serve does
    echo_dir = model_repository.root / "echo"
    (echo_dir / "configs").mkdir()
    small = (
        (echo_dir / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 2")
    )
    (echo_dir / "configs" / "small.pbtxt").write_text(small)
    result = check(env, "--json", "--model-config-name", "small", str(model_repository.root))
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert out["echo"]["config"]["max_batch_size"] == 2
    assert out["onnx_auto"]["config"]["max_batch_size"] == 4


def test_no_repository_checks_the_bundled_examples(env: dict[str, str]) -> None:
    from tritonx.config import EXAMPLE_REPOSITORY

    env = {**env, "TRITONX_PLUGINS": "backend_onnx,backend_python"}
    result = check(env, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert sorted(out) == sorted(p.name for p in EXAMPLE_REPOSITORY.iterdir() if p.is_dir())
    assert out["simple"]["config"]["max_batch_size"] == 8


def test_bad_repository_reasons_and_exit_code(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], tmp_path: Path
) -> None:
    good_models(model_repository)
    model_repository.add("nobackend", config='name: "nobackend" backend: "zzz"')
    model_repository.add_identity("negative", max_batch_size=-1)
    model_repository.add_identity("noversion", versions=())
    model_repository.add_identity(
        "noagent", extra='model_repository_agents { agents [ { name: "nope" } ] }\n'
    )
    model_repository.add(
        "ens_bad",
        config="""
name: "ens_bad"
platform: "ensemble"
max_batch_size: 16
input [ { name: "IN", data_type: TYPE_FP32, dims: [4] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [4] } ]
ensemble_scheduling { step [ { model_name: "echo" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
""",
    )
    model_repository.add(
        "ens_missing",
        config="""
name: "ens_missing"
platform: "ensemble"
input [ { name: "IN", data_type: TYPE_FP32, dims: [4] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [4] } ]
ensemble_scheduling { step [ { model_name: "nope" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
""",
    )
    result = check(env, "--json", str(model_repository.root))
    assert result.returncode == 1
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert {n for n, m in out.items() if m["status"] == "OK"} == {"echo", "onnx_auto", "ens"}
    assert out["nobackend"]["error"].startswith("unable to find backend library for backend 'zzz'")
    assert out["negative"]["error"] == "'max_batch_size' must be non-negative value for negative"
    assert out["noversion"]["error"] == (
        "at least one version must be available under the version policy of model 'noversion'"
    )
    assert out["ens_bad"]["error"] == (
        "ensemble ens_bad allows maximum batch size 16, but it contains model echo which only "
        "allows maximum batch size to be 8"
    )
    assert out["ens_missing"]["error"] == (
        "ensemble ens_missing contains models that are not available or ambiguous: nope"
    )
    assert out["noagent"]["error"].startswith(
        "unable to find repository agent 'nope' for model 'noagent'"
    )
    assert "config" not in out["negative"]

    table = check(env, str(model_repository.root))
    assert table.returncode == 1
    assert (
        "| negative    | -        | ERROR: 'max_batch_size' must be non-negative value for negative"
        in table.stdout
    )
    assert not (tmp_path / "trace").exists()


def test_same_reason_as_serve_and_other_failures(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], tmp_path: Path
) -> None:
    model_repository.add_identity("negative", max_batch_size=-1)
    serve = subprocess.run(
        [
            sys.executable, "-m", "tritonx", "serve", "--model-repository",
            str(model_repository.root), "--allow-http=false", "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert serve.returncode == 1
    result = check(env, "--json", str(model_repository.root))
    reason = json.loads(result.stdout)[0]["error"]
    assert reason in serve.stderr
    # strict mode: a model without config.pbtxt fails as serve would
    model_repository.add(
        "onnx_auto",
        write_config=False,
        versions={1: {"model.onnx": identity(TensorProto.FLOAT, [None, 3])}},
    )
    out = {
        m["name"]: m
        for m in json.loads(
            check(
                env, "--json", "--disable-auto-complete-config", str(model_repository.root)
            ).stdout
        )
    }
    assert "model configuration is not provided for model 'onnx_auto'" in out["onnx_auto"]["error"]
    # the same model in two repositories; a repository that does not exist
    second = ModelRepositoryBuilder(tmp_path / "second")
    second.add_identity("negative")
    out = {
        m["name"]: m
        for m in json.loads(
            check(env, "--json", str(model_repository.root), str(second.root)).stdout
        )
    }
    assert out["negative"]["error"] == "model appears in two or more repositories"
    missing = check(env, str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert f"failed to stat file {tmp_path / 'nope'}" in missing.stderr


def test_repository_agents_run_as_at_load(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], tmp_path: Path
) -> None:
    """check runs the agents' LOAD actions: a checksum mismatch is reported with the agent's
    message, an encrypted model is decrypted and auto-completed, and the decrypted copy is
    wiped afterwards (the agents get LOAD_FAIL: nothing serves)."""
    pytest.importorskip("tritonx_repoagent_checksum")
    pytest.importorskip("tritonx_repoagent_decrypt")
    import hashlib

    model = identity(TensorProto.FLOAT, [None, 3])
    digest = hashlib.md5(model).hexdigest()

    def checksum(name: str, md5: str) -> None:
        model_repository.add(
            name,
            config=f"""
backend: "onnxruntime"
model_repository_agents {{ agents [ {{ name: "checksum"
  parameters {{ key: "MD5:1/model.onnx" value: "{md5}" }} }} ] }}
""",
            versions={1: {"model.onnx": model}},
        )

    checksum("good_sum", digest)
    checksum("bad_sum", "0" * 32)
    plain = tmp_path / "plain" / "enc"
    (plain / "1").mkdir(parents=True)
    (plain / "1" / "model.onnx").write_bytes(model)
    (plain / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    key = tmp_path / "key"
    env = {
        **env,
        "TRITONX_PLUGINS": env["TRITONX_PLUGINS"] + ",repoagent_checksum,repoagent_decrypt",
        "TRITONX_TMPDIR": str(tmp_path / "private"),
    }
    made = subprocess.run(
        [sys.executable, "-m", "tritonx", "encrypt-model", str(plain),
         str(model_repository.root / "enc"), "--key-file", str(key), "--generate-key"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr

    result = check(env, "--json", str(model_repository.root))
    assert result.returncode == 1, result.stdout + result.stderr
    out = {m["name"]: m for m in json.loads(result.stdout)}
    assert out["good_sum"]["status"] == "OK"
    assert out["bad_sum"]["error"] == (
        f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: {digest}"
    )
    # decrypted, then auto-completed from the plaintext model
    assert out["enc"]["status"] == "OK", out["enc"]
    assert out["enc"]["config"]["input"][0]["dims"] == [3]
    # the decrypted copy is gone: no plaintext model left anywhere under the private root
    leftovers = [p for p in (tmp_path / "private").rglob("*") if p.is_file()]
    assert leftovers == []
