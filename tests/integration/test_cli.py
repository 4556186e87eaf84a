"""The real ``tritonx`` command in a subprocess: start-up table, exit codes, signals, flags."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env, listening


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment where the identity test backend is an installed plugin (real entry point)."""
    return echo_plugin_env(tmp_path / "site")


def tritonx(*args: str) -> list[str]:
    return [sys.executable, "-m", "tritonx", *args]


NO_NET = ("--allow-http=false", "--allow-grpc=false", "--allow-metrics=false")


def test_serve_prints_table_and_drains_on_sigterm(
    model_repository: ModelRepositoryBuilder, env: dict[str, str]
) -> None:
    model_repository.add_identity("echo", max_batch_size=4)
    proc = subprocess.Popen(
        tritonx("serve", "--model-repository", str(model_repository.root), *NO_NET),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "| echo  | 1       | READY  |" in line or not line:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(30) == 0
    log = "".join(lines) + rest
    assert "| Model | Version | Status |" in log
    assert "| echo  | 1       | READY  |" in log
    assert "Waiting for in-flight requests to complete." in log
    # Triton's line preamble: I<MMDD> <HH:MM:SS.uuuuuu> <pid> <file>:<line>]
    assert any(line[:1] == "I" and line[1:5].isdigit() and "] " in line for line in lines)


def test_exit_on_error(model_repository: ModelRepositoryBuilder, env: dict[str, str]) -> None:
    model_repository.add_identity("echo")
    model_repository.add("broken", config="this is { not a config")
    args = tritonx("serve", "--model-repository", str(model_repository.root), *NO_NET)
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in result.stderr
    assert "broken" in result.stderr and "config.pbtxt" in result.stderr
    # the loaded model is unloaded at once: no drain or exit-timeout warnings
    assert "still in flight" not in result.stderr
    assert "exit timeout reached" not in result.stderr

    proc = subprocess.Popen(
        [*args, "--exit-on-error=false"], env=env, stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.5)
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    seen = ""
    while time.monotonic() < deadline and "| echo" not in seen:
        seen += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    seen += proc.stderr.read()
    assert proc.wait(30) == 0
    assert "| echo   | 1       | READY" in seen and "| broken | -       | UNAVAILABLE: " in seen


def test_flag_rules(tmp_path: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        tritonx("serve", "--model-repository", str(tmp_path), "--load-model", "x"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        result.returncode == 2
        and "--load-model requires --model-control-mode=explicit" in result.stderr
    )
    result = subprocess.run(
        tritonx("serve", "--http-port", "9000", "--grpc-port", "9000"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        "The server cannot listen to HTTP requests and GRPC requests at the same address and "
        "port 0.0.0.0:9000" in result.stderr
    )
    result = subprocess.run(
        tritonx("serve", "--allow-http=maybe"), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "is not a boolean" in result.stderr


@pytest.mark.parametrize(
    ("args", "advice"),
    [
        (
            ("--frontend-config", "openai,allow=true,port=9000"),
            "one key=value per --frontend-config flag: pass --frontend-config openai,allow=true "
            "--frontend-config openai,port=9000 separately",
        ),
        (
            ("--backend-config", "python,execution-mode=process,stub-timeout-seconds=5"),
            "pass --backend-config python,execution-mode=process "
            "--backend-config python,stub-timeout-seconds=5 separately",
        ),
    ],
    ids=["frontend", "backend"],
)
def test_a_comma_joined_second_setting_is_refused_saying_what_to_pass(
    env: dict[str, str], args: tuple[str, ...], advice: str
) -> None:
    """One key=value per ``--*-config`` flag, as Triton's ``--backend-config``: a second
    key joined by a comma would otherwise end up inside the first one's value."""
    result = subprocess.run(
        tritonx("serve", *NO_NET, *args), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and advice in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # tritonserver's ParseMetricsConfigOption: no name before the setting
        (
            "triton,summary_latencies=true",
            "--metrics-config option format is <setting>=<value>. Got "
            "triton,summary_latencies=true",
        ),
        ("summary_latencies=", "--metrics-config option format is <setting>=<value>"),
        ("summary_latencies", "--metrics-config option format is <setting>=<value>"),
        # a second setting joined by a comma was once dropped without a word
        (
            "summary_latencies=true,summary_quantiles=0.5:0.05",
            "pass --metrics-config summary_latencies=true "
            "--metrics-config summary_quantiles=0.5:0.05 separately",
        ),
    ],
    ids=["named", "empty-value", "no-equals", "joined"],
)
def test_a_malformed_metrics_config_is_refused(env: dict[str, str], value: str, text: str) -> None:
    result = subprocess.run(
        tritonx("serve", *NO_NET, "--metrics-config", value),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and text in " ".join(result.stderr.split()), result.stderr


def test_a_comma_in_a_value_without_a_second_key_is_kept(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Values may hold commas (lists of installer options, URLs): only ``,<key>=`` is refused."""
    result = subprocess.run(
        tritonx(
            "check",
            str(tmp_path),
            "--backend-config",
            "python,requirements-allowed-options=--pre,--prefer-binary",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "joins settings" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--grpc-infer-thread-count", "4"),
        ("--pinned-memory-pool-byte-size", "0"),
        ("--backend-directory", "/opt/tritonserver/backends"),
        ("--host-policy", "gpu0,numa-node=0"),
        ("--cuda-memory-pool-byte-size", "0:0"),
    ],
)
def test_unimplemented_tritonserver_flags_are_refused(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...]
) -> None:
    result = subprocess.run(
        tritonx("serve", "--model-repository", str(tmp_path), *args),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    flag = args[0].split("=")[0]
    assert result.returncode == 2
    assert f"tritonserver's {flag} is not implemented by tritonx yet" in result.stderr
    assert "No such option" not in result.stderr


def test_unknown_cache_fails_start_up(tmp_path: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        tritonx(
            "serve",
            "--model-repository",
            str(tmp_path),
            "--cache-config",
            "nosuch,size=1",
            *NO_NET,
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "error: creating server: Internal - unknown cache 'nosuch' in --cache-config" in (
        result.stderr
    )


def test_an_invalid_header_forward_pattern_fails_start_up(
    tmp_path: Path, env: dict[str, str]
) -> None:
    (tmp_path / "empty").mkdir()
    result = subprocess.run(
        tritonx(
            "serve",
            "--model-repository",
            str(tmp_path / "empty"),
            *("--http-address", "127.0.0.1", "--http-port", "0", "--allow-grpc=false"),
            *("--allow-metrics=false", "--http-header-forward-pattern", "x-("),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        "error: creating server: Invalid argument - --http-header-forward-pattern: 'x-(' is "
        "not a valid regular expression: missing ), unterminated subpattern"
    ) in result.stderr


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port", "--metrics-port"])
def test_a_port_in_use_stops_the_start_before_any_model_loads(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], flag: str
) -> None:
    """Told at once, naming the flag, as tritonserver's ``Socket ... already in use``."""
    model_repository.add_identity("echo", max_batch_size=4)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    ports = {"--http-port": "0", "--grpc-port": "0", "--metrics-port": "0", flag: str(port)}
    try:
        result = subprocess.run(
            tritonx(
                "serve",
                "--model-repository",
                str(model_repository.root),
                "--http-address",
                "127.0.0.1",
                "--grpc-address",
                "127.0.0.1",
                *(item for pair in ports.items() for item in pair),
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert result.returncode == 1
    assert (
        f"Socket '127.0.0.1:{port}' already in use ({flag} {port}: pick another port, or 0 "
        "for a free one)" in result.stderr
    )
    assert "successfully loaded" not in result.stderr  # no model was loaded first


def test_missing_repository_fails_start_up(tmp_path: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        tritonx("serve", "--model-repository", str(tmp_path / "nope"), *NO_NET),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"failed to stat file {tmp_path / 'nope'}" in result.stderr


def test_help_lists_tritonserver_flags() -> None:
    result = subprocess.run(tritonx("serve", "--help"), capture_output=True, text=True, timeout=60)
    for flag in textwrap.dedent("""
        --model-repository --http-port --grpc-port --metrics-port --allow-http --allow-grpc
        --allow-metrics --model-control-mode --load-model --disable-auto-complete-config
        --strict-model-config --exit-on-error --strict-readiness --log-verbose --log-info
        --log-warning --log-error --log-format --backend-config --model-load-thread-count
        --exit-timeout-secs
    """).split():
        assert flag in result.stdout, flag


def test_serve_without_repository_serves_the_bundled_examples() -> None:
    pytest.importorskip("tritonx_backend_onnx")
    proc = subprocess.Popen(tritonx("serve", *NO_NET), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "+\n\n" not in seen:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    proc.send_signal(signal.SIGINT)
    seen += proc.stderr.read()
    assert proc.wait(30) == 0
    assert "serving the bundled example repository" in seen
    # the MiniLM ensemble is served once built; until then the log says how to build it
    assert "| minilm_embed" in seen or "make_minilm.py" in seen
    for model in ("simple", "simple_int8", "simple_string"):
        assert f"| {model}" in seen
    assert re.search(r"\| simple +\| 1 +\| READY", seen)


def _start_http(
    env: dict[str, str], repo: Path, *extra: str
) -> tuple[subprocess.Popen[str], str, list[str]]:
    proc = subprocess.Popen(
        tritonx(
            "serve",
            "--model-repository",
            str(repo),
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--http-address",
            "127.0.0.1",
            "--http-port",
            "0",
            *extra,
        ),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    addresses, lines = listening(proc, ("HTTPService",))
    return proc, addresses["HTTPService"], lines


def test_response_cache_byte_size_is_the_local_cache_of_that_size(
    model_repository: ModelRepositoryBuilder, env: dict[str, str]
) -> None:
    """tritonserver's deprecated --response-cache-byte-size: the local cache with that size
    (and its warning); given with --cache-config, the start fails with its message."""
    import json
    import urllib.request

    import numpy as np
    import tritonclient.http as httpclient

    model_repository.add_identity(
        "cached", dims=[1], max_batch_size=4, extra="response_cache { enable: true }"
    )
    proc, url, lines = _start_http(
        env, model_repository.root, "--response-cache-byte-size", "1048576"
    )
    try:
        assert any(
            "Warning: '--response-cache-byte-size' has been deprecated!" in line
            and "'--cache-config=local,size=1048576'" in line
            for line in lines
        ), lines
        client = httpclient.InferenceServerClient(url)
        data = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        data.set_data_from_numpy(np.full((1, 1), 3, np.float32))
        for _ in range(2):
            assert client.infer("cached", [data]).as_numpy("OUTPUT0").tolist() == [[3.0]]
        with urllib.request.urlopen(f"http://{url}/v2/models/cached/stats", timeout=10) as r:
            stats = json.load(r)["model_stats"][0]["inference_stats"]
        assert (stats["cache_miss"]["count"], stats["cache_hit"]["count"]) == (1, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    both = subprocess.run(
        tritonx(
            "serve",
            "--model-repository",
            str(model_repository.root),
            *("--response-cache-byte-size", "1024", "--cache-config", "local,size=1024"),
            *NO_NET,
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 2
    assert (
        "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
        "provided. Please provide one or the other."
    ) in both.stderr


def _slow_infer(url: str, result: dict[str, object]) -> None:
    import numpy as np
    import tritonclient.http as httpclient

    try:
        client = httpclient.InferenceServerClient(url, network_timeout=30)
        data = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        data.set_data_from_numpy(np.ones((1, 1), np.float32))
        result["value"] = client.infer("slow", [data]).as_numpy("OUTPUT0")
    except Exception as exc:
        result["error"] = exc


@pytest.mark.parametrize("exit_timeout", ["30", "1"])
def test_sigterm_drains_in_flight_requests_up_to_the_exit_timeout(
    model_repository: ModelRepositoryBuilder, env: dict[str, str], exit_timeout: str
) -> None:
    import threading

    delay_ms = "2500" if exit_timeout == "30" else "6000"
    model_repository.add_identity(
        "slow", dims=[1], max_batch_size=4, parameters={"execute_delay_ms": delay_ms}
    )
    model_repository.add_identity("idle", dims=[1], max_batch_size=4)
    proc, url, _ = _start_http(env, model_repository.root, "--exit-timeout-secs", exit_timeout)
    result: dict[str, object] = {}
    client = threading.Thread(target=_slow_infer, args=(url, result))
    client.start()
    time.sleep(0.8)  # the request is executing
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    if exit_timeout == "30":
        # while the server drains, new requests get 503 "Server exiting", also for a model
        # that had nothing in flight and is unloaded already (not 404 "unknown model")
        import urllib.error
        import urllib.request

        time.sleep(0.3)
        body = b'{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"FP32","data":[1]}]}'
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{url}/v2/models/idle/infer", body, timeout=10)
        assert refused.value.code == 503
        assert b"Server exiting" in refused.value.read()
    assert proc.wait(30) == 0
    stopped_after = time.monotonic() - started
    client.join(30)
    if exit_timeout == "30":
        # the accepted request completed before the server went away
        assert "value" in result, result
        assert float(result["value"][0][0]) == 1.0  # type: ignore[index]
    else:
        # the exit timeout cut the drain short: the server exited (~2 s: 1 s drain + listener
        # shutdown) while the model still ran (its execution ends ~5.2 s after SIGTERM)
        assert stopped_after < 4.5, stopped_after
