"""The ``decrypt`` repository agent and ``tritonx encrypt-model`` through a real server: an
encrypted ONNX model with only its agents and backend in config.pbtxt is auto-completed and
served over HTTP and gRPC; its plaintext exists only in the private folder, which is gone after
unload, reload and failed loads; wrong keys and modified files fail the load naming the file;
checksum then decrypt compose."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tritonx_repoagent_checksum
import tritonx_repoagent_decrypt
from tritonx import Server
from tritonx.testing import ServerThread, loopback_settings
from tritonx_backend_onnx.models import add_sub
from tritonx_repoagent_decrypt import encrypt_model_command, temp_root

PLAIN = add_sub()
AGENT_ENV = 'model_repository_agents { agents [ { name: "decrypt" parameters { key: "key_env" value: "TRITONX_TEST_MODEL_KEY" } } ] }\n'
DECRYPTED = re.compile(r"model '(?P<model>[^']+)': decrypted \d+ files into (?P<path>\S+)")


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


@pytest.fixture
def tmproot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tritonx's temporary root for this test (so the test sees every file written there)."""
    root = tmp_path / "tmproot"
    root.mkdir()
    monkeypatch.setenv("TRITONX_TMPDIR", str(root))
    return root


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "keys" / "model.key"
    path.parent.mkdir()
    monkeypatch.delenv("TRITONX_TEST_MODEL_KEY", raising=False)
    return path


def encrypt(src: Path, dst: Path, key_file: Path, *args: str) -> str:
    result = CliRunner().invoke(
        encrypt_model_command, [str(src), str(dst), "--key-file", str(key_file), *args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def plain_model(tmp_path: Path, name: str, config: str = 'backend: "onnxruntime"\n') -> Path:
    src = tmp_path / "plain" / name
    (src / "1").mkdir(parents=True)
    (src / "config.pbtxt").write_text(config)
    (src / "1" / "model.onnx").write_bytes(PLAIN)
    return src


def encrypted_model(tmp_path: Path, name: str, key_file: Path, config: str = "") -> Path:
    """``repo/<name>``: the add/sub ONNX model encrypted, config = backend (+ ``config``) +
    the decrypt agent reading the key from $TRITONX_TEST_MODEL_KEY."""
    dst = tmp_path / "repo" / name
    args = ["--key-env", "TRITONX_TEST_MODEL_KEY"]
    if not key_file.exists():
        args.append("--generate-key")
    src = plain_model(tmp_path, name, 'backend: "onnxruntime"\n' + config)
    encrypt(src, dst, key_file, *args)
    shutil.rmtree(src)  # the plaintext source is gone: only the server may recreate it
    os.environ["TRITONX_TEST_MODEL_KEY"] = key_file.read_text().strip()
    return dst


@pytest.fixture
def running(
    tmp_path: Path, tmproot: Path, plugin_manager: Any, register_plugin: Any
) -> Iterator[Server]:
    register_plugin(tritonx_repoagent_checksum)
    register_plugin(tritonx_repoagent_decrypt)
    (tmp_path / "repo").mkdir(exist_ok=True)
    settings = loopback_settings(
        tmp_path / "repo", model_control_mode="explicit", allow_metrics=False
    )
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        yield server


def files_holding_plaintext(root: Path) -> set[Path]:
    found = set()
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink() and PLAIN in path.read_bytes():
                found.add(path)
    return found


def decrypted_folders(caplog: Any, model: str) -> list[Path]:
    return [Path(m["path"]) for m in DECRYPTED.finditer(caplog.text) if m["model"] == model]


def infer(protocol: str, client: Any, model: str) -> tuple[list[float], list[float]]:
    mod = httpclient if protocol == "http" else grpcclient
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    inputs = [mod.InferInput("INPUT0", [2, 4], "FP32"), mod.InferInput("INPUT1", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    return result.as_numpy("OUTPUT0").tolist(), (a + b).tolist()


def refused(protocol: str, client: Any, model: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    assert info.value.status() == ("500" if protocol == "http" else "StatusCode.INTERNAL")
    message = info.value.message()
    assert f"failed to load '{model}', failed to poll from model repository" in message
    assert not client.is_model_ready(model)
    return message


def test_encrypted_onnx_model_is_auto_completed_and_served(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.repoagent.decrypt")
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    # on disk: a readable config naming the agent, ciphertext only
    assert sorted(p.relative_to(repo_model).as_posix() for p in repo_model.rglob("*")) == [
        "1",
        "1/model.onnx.enc",
        "config.pbtxt",
    ]
    assert 'name: "decrypt"' in (repo_model / "config.pbtxt").read_text()
    assert "input" not in (repo_model / "config.pbtxt").read_text()
    assert files_holding_plaintext(tmp_path / "repo") == set()
    for protocol, client in (
        ("http", httpclient.InferenceServerClient(running.http_url)),
        ("grpc", grpcclient.InferenceServerClient(running.grpc_url)),
    ):
        client.load_model("enc")
        assert client.is_model_ready("enc")
        got, want = infer(protocol, client, "enc")
        assert got == want
        # auto-complete read the decrypted model: inputs, outputs, batching
        if protocol == "http":
            config = client.get_model_config("enc")
        else:
            config = client.get_model_config("enc", as_json=True)["config"]
        assert config["max_batch_size"] == 4
        assert sorted(i["name"] for i in config["input"]) == ["INPUT0", "INPUT1"]
        (folder,) = decrypted_folders(caplog, "enc")
        # the private folder: under tritonx's temp root, 0700, the only place with plaintext
        assert folder.parent.parent == temp_root() and temp_root().parent == tmproot
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(temp_root().stat().st_mode) == 0o700
        assert files_holding_plaintext(tmp_path) == {folder / "1" / "model.onnx"}
        client.unload_model("enc")
        assert not client.is_model_ready("enc")
        assert not folder.exists() and not folder.parent.exists()
        assert files_holding_plaintext(tmp_path) == set()
        assert list(temp_root().iterdir()) == []
        client.close()
        caplog.clear()


def test_reload_and_failed_loads_wipe_the_private_folder(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.repoagent.decrypt")
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    client = httpclient.InferenceServerClient(running.http_url)
    client.load_model("enc")
    (first,) = decrypted_folders(caplog, "enc")
    # a reload (the config changed) decrypts again and wipes the folder it replaces
    config = repo_model / "config.pbtxt"
    config.write_text(config.read_text() + "max_batch_size: 2\n")
    client.load_model("enc")
    assert client.get_model_config("enc")["max_batch_size"] == 2
    first_, second = decrypted_folders(caplog, "enc")
    assert first_ == first and not first.exists() and second.exists()
    assert files_holding_plaintext(tmp_path) == {second / "1" / "model.onnx"}
    # a model that decrypts but fails its load (the config names 1 input of the model's 2):
    # LOAD_FAIL wipes its folder, and the version that was serving keeps serving
    config.write_text(
        config.read_text() + 'input [ { name: "NOPE" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    with pytest.raises(InferenceServerException) as info:
        client.load_model("enc")
    assert "configuration expects 1 inputs, model provides 2" in info.value.message()
    assert client.is_model_ready("enc")
    third = decrypted_folders(caplog, "enc")[2]
    assert not third.exists() and second.exists()
    client.unload_model("enc")
    assert list(temp_root().iterdir()) == []
    client.close()


def test_wrong_key_and_modified_file_fail_the_load_naming_the_file(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server
) -> None:
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    grpc = grpcclient.InferenceServerClient(running.grpc_url)
    http = httpclient.InferenceServerClient(running.http_url)
    os.environ["TRITONX_TEST_MODEL_KEY"] = "ab" * 32
    for protocol, client in (("http", http), ("grpc", grpc)):
        assert (
            "failed to decrypt '1/model.onnx.enc': wrong key or the file was modified"
            in refused(protocol, client, "enc")
        )
    os.environ["TRITONX_TEST_MODEL_KEY"] = key_file.read_text().strip()
    enc = repo_model / "1" / "model.onnx.enc"
    original = enc.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01  # one bit of the ciphertext
    enc.write_bytes(bytes(data))
    assert "failed to decrypt '1/model.onnx.enc': wrong key or the file was modified" in refused(
        "grpc", grpc, "enc"
    )
    # a file moved to another name fails too (its path is authenticated)
    (repo_model / "2").mkdir()
    enc.write_bytes(original)  # intact, but under another version folder
    enc.rename(repo_model / "2" / "model.onnx.enc")
    (repo_model / "1").rmdir()
    assert "failed to decrypt '2/model.onnx.enc'" in refused("http", http, "enc")
    assert list(temp_root().iterdir()) == []
    assert files_holding_plaintext(tmp_path) == set()
    assert http.is_server_live()
    http.close()
    grpc.close()


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            "",
            "decrypt agent of model 'enc' needs a key: set exactly one of the parameters 'key_env'",
        ),
        (
            'parameters { key: "key_env" value: "TRITONX_TEST_UNSET_KEY" }',
            "environment variable 'TRITONX_TEST_UNSET_KEY' (key_env) is not set",
        ),
        (
            'parameters { key: "key_file" value: "/nonexistent/model.key" }',
            "cannot read key_file '/nonexistent/model.key': No such file or directory",
        ),
        (
            'parameters { key: "key_file" value: "relative.key" }',
            "key_file 'relative.key' must be an absolute path",
        ),
        (
            'parameters { key: "key_env" value: "A" } parameters { key: "key_file" value: "/k" }',
            "needs a key: set exactly one",
        ),
        ('parameters { key: "password" value: "x" }', "unknown parameter 'password'"),
    ],
)
def test_missing_or_bad_key_parameters_are_refused(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server, parameters: str, message: str
) -> None:
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    config = repo_model / "config.pbtxt"
    config.write_text(
        'backend: "onnxruntime"\n'
        f'model_repository_agents {{ agents [ {{ name: "decrypt" {parameters} }} ] }}\n'
    )
    http = httpclient.InferenceServerClient(running.http_url)
    assert message in refused("http", http, "enc")
    assert list(temp_root().iterdir()) == []
    http.close()


def test_key_file_and_bad_key_text(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server
) -> None:
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    config = repo_model / "config.pbtxt"
    config.write_text(
        'backend: "onnxruntime"\n'
        f'model_repository_agents {{ agents [ {{ name: "decrypt" parameters {{ key: "key_file" value: "{key_file}" }} }} ] }}\n'
    )
    http = httpclient.InferenceServerClient(running.http_url)
    http.load_model("enc")
    assert infer("http", http, "enc")[0] == infer("http", http, "enc")[1]
    http.unload_model("enc")
    key_file.write_text("not a key")
    assert "bad key (key_file): the key must be 16, 24 or 32 bytes" in refused("http", http, "enc")
    # a key_file that is no key file (here an endless device) is refused after one page
    config.write_text(
        'backend: "onnxruntime"\n'
        'model_repository_agents { agents [ { name: "decrypt" parameters { key: "key_file" value: "/dev/zero" } } ] }\n'
    )
    assert "key_file '/dev/zero' is longer than 4096 bytes: not a key file" in refused(
        "http", http, "enc"
    )
    http.close()


def test_checksum_then_decrypt_compose(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.repoagent.decrypt")
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    digest = hashlib.md5((repo_model / "1" / "model.onnx.enc").read_bytes()).hexdigest()
    config = repo_model / "config.pbtxt"

    def agents(md5: str) -> None:
        config.write_text(
            'backend: "onnxruntime"\nmodel_repository_agents { agents [ '
            f'{{ name: "checksum" parameters {{ key: "MD5:1/model.onnx.enc" value: "{md5}" }} }}, '
            '{ name: "decrypt" parameters { key: "key_env" value: "TRITONX_TEST_MODEL_KEY" } } ] }\n'
        )

    http = httpclient.InferenceServerClient(running.http_url)
    agents(digest)
    http.load_model("enc")  # checksum of the ciphertext, then decryption
    assert infer("http", http, "enc")[0] == infer("http", http, "enc")[1]
    http.unload_model("enc")
    assert len(decrypted_folders(caplog, "enc")) == 1
    agents("0" * 32)
    message = refused("http", http, "enc")
    assert (
        f"Mismatched MD5 hash for file 1/model.onnx.enc, expect: {'0' * 32}, got: {digest}"
        in message
    )
    assert len(decrypted_folders(caplog, "enc")) == 1  # decrypt never ran
    assert list(temp_root().iterdir()) == []
    http.close()


def test_unencrypted_files_and_symlinks_are_refused(
    tmp_path: Path, tmproot: Path, key_file: Path, running: Server
) -> None:
    repo_model = encrypted_model(tmp_path, "enc", key_file)
    http = httpclient.InferenceServerClient(running.http_url)
    (repo_model / "1" / "extra.bin").write_bytes(b"plain")
    assert "'1/extra.bin' is not encrypted (no '.enc' suffix)" in refused("http", http, "enc")
    (repo_model / "1" / "extra.bin").unlink()
    (repo_model / "1" / "link.enc").symlink_to(repo_model / "1" / "model.onnx.enc")
    assert "'1/link.enc' is a symbolic link" in refused("http", http, "enc")
    assert list(temp_root().iterdir()) == []
    http.close()


# ----------------------------------------------------------------------------- the command


def test_encrypt_model_command(tmp_path: Path, key_file: Path) -> None:
    group = click.Group("tritonx")
    tritonx_repoagent_decrypt.tritonx_register_commands(cli=group)
    assert group.commands["encrypt-model"] is encrypt_model_command
    src = plain_model(tmp_path, "m")
    (src / "labels.txt").write_text("a\nb\n")
    (src / "configs").mkdir()
    (src / "configs" / "small.pbtxt").write_text("max_batch_size: 1\n")
    runner = CliRunner()
    out = runner.invoke(
        group,
        [
            "encrypt-model",
            str(src),
            str(tmp_path / "out"),
            "--key-file",
            str(key_file),
            "--generate-key",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "encrypted 2 files" in out.output and "added a 'decrypt' agent" in out.output
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", key_file.read_text())
    dst = tmp_path / "out"
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file()) == [
        "1/model.onnx.enc",
        "config.pbtxt",
        "configs/small.pbtxt",
        "labels.txt.enc",
    ]
    config = (dst / "config.pbtxt").read_text()
    assert 'name: "decrypt"' in config and f'value: "{key_file}"' in config
    assert 'backend: "onnxruntime"' in config
    assert (dst / "configs" / "small.pbtxt").read_text() == "max_batch_size: 1\n"
    assert b"a\nb\n" not in (dst / "labels.txt.enc").read_bytes()
    # never overwrites a key or a non-empty folder
    again = runner.invoke(
        group,
        [
            "encrypt-model",
            str(src),
            str(tmp_path / "out2"),
            "--key-file",
            str(key_file),
            "--generate-key",
        ],
    )
    assert again.exit_code != 0 and "already exists; not overwriting a key" in again.output
    again = runner.invoke(group, ["encrypt-model", str(src), str(dst), "--key-file", str(key_file)])
    assert again.exit_code != 0 and "already exists and is not an empty folder" in again.output
    # a config naming the agent already is left as it is
    (src / "config.pbtxt").write_text('backend: "onnxruntime"\n' + AGENT_ENV)
    out = runner.invoke(
        group, ["encrypt-model", str(src), str(tmp_path / "out3"), "--key-file", str(key_file)]
    )
    assert out.exit_code == 0 and "added" not in out.output
    assert (tmp_path / "out3" / "config.pbtxt").read_text() == (src / "config.pbtxt").read_text()
    bad = tmp_path / "bad.key"
    bad.write_text("xyz")
    out = runner.invoke(
        group, ["encrypt-model", str(src), str(tmp_path / "out4"), "--key-file", str(bad)]
    )
    assert out.exit_code != 0 and "the key must be 16, 24 or 32 bytes" in out.output


def test_server_start_up_and_shutdown_wipe(
    tmp_path: Path,
    tmproot: Path,
    key_file: Path,
    plugin_manager: Any,
    register_plugin: Any,
    caplog: Any,
) -> None:
    """Default control mode: the model is decrypted at start-up and wiped at shutdown."""
    caplog.set_level(logging.INFO, logger="tritonx.repoagent.decrypt")
    register_plugin(tritonx_repoagent_decrypt)
    encrypted_model(tmp_path, "enc", key_file)
    settings = loopback_settings(tmp_path / "repo", allow_grpc=False, allow_metrics=False)
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        assert server.model_ready("enc")
        (folder,) = decrypted_folders(caplog, "enc")
        assert files_holding_plaintext(tmp_path) == {folder / "1" / "model.onnx"}
    assert not folder.exists() and list(temp_root().iterdir()) == []
    assert files_holding_plaintext(tmp_path) == set()
