"""The ``checksum`` repository agent through a real server: Triton's messages over HTTP and
gRPC (tritonclient), SHA-256, path checks, chunked hashing."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tritonx_repoagent_checksum
from tritonx import ModelState, Server
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings
from tritonx_repoagent_checksum import file_digest

WEIGHTS = b"identity weights \x00\x01\x02" * 100


def agents(checks: dict[str, str]) -> str:
    params = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in checks.items())
    return f'model_repository_agents {{ agents [ {{ name: "checksum" {params} }} ] }}\n'


def add_model(repo: ModelRepositoryBuilder, name: str, checks: dict[str, str]) -> Path:
    return repo.add_identity(
        name, "INT32", versions={1: {"model.bin": WEIGHTS}}, extra=agents(checks)
    )


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepositoryBuilder:
    return ModelRepositoryBuilder(tmp_path / "models")


@pytest.fixture
def running(
    repo: ModelRepositoryBuilder, plugin_manager: Any, register_plugin: Any
) -> Iterator[Server]:
    register_plugin(tritonx_repoagent_checksum)
    settings = loopback_settings(repo.root, model_control_mode="explicit", allow_metrics=False)
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        yield server


def clients(server: Server) -> list[tuple[str, Any]]:
    return [
        ("http", httpclient.InferenceServerClient(server.http_url)),
        ("grpc", grpcclient.InferenceServerClient(server.grpc_url)),
    ]


def echo(protocol: str, client: Any, model: str) -> list[int]:
    mod = httpclient if protocol == "http" else grpcclient
    inp = mod.InferInput("INPUT0", [2], "INT32")
    inp.set_data_from_numpy(np.array([4, 5], np.int32))
    return client.infer(model, [inp]).as_numpy("OUTPUT0").tolist()


def refused(protocol: str, client: Any, model: str) -> str:
    """Load ``model``; it must fail as Triton fails a LOAD action (500 / INTERNAL)."""
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    status = info.value.status()
    assert status == ("500" if protocol == "http" else "StatusCode.INTERNAL"), status
    message = info.value.message()
    assert f"failed to load '{model}', failed to poll from model repository" in message
    assert not client.is_model_ready(model)
    return message


def test_matching_digests_load_and_serve(repo: ModelRepositoryBuilder, running: Server) -> None:
    model = add_model(
        repo,
        "good",
        {
            "MD5:1/model.bin": md5(WEIGHTS),
            "sha256:1/model.bin": hashlib.sha256(WEIGHTS).hexdigest(),
            "Md5:labels.txt": md5(b"labels"),  # the algorithm is case-insensitive
        },
    )
    (model / "labels.txt").write_bytes(b"labels")
    for protocol, client in clients(running):
        client.load_model("good")
        assert client.is_model_ready("good")
        assert echo(protocol, client, "good") == [4, 5]
        client.unload_model("good")
        client.close()


def test_mismatched_md5_fails_the_load_with_tritons_message(
    repo: ModelRepositoryBuilder, running: Server
) -> None:
    add_model(repo, "bad", {"MD5:1/model.bin": "invalid_checksum"})
    for protocol, client in clients(running):
        message = refused(protocol, client, "bad")
        assert (
            "Mismatched MD5 hash for file 1/model.bin, expect: invalid_checksum, "
            f"got: {md5(WEIGHTS)}" in message
        )
        client.close()
    # the index tells why; a fixed digest loads on the next load call
    rows = [r for r in running.repository_index() if r.name == "bad"]
    assert rows[0].state == ModelState.UNAVAILABLE
    assert "Mismatched MD5 hash for file 1/model.bin" in rows[0].reason
    config = repo.root / "bad" / "config.pbtxt"
    config.write_text(config.read_text().replace("invalid_checksum", md5(WEIGHTS)))
    http = httpclient.InferenceServerClient(running.http_url)
    http.load_model("bad")
    assert echo("http", http, "bad") == [4, 5]
    http.close()


def test_sha256_mismatch_and_upper_case_digest(
    repo: ModelRepositoryBuilder, running: Server
) -> None:
    add_model(repo, "sha", {"SHA256:1/model.bin": "00" * 32})
    add_model(repo, "upper", {"MD5:1/model.bin": md5(WEIGHTS).upper()})
    http = httpclient.InferenceServerClient(running.http_url)
    message = refused("http", http, "sha")
    assert (
        f"Mismatched SHA256 hash for file 1/model.bin, expect: {'00' * 32}, "
        f"got: {hashlib.sha256(WEIGHTS).hexdigest()}" in message
    )
    # the comparison is exact, as Triton's: an upper-case digest does not match
    assert "Mismatched MD5 hash for file 1/model.bin" in refused("http", http, "upper")
    http.close()


def test_missing_file_bad_key_unsupported_algorithm(
    repo: ModelRepositoryBuilder, running: Server
) -> None:
    add_model(repo, "missing", {"MD5:1/nope.bin": md5(b"")})
    add_model(repo, "nokey", {"1/model.bin": md5(WEIGHTS)})
    add_model(repo, "crc", {"CRC32:1/model.bin": "0"})
    for protocol, client in clients(running):
        assert "failed to open text file for read 1/nope.bin: No such file or directory" in refused(
            protocol, client, "missing"
        )
        assert "failed to parse key: 1/model.bin" in refused(protocol, client, "nokey")
        assert "Unsupported checksum algorithm: CRC32" in refused(protocol, client, "crc")
        assert client.is_server_live()
        client.close()


def test_paths_leaving_the_model_folder_are_refused(
    repo: ModelRepositoryBuilder, running: Server, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(WEIGHTS)
    digest = md5(WEIGHTS)
    add_model(repo, "dotdot", {"MD5:../../outside.bin": digest})
    add_model(repo, "absolute", {f"MD5:{outside}": digest})
    link_model = add_model(repo, "link", {"MD5:1/link.bin": digest})
    (link_model / "1" / "link.bin").symlink_to(outside)
    # a symlink that stays inside the model folder is fine
    inside = add_model(repo, "inside", {"MD5:1/alias.bin": digest})
    (inside / "1" / "alias.bin").symlink_to(inside / "1" / "model.bin")
    http = httpclient.InferenceServerClient(running.http_url)
    for model, rel in (
        ("dotdot", "../../outside.bin"),
        ("absolute", str(outside)),
        ("link", "1/link.bin"),
    ):
        assert (
            f"Invalid checksum path '{rel}': the file must stay within the model directory"
            in refused("http", http, model)
        )
    http.load_model("inside")
    assert http.is_model_ready("inside")
    http.close()


def test_start_up_failure_names_the_model_and_file(
    repo: ModelRepositoryBuilder, plugin_manager: Any, register_plugin: Any, caplog: Any
) -> None:
    """Start-up in the default mode (Triton's L0_repoagent_checksum): the model is UNAVAILABLE and the
    log has "'<model>': Mismatched MD5 hash for file ..."."""
    register_plugin(tritonx_repoagent_checksum)
    add_model(repo, "identity_int32", {"MD5:1/model.bin": "invalid_checksum"})
    repo.add_identity("other", "INT32")
    settings = loopback_settings(repo.root, allow_metrics=False, allow_grpc=False)
    with (
        caplog.at_level("ERROR"),
        ServerThread(Server(settings, plugin_manager=plugin_manager)) as server,
    ):
        assert server.model_ready("other")
        assert not server.model_ready("identity_int32")
    assert "'identity_int32': Mismatched MD5 hash for file 1/model.bin" in caplog.text


def test_file_digest_reads_in_chunks(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    block = np.random.default_rng(0).bytes(1 << 20)
    with open(big, "wb") as f:
        for _ in range(24):
            f.write(block)
    expected = hashlib.sha256(block * 24).hexdigest()
    tracemalloc.start()
    try:
        got = file_digest(big, "SHA256")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == expected
    assert file_digest(big, "md5") == hashlib.md5(block * 24).hexdigest()
    assert peak < 4 << 20, peak  # a 24 MiB file, never held whole
