"""What a model's requirements file may ask of the installer (issue 44, findings 6 and 7), through
a real server and tritonclient: local wheels built here by hand (no index, no network).

* the environment cache is keyed by everything the install reads: two models whose
  requirements are byte-identical but whose local wheels differ each get their own code;
* installer options, index URLs and paths are refused unless the operator allows them
  (``--backend-config=python,...``), and the refusal never quotes the files;
* a hung install is killed by the install timeout and leaves nothing a later load would trip
  on; the load API's ``file:`` overrides obey the same rules.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import tempfile
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.errors import Code
from tritonx.testing import ModelRepositoryBuilder, loopback_settings, model_status
from tritonx.types import ModelState
from tritonx_backend_python.environment import Installer

#: the model: answers the ``WHO`` of the package its requirements installed
PROBE_MODEL = """\
import numpy as np
import tritonx_probe
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        who = pb_utils.Tensor("WHO", np.array([tritonx_probe.WHO.encode()], dtype=object))
        where = pb_utils.Tensor("FILE", np.array([tritonx_probe.__file__.encode()], dtype=object))
        return [pb_utils.InferenceResponse([who, where]) for _ in requests]
"""
IO: dict[str, Any] = {
    "inputs": [("IN", "BYTES", [1])],
    "outputs": [("WHO", "BYTES", [1]), ("FILE", "BYTES", [1])],
}
WHEEL = "tritonx_probe-1.0-py3-none-any.whl"
#: a line of /etc/passwd every Linux has: a refusal must never quote it
PASSWD_LINE = "root:x:0:0"
#: the load API's config of a probe model
PROBE_CONFIG = json.dumps(
    {
        "backend": "python",
        "input": [{"name": "IN", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [
            {"name": "WHO", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "FILE", "data_type": "TYPE_STRING", "dims": [1]},
        ],
    }
)


@pytest.fixture(autouse=True)
def offline_installer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """uv, offline, with a cache of this test's own (its cache must not answer for it)."""
    if Installer.find().program is None:
        pytest.skip("uv is not installed")
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_python",)


def wheel(folder: Path, who: str, name: str = WHEEL) -> Path:
    """A pure-Python wheel of ``tritonx_probe`` 1.0 whose ``WHO`` is ``who``, zipped by hand."""
    info = "tritonx_probe-1.0.dist-info"
    files = {
        "tritonx_probe/__init__.py": f"WHO = {who!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tritonx-probe\nVersion: 1.0\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tritonx-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = []
    for entry, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{entry},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        for entry, text in files.items():
            archive.writestr(entry, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def add_probe(repo: ModelRepositoryBuilder, name: str, requirements: str | None) -> Path:
    """A probe model; ``requirements`` goes to its folder's requirements.txt."""
    folder = repo.add(name, backend="python", versions={1: {"model.py": PROBE_MODEL}}, **IO)
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache folder shared by name (as by servers given the same folder)."""
    return tmp_path / "shared-envs"


def settings(repo: ModelRepositoryBuilder, **python: str) -> Any:
    """HTTP on a free loopback port, explicit model control, every model loaded at start."""
    return loopback_settings(
        repo.root,
        backend_config={"python": python},
        model_control_mode="explicit",
        load_model=("*",),
        allow_grpc=False,
        allow_metrics=False,
    )


@pytest.fixture
async def serve(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> AsyncIterator[Any]:
    """``async with serve(**backend_config) as (server, client)``: a server over the test's
    repository and a tritonclient HTTP client."""
    import contextlib

    @contextlib.asynccontextmanager
    async def start(**python: str) -> AsyncIterator[tuple[Server, Any]]:
        async with Server(
            settings(model_repository, **python), plugin_manager=plugin_manager
        ) as server:
            client = aiohttpclient.InferenceServerClient(server.http_url)
            try:
                yield server, client
            finally:
                await client.close()

    yield start


async def probe(client: Any, model: str) -> tuple[str, str]:
    """The probe's answer through tritonclient: its package's ``WHO`` and ``__file__``."""
    data = httpclient.InferInput("IN", [1], "BYTES")
    data.set_data_from_numpy(np.array([b"x"], dtype=object))
    result = await client.infer(model, [data])
    return result.as_numpy("WHO")[0].decode(), result.as_numpy("FILE")[0].decode()


async def who(client: Any, model: str) -> str:
    return (await probe(client, model))[0]


def refused(server: Server, model: str) -> str:
    """The reason a model failed to load, checked to be INVALID_ARG."""
    state, reason = model_status(server, model)
    assert state == ModelState.UNAVAILABLE, (model, reason)
    assert reason.startswith(f"{Code.INVALID_ARG.label}: "), (model, reason)
    return reason


def installers(cache: Path) -> list[int]:
    """The processes whose command line names ``cache`` (installers building into it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(cache).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def built(cache: Path) -> list[str]:
    """The environments a cache folder holds (whole ones: named by their hash)."""
    if not cache.is_dir():
        return []
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and "." not in p.name)


async def test_same_requirements_different_wheels_each_their_own(
    model_repository: ModelRepositoryBuilder, serve: Any, cache: Path
) -> None:
    """Finding 6: byte-identical requirements naming ``./<wheel>`` in two models whose wheels
    differ: each model runs its own wheel's code, from the shared cache folder; a model whose
    wheel is the same as another's shares its environment. The same through a file included
    with ``-r`` (whose ``../`` stays inside the model's folder) and through a ``--find-links``
    folder."""
    plain = f"./{WHEEL}\n"
    included = "-r deps/requirements.in\n"
    links = "--no-index\n--find-links ./wheels\ntritonx-probe==1.0\n"
    for name, requirements, code in [
        ("probe_a", plain, "a"),
        ("probe_b", plain, "b"),
        ("probe_a2", plain, "a"),
        ("included_c", included, "c"),
        ("included_d", included, "d"),
        ("links_e", links, "e"),
        ("links_f", links, "f"),
    ]:
        folder = add_probe(model_repository, name, requirements)
        wheel(folder / "wheels" if name.startswith("links") else folder, code)
        if name.startswith("included"):
            (folder / "deps").mkdir()
            (folder / "deps" / "requirements.in").write_text(f"../{WHEEL}  # beside config.pbtxt\n")
    async with serve(**{"requirements-cache-dir": str(cache)}) as (_, client):
        for name in ("probe_a", "probe_b", "probe_a2", "included_c", "included_d"):
            assert await who(client, name) == name[-1] if name != "probe_a2" else "a", name
        assert await who(client, "links_e") == "e"
        assert await who(client, "links_f") == "f"
        assert await who(client, "probe_a2") == "a"
    assert len(built(cache)) == 6  # probe_a and probe_a2 share one


async def test_refused_requirements_never_quoted(
    model_repository: ModelRepositoryBuilder, serve: Any, cache: Path, tmp_path: Path
) -> None:
    """Finding 7: what a requirements file may not ask for fails the model's load with
    INVALID_ARG naming the file, the line and the kind of problem, never the file's text (nor
    the text of a file it names); nothing is installed, the other models serve."""
    secret = "TOKEN-7f3a9c"
    outside = tmp_path / "outside"
    wheel(outside, "outside")
    (outside / "secret.txt").write_text(f"{secret}\n")
    cases = {
        # name: (requirements.txt, what the reason says)
        "index_url": (
            f"# {secret}\n--index-url https://{secret}.example/simple\n{WHEEL}\n",
            "requirements.txt line 2: option --index-url names a URL the server allows none",
        ),
        "extra_index": (
            f"--extra-index-url=https://{secret}.example/simple\n",
            "line 1: option --extra-index-url names a URL",
        ),
        "find_links_url": (
            f"-f https://{secret}.example/links\n",
            "line 1: option --find-links names a URL",
        ),
        "passwd": ("-r /etc/passwd\n", "line 1: --requirement: an absolute path is refused"),
        "passwd_c": ("six\n-c/etc/passwd\n", "line 2: --constraint: an absolute path is refused"),
        "escape_r": (
            "-r ../../outside/secret.txt\n",
            "line 1: --requirement: the path leaves the model's folder (..)",
        ),
        "editable": ("-e .\n", "line 1: option -e/--editable is refused"),
        "absolute": (
            f"{outside / WHEEL}\n",
            "line 1: a local package: an absolute path is refused",
        ),
        "file_url": (
            f"tritonx-probe @ file://{outside / WHEEL}\n",
            "line 1: a local package: an absolute path is refused",
        ),
        "escape": (
            f"six\n\n../../outside/{WHEEL}\n",
            "line 3: a local package: the path leaves the model's folder (..)",
        ),
        "symlink": (
            f"./link/{WHEEL}\n",
            "line 1: a local package: the path leaves the model's folder (a symbolic link)",
        ),
        "url": (
            f"https://{secret}.example/{WHEEL}\n",
            "line 1: a URL is refused",
        ),
        "direct_url": (
            f"tritonx-probe @ https://{secret}.example/{WHEEL}\n",
            "line 1: a requirement with a URL (name @ <url>) is refused",
        ),
        "variable": (
            "six==${TRITONX_SECRET}\n",
            "line 1: ${...} (environment variables) is refused",
        ),
        "unknown_option": (
            f"--{secret.lower()} x\n",
            "line 1: holds an installer option that tritonx does not know",
        ),
        "not_allowed": (
            "--trusted-host example.com\n",
            "line 1: option --trusted-host is not allowed: the server's operator may allow it "
            "with --backend-config=python,requirements-allowed-options=--trusted-host",
        ),
        "garbage": (f"six\n{secret}==!!\n", "line 2: is neither a requirement specifier nor"),
        "markers": (f"six ; {secret} == '1'\n", "line 1: its environment markers (after ;)"),
        "not_a_package": ("./1/model.py\n", "line 1: names a file that is no wheel or sdist"),
        "nested": (
            "-r deps/more.txt\n",
            "requirements file deps/more.txt line 2: option --index-url names a URL",
        ),
        "passwd_link": (None, "its requirements.txt must be a file inside the model's folder"),
        "folder_link": (
            "./project\n",
            "local package project: setup.py leaves the model's folder (a symbolic link)",
        ),
    }
    for name, (requirements, _) in cases.items():
        add_probe(model_repository, name, requirements)
    (model_repository.root / "symlink" / "link").symlink_to(outside)
    (model_repository.root / "nested" / "deps").mkdir()
    (model_repository.root / "nested" / "deps" / "more.txt").write_text(
        f"six\n--index-url https://{secret}.example/simple\n"
    )
    (model_repository.root / "passwd_link" / "requirements.txt").symlink_to("/etc/passwd")
    project = model_repository.root / "folder_link" / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (project / "setup.py").symlink_to(outside / "secret.txt")
    add_probe(model_repository, "fine", f"./{WHEEL}\n")
    wheel(model_repository.root / "fine", "fine")

    async with serve(**{"requirements-cache-dir": str(cache)}) as (server, client):
        assert await who(client, "fine") == "fine"
        for name, (_, expected) in cases.items():
            reason = refused(server, name)
            assert f"python model '{name}': " in reason, reason
            assert expected in reason, (name, reason)
            for text in (secret, secret.lower(), PASSWD_LINE, str(outside)):
                assert text not in reason, (name, reason)
    assert len(built(cache)) == 1  # the fine model's


async def test_operator_allows_indexes_and_options(
    model_repository: ModelRepositoryBuilder, serve: Any
) -> None:
    """The index URLs and options the operator names are honoured (the environment lives in
    this server's own cache by default, under the temp folder, removed at exit); others are
    still refused, and the key covers them (the same wheel with an option more is another
    environment)."""
    index = "http://127.0.0.1:9/simple"
    add_probe(model_repository, "plain", f"./{WHEEL}\n")
    add_probe(model_repository, "allowed", f"--index-url {index}/\n--prefer-binary\n./{WHEEL}\n")
    add_probe(model_repository, "other", f"--extra-index-url {index}2\n./{WHEEL}\n")
    add_probe(model_repository, "option", f"--pre\n./{WHEEL}\n")
    for name in ("plain", "allowed", "other", "option"):
        wheel(model_repository.root / name, "same")
    python = {
        "requirements-index-urls": f"{index},https://b.example",
        "requirements-allowed-options": "--prefer-binary",
    }
    async with serve(**python) as (server, client):
        (_, plain), (_, allowed) = await probe(client, "plain"), await probe(client, "allowed")
        assert "index-url" in refused(server, "other")
        assert "option --pre is not allowed" in refused(server, "option")
        own = Path(plain).parents[2]  # <cache>/<hash>/tritonx_probe/__init__.py
        assert own.name.startswith("tritonx-python-envs-")
        assert own.parent == Path(tempfile.gettempdir())
        assert Path(plain).parent.parent != Path(allowed).parent.parent  # other keys
        assert Path(allowed).is_relative_to(own)
    assert not own.exists()  # this server's own cache went with it


async def test_hung_install_killed_by_the_timeout(
    model_repository: ModelRepositoryBuilder,
    serve: Any,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An install that never ends (an index the operator allowed that accepts connections and
    never answers) is killed after ``requirements-install-timeout-seconds``: the load fails
    saying so, nothing half-built is kept, a second load of the same requirements is not
    blocked by the first (it times out in turn), and the model loads once its requirements
    are fixed (through the load API's ``file:`` override of requirements.txt)."""
    monkeypatch.delenv("UV_OFFLINE")  # the installer must reach the (silent) index
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections are accepted by the kernel; nothing is ever answered
        index = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
        folder = add_probe(model_repository, "hung", f"--index-url {index}\ntritonx-probe\n")
        wheel(folder, "fixed")
        python = {
            "requirements-cache-dir": str(cache),
            "requirements-index-urls": index,
            "requirements-install-timeout-seconds": "2",
        }
        async with serve(**python) as (server, client):
            state, reason = model_status(server, "hung")
            assert state == ModelState.UNAVAILABLE
            assert reason.startswith(f"{Code.INTERNAL.label}: python model 'hung': installing")
            assert (
                "timed out after 2 s (--backend-config=python,"
                "requirements-install-timeout-seconds): uv pip install was killed"
            ) in reason
            assert not list(cache.glob("*.tmp-*")) and built(cache) == []
            assert not installers(cache)  # killed, with what it started

            with pytest.raises(InferenceServerException, match="timed out after 2 s"):
                await client.load_model("hung")
            assert not list(cache.glob("*.tmp-*")) and built(cache) == []

            await client.load_model(
                "hung",
                config=PROBE_CONFIG,
                files={
                    "file:1/model.py": PROBE_MODEL.encode(),
                    "file:requirements.txt": f"./{WHEEL}\n".encode(),
                    f"file:{WHEEL}": (folder / WHEEL).read_bytes(),
                },
            )
            assert await who(client, "hung") == "fixed"
    assert len(built(cache)) == 1


async def test_load_api_file_overrides_obey_the_rules(serve: Any, tmp_path: Path) -> None:
    """A requirements.txt given through the load API (``file:`` overrides) is read under the
    same rules: ``-r /etc/passwd``, an index URL, a ``../`` escape and ``-e`` are refused with
    INVALID_ARG and no file's text; a local wheel given beside it is installed."""
    secret = "TOKEN-4b1e"
    (tmp_path / "secret.txt").write_text(f"{secret}\n")
    files = {"file:1/model.py": PROBE_MODEL.encode()}
    async with serve() as (_, client):
        for requirements, expected in [
            ("-r /etc/passwd\n", "line 1: --requirement: an absolute path is refused"),
            (f"-r {tmp_path / 'secret.txt'}\n", "line 1: --requirement: an absolute path"),
            ("-r ../../../../../../../../etc/passwd\n", "the path leaves the model's folder"),
            (f"-i https://{secret}.example/simple\n", "option --index-url names a URL"),
            ("-e ./\n", "option -e/--editable is refused"),
        ]:
            with pytest.raises(InferenceServerException) as info:
                await client.load_model(
                    "over",
                    config=PROBE_CONFIG,
                    files={**files, "file:requirements.txt": requirements.encode()},
                )
            message = str(info.value.message())
            assert "python model 'over': requirements file requirements.txt " in message
            assert expected in message, message
            assert info.value.status() == "400", message
            for text in (secret, PASSWD_LINE):
                assert text not in message
        wheel(tmp_path / "w", "override")
        await client.load_model(
            "over",
            config=PROBE_CONFIG,
            files={
                **files,
                "file:requirements.txt": b"-r deps/requirements.in\n",
                "file:deps/requirements.in": f"../wheels/{WHEEL}\n".encode(),
                f"file:wheels/{WHEEL}": (tmp_path / "w" / WHEEL).read_bytes(),
            },
        )
        assert await who(client, "over") == "override"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("requirements-allowed-options", "--editable", "cannot allow '--editable'"),
        ("requirements-index-urls", "pypi.org", "takes URLs separated by commas, got 'pypi.org'"),
        ("requirements-install-timeout-seconds", "0", "must be a number of seconds > 0"),
    ],
)
async def test_bad_settings_refused(
    model_repository: ModelRepositoryBuilder, serve: Any, key: str, value: str, expected: str
) -> None:
    """A setting the rules cannot take fails the python backend (its models fail to load,
    saying why)."""
    add_probe(model_repository, "plain", None)
    async with serve(**{key: value}) as (server, _):
        state, reason = model_status(server, "plain")
    assert state == ModelState.UNAVAILABLE
    assert f"python backend: {key} " in reason and expected in reason


async def test_relative_cache_folder_and_constraints(
    model_repository: ModelRepositoryBuilder,
    serve: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache folder named relative to the server's working folder (the installer runs in a
    folder of its own), and a constraints file inside the model's folder."""
    monkeypatch.chdir(tmp_path)
    folder = add_probe(
        model_repository, "pinned", f"-c deps/pins.txt\ntritonx-probe @ file:./{WHEEL}\n"
    )
    wheel(folder, "pinned")
    (folder / "deps").mkdir()
    (folder / "deps" / "pins.txt").write_text("tritonx-probe==1.0  # the wheel's version\n")
    async with serve(**{"requirements-cache-dir": "envs"}) as (_, client):
        answer, where = await probe(client, "pinned")
    assert answer == "pinned"
    assert Path(where).is_relative_to(tmp_path / "envs")
