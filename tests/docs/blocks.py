"""Run the code blocks of a Markdown page as printed, so a page's commands cannot drift from tritonx.

Which blocks run
================

A fenced block runs when the first word of its info string is ``console`` or ``sh`` (shell
commands) or ``python`` (a script). Every other fence (plain, ``text``, ``yaml``, ...) is text
only. Blocks run in page order; the first that fails stops the page.

The last non-blank line above a fence may be a directive, an HTML comment the site does not
show:

``<!-- run: server -->``
    The block's one command starts a server (``tritonx serve ...``). The runner starts it in the
    background in its own process group, waits for its start-up log lines
    (``Started HTTPService at <host>:<port>``), then asks ``/v2/health/ready`` once: tritonx
    starts its listeners after the start-up loads, so anything but 200 fails the block. It
    runs the later blocks against that server, and stops it with SIGINT (then waits for it to
    exit) when the next server block starts or the page ends. Output printed in a server block
    is not compared.
``<!-- run: install -->``
    An install command: not run (a ``pip install`` in any other block fails it: it would
    replace the installs of the environment running the tests) (CI's ``.ci/run`` installs everything on a clean checkout).
    Each command of the block (lines, and the parts of a line joined by ``&&``) is checked
    instead. ``python -m pip`` and ``pip`` are the same and ``-q`` is ignored:

    - ``pip install`` must be a command of ``.ci/run``, or name only local paths: each
      folder must hold a ``pyproject.toml`` and each ``*.whl`` pattern must match a file that an
      earlier block built;
    - ``pip wheel`` must say ``--no-deps`` and is run as printed (it installs nothing: the
      wheels land in the page's scratch folder).
``<!-- run: skip: <reason> -->``
    Not run; the reason is required.
``<!-- run: output -->``
    Above a text block: what the last block that ran printed on stdout (compared as for
    ``$`` blocks below).

Shell blocks
============

One command per line; a command goes on over the next lines while its line ends in ``\\`` or
a quote is still open (a ``curl -d '{...}'`` over three lines is one command). When any line
starts with ``$``, only those lines (and their continuations) are commands, and the other lines
are the output they print: it must equal what the commands write on stdout, trailing spaces
and blank lines at either end aside. The commands of a block run as one
``bash -e -o pipefail`` script: the first failing command fails the block, and ``cd`` or
``export`` last until the block's end.

Python blocks
=============

The block is written to a file and run with the interpreter running the tests
(``sys.executable``, the project's virtual environment). A line ``--8<-- "path"`` (the
snippets extension's include, path from the repository root) is replaced by that file, so a
block that includes an example file runs that file.

Where and with what
===================

- **Folder**: every block of a page runs in one scratch folder, which holds a link to each
  top-level entry git tracks in the checkout (an untracked folder there, say a stray
  ``models/``, is not linked, so a block cannot write into it). Commands written for the
  repository root (``./core``, ``plugins/...``, ``requirements-dev.txt``) work as printed,
  and what blocks write (``./models``, ``dist/``) stays in the scratch folder, out of the
  checkout.
- **Programs**: ``PATH`` starts with the interpreter's ``bin`` folder, so ``python``, ``pip``
  and ``tritonx`` are the virtual environment's.
- **Ports: the one transformation.** Pages print Triton's default ports (8000 HTTP, 8001
  gRPC, 8002 metrics). The runner appends ``--http-port 0 --grpc-port 0 --metrics-port 0`` to
  a server block's command (after dropping a trailing ``# comment``; the last of a repeated
  flag wins), so the system picks free ports; it reads the ports the server took
  from its start-up log lines, and rewrites ``localhost:8000`` / ``127.0.0.1:8000`` (and 8001,
  8002) in the later blocks to them. Everything else runs as printed.
- **Failure**: a block that exits non-zero, runs over ``PageRunner.timeout`` (120 s) or
  prints other than its printed output
  raises :class:`BlockFailed` (an ``AssertionError``) naming the page and line, with the
  block's text and the tail of its stderr and stdout.

Use :class:`PageRunner` as a context manager (it stops the servers it started)::

    with PageRunner(ROOT, tmp_path) as runner:
        results = runner.run(ROOT / "docs" / "getting-started.md")

Tests under ``tests/docs`` get one from the ``page_runner`` fixture (``conftest.py``), and this
module from the ``blocks`` fixture (``--import-mode=importlib`` does not make it importable by
name). Each :class:`Result` holds the block, what it printed and, for a server block, the
:class:`Server` with its log, so a test can assert more than the page prints.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

SHELL = ("console", "sh")
PYTHON = ("python",)
DIRECTIVE = re.compile(r"^<!--\s*run:\s*(.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
SNIPPET = re.compile(r"""^(?P<indent>\s*)--8<--\s+["'](?P<path>[^"']+)["']\s*$""")
STARTED = re.compile(
    r"Started (?P<kind>GRPCInferenceService|HTTPService|Metrics Service) at \S+:(?P<port>\d+)"
)
LISTENERS = {"GRPCInferenceService": "grpc", "HTTPService": "http", "Metrics Service": "metrics"}
DEFAULT_PORTS = {"8000": "http", "8001": "grpc", "8002": "metrics"}
PRINTED_PORT = re.compile(r"\b(localhost|127\.0\.0\.1):(800[012])\b")
PORT_FLAGS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
TAIL = 3000
#: an install command (run only under the install directive, which checks it instead)
INSTALLS = re.compile(r"\b(pip3?|uv pip)\s+install\b")


class BlockFailed(AssertionError):
    """A block did not run as printed."""


@dataclass(frozen=True)
class Block:
    """One fenced block of a page and the directive above it."""

    path: Path
    #: 1-based line of the opening fence
    line: int
    #: first word of the info string ("" for a plain fence)
    lang: str
    #: the content, de-indented by the fence's indentation
    text: str
    #: "", "server", "install", "skip" or "output"
    directive: str = ""
    #: why a skipped block is skipped
    reason: str = ""

    @property
    def where(self) -> str:
        """``page.md:line`` for messages."""
        return f"{self.path.name}:{self.line}"

    @property
    def runnable(self) -> bool:
        """Whether the runner does something with this block."""
        return self.lang in SHELL + PYTHON or self.directive == "output"


@dataclass
class Result:
    """What running one block gave."""

    block: Block
    #: "ran", "server", "checked" (an install block), "skipped" or "compared"
    status: str
    stdout: str = ""
    stderr: str = ""
    #: the server a server block started
    server: Server | None = None


def parse(path: Path) -> list[Block]:
    """Every fenced block of the Markdown file ``path``, in order, with its directive."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        lang = (opened["info"].split() or [""])[0].lstrip(".").lower()
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(_dedent(lines[j], indent))
            j += 1
        if j == len(lines):
            raise ValueError(f"{path.name}:{i + 1}: the block is never closed")
        directive, reason = _directive(path, lines, i)
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", directive, reason))
        i = j + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    """``line`` without the fence's indentation (a block inside an admonition or a tab)."""
    if line[:indent].isspace() or not indent:
        return line[indent:]
    return line.lstrip()


def _directive(path: Path, lines: list[str], fence: int) -> tuple[str, str]:
    above = next((line.strip() for line in reversed(lines[:fence]) if line.strip()), "")
    found = DIRECTIVE.match(above)
    if not found:
        return "", ""
    name, _, reason = (part.strip() for part in found[1].partition(":"))
    if name not in ("server", "install", "skip", "output"):
        raise ValueError(f"{path.name}:{fence + 1}: unknown directive 'run: {found[1]}'")
    if name == "skip" and not reason:
        raise ValueError(f"{path.name}:{fence + 1}: 'run: skip' needs a reason")
    return name, reason


def shell_commands(text: str) -> tuple[list[str], str | None]:
    """The commands of a shell block, and the output it prints (None when it prints none).

    A command goes on over the next lines while it ends in a backslash or has an open quote;
    in a block with ``$`` prompts only the prompted lines start commands."""
    lines = text.splitlines()
    prompted = any(line.startswith("$ ") or line == "$" for line in lines)
    commands: list[str] = []
    output: list[str] = []
    pending: str | None = None
    for line in lines:
        if pending is not None:
            pending += "\n" + line
        elif prompted and not (line.startswith("$ ") or line == "$"):
            output.append(line)
            continue
        elif prompted:
            pending = line[2:]
        elif line.strip() and not line.lstrip().startswith("#"):
            pending = line
        else:
            continue
        if _complete(pending):
            commands.append(pending)
            pending = None
    if pending is not None:
        raise ValueError(f"unterminated command: {pending!r}")
    return commands, ("\n".join(output) if prompted else None)


def _complete(command: str) -> bool:
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def _without_comment(command: str) -> str:
    """``command`` without a trailing ``# comment`` (so flags appended to it still count)."""
    quote = ""
    for at, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or command[at - 1].isspace()):
            return command[:at].rstrip()
    return command


def _normal(text: str) -> str:
    """Output as compared: trailing spaces and blank lines at either end dropped."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")


def _tail(text: str) -> str:
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def _failed(block: Block, why: str, stdout: str = "", stderr: str = "") -> BlockFailed:
    message = f"{block.where}: {why}\n--- block ---\n{block.text}"
    if stderr.strip():
        message += f"--- stderr (tail) ---\n{_tail(stderr)}\n"
    if stdout.strip():
        message += f"--- stdout (tail) ---\n{_tail(stdout)}\n"
    return BlockFailed(message)


class Server:
    """A server a server block started: its process group, its log and the ports it took."""

    def __init__(self, block: Block, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.block = block
        self.command = command
        self.ports: dict[str, int] = {}
        self.log: list[str] = []
        self.returncode: int | None = None
        self._ended = False
        self._changed = threading.Condition()
        self._process = subprocess.Popen(
            ["bash", "-c", f"exec {_without_comment(command)} {shlex.join(PORT_FLAGS)}"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="server-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with self._changed:
                self.log.append(line)
                started = STARTED.search(line)
                if started:
                    self.ports[LISTENERS[started["kind"]]] = int(started["port"])
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    @property
    def log_text(self) -> str:
        """Everything the server wrote so far (stdout and stderr)."""
        with self._changed:
            return "".join(self.log)

    def port(self, kind: str, timeout: float) -> int:
        """The port of listener ``kind`` ("http", "grpc", "metrics"), once its start-up log line
        has been written."""
        with self._changed:
            self._changed.wait_for(lambda: kind in self.ports or self._ended, timeout)
            if kind in self.ports:
                return self.ports[kind]
        raise _failed(
            self.block,
            f"the server wrote no 'Started ...' line for its {kind} listener in {timeout} s "
            f"(exit status {self._process.poll()})",
            stdout=self.log_text,
        )

    def check_ready(self, timeout: float) -> None:
        """``/v2/health/ready`` answers 200 once the HTTP listener has started (tritonx starts
        its listeners after the start-up loads, as Triton does)."""
        url = f"http://127.0.0.1:{self.port('http', timeout)}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        if status != 200:
            raise _failed(self.block, f"{url} answered {status}", stdout=self.log_text)

    def stop(self, timeout: float) -> None:
        """SIGINT to the server's process group, then wait for it to exit."""
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGINT)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
                self._reader.join()
                raise _failed(
                    self.block, f"the server did not stop on SIGINT in {timeout} s"
                ) from None
        self._reader.join()
        self.returncode = self._process.returncode


@dataclass
class PageRunner:
    """Runs pages' blocks in one scratch folder; stops its servers on exit."""

    #: the checkout's root (where ``.ci/run`` and the snippets' paths are)
    root: Path
    #: an empty folder the runner may fill (pytest's ``tmp_path``)
    tmp: Path
    #: seconds a block (or a server's start, or its stop) may take
    timeout: float = 120.0
    servers: list[Server] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cwd = self.tmp / "work"
        self.scripts = self.tmp / "scripts"
        self.cwd.mkdir()
        self.scripts.mkdir()
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "-z"],  # tracked only: a stray folder stays out
            cwd=self.root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for top in sorted({name.split("/", 1)[0] for name in listed.split("\0") if name}):
            if (self.root / top).exists():
                (self.cwd / top).symlink_to(self.root / top)
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "VIRTUAL_ENV": str(Path(bin_dir).parent),
            "PYTHONUNBUFFERED": "1",
        }

    def __enter__(self) -> PageRunner:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every server still running (SIGINT, then wait)."""
        while self.servers:
            self.servers.pop().stop(self.timeout)

    @property
    def server(self) -> Server | None:
        """The server the later blocks run against: the last one started."""
        return self.servers[-1] if self.servers else None

    def run(self, page: Path) -> list[Result]:
        """Run every block of ``page`` in order; the first failure raises :class:`BlockFailed`."""
        results: list[Result] = []
        last: Result | None = None
        for block in parse(page):
            if not block.runnable:
                continue
            result = self.run_block(block, last)
            results.append(result)
            if result.status in ("ran", "skipped"):
                last = result
        return results

    def run_block(self, block: Block, last: Result | None = None) -> Result:
        """Run one block; ``last`` is the last block that ran (for an output block)."""
        if block.directive == "skip":
            return Result(block, "skipped")
        if block.directive == "output":
            return self._compare(block, last)
        text = self._ports(block.text)
        if block.directive == "install":
            return self._install(block, text)
        if block.directive == "server":
            return self._serve(block, text)
        if block.lang in PYTHON:
            return self._python(block, text)
        commands, printed = shell_commands(text)
        if any(INSTALLS.search(command) for command in commands):
            raise _failed(  # it would replace the installs of the environment running the tests
                block, "a pip/uv install outside an install block: mark it <!-- run: install -->"
            )
        done = self._shell(block, "\n".join(commands))
        if printed is not None and _normal(done.stdout) != _normal(printed):
            raise _failed(
                block,
                f"printed output differs\n--- expected ---\n{_normal(printed)}\n"
                f"--- got ---\n{_normal(done.stdout)}",
                stderr=done.stderr,
            )
        return done

    def _ports(self, text: str) -> str:
        server = self.server
        if server is None:
            return text

        def actual(printed: re.Match[str]) -> str:
            kind = DEFAULT_PORTS[printed[2]]
            return f"{printed[1]}:{server.port(kind, self.timeout)}"

        return PRINTED_PORT.sub(actual, text)

    def _compare(self, block: Block, last: Result | None) -> Result:
        if last is None:
            raise _failed(block, "an output block with no block run before it")
        if last.status == "skipped":
            return Result(block, "skipped")
        if _normal(last.stdout) != _normal(self._ports(block.text)):
            raise _failed(
                block,
                f"the output of {last.block.where} differs\n--- got ---\n{_normal(last.stdout)}",
                stderr=last.stderr,
            )
        return Result(block, "compared", last.stdout)

    def _shell(self, block: Block, script: str) -> Result:
        return self._process(block, ["bash", "-e", "-o", "pipefail", "-c", script])

    def _python(self, block: Block, text: str) -> Result:
        script = self.scripts / f"{block.path.stem}_{block.line}.py"
        script.write_text(self._snippets(block, text))
        return self._process(block, [sys.executable, str(script)])

    def _snippets(self, block: Block, text: str) -> str:
        def include(line: str) -> str:
            found = SNIPPET.match(line)
            if not found:
                return line
            path = self.root / found["path"]
            if not path.is_file():
                raise _failed(block, f"the snippet {found['path']} does not exist")
            return "\n".join(found["indent"] + part for part in path.read_text().splitlines())

        return "\n".join(include(line) for line in text.splitlines()) + "\n"

    def _process(self, block: Block, argv: list[str]) -> Result:
        try:
            done = subprocess.run(
                argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout,
            )
        except subprocess.TimeoutExpired as expired:
            out, err = (
                part.decode() if isinstance(part, bytes) else part or ""
                for part in (expired.stdout, expired.stderr)
            )
            raise _failed(block, f"timed out after {self.timeout} s", out, err) from None
        if done.returncode != 0:
            raise _failed(block, f"exit status {done.returncode}", done.stdout, done.stderr)
        return Result(block, "ran", done.stdout, done.stderr)

    def _serve(self, block: Block, text: str) -> Result:
        commands, _ = shell_commands(text)
        if len(commands) != 1:
            raise _failed(block, f"a server block holds one command, not {len(commands)}")
        if self.server is not None:
            self.servers.pop().stop(self.timeout)
        server = Server(block, commands[0], self.cwd, self.env)
        self.servers.append(server)
        server.check_ready(self.timeout)
        return Result(block, "server", server=server)

    def _install(self, block: Block, text: str) -> Result:
        commands, _ = shell_commands(text)
        ci = _ci_pip_commands(self.root / ".ci" / "run")
        out: list[str] = []
        for line in commands:
            for command in line.split("&&"):
                words = _pip(shlex.split(command, comments=True))
                if words[:2] == ["pip", "wheel"]:
                    if "--no-deps" not in words:
                        raise _failed(block, f"'{command.strip()}' builds every dependency too")
                    out.append(self._shell(block, command).stdout)
                elif words[:2] == ["pip", "install"]:
                    if words not in ci:
                        self._local_install(block, command.strip(), words[2:])
                else:
                    raise _failed(block, f"'{command.strip()}' is not a pip install or wheel")
        return Result(block, "checked", "".join(out))

    def _local_install(self, block: Block, command: str, arguments: list[str]) -> None:
        named = [word for word in arguments if not word.startswith("-")]
        if not named or any(not ("/" in word or word.endswith(".whl")) for word in named):
            raise _failed(block, f"'{command}' is neither in .ci/run nor only local paths")
        for word in named:
            if word.endswith(".whl"):
                if not list(self.cwd.glob(word)):
                    raise _failed(block, f"'{command}': no wheel matches {word}")
            elif not (self.cwd / word.split("[", 1)[0] / "pyproject.toml").is_file():
                raise _failed(block, f"'{command}': {word} is not a folder with pyproject.toml")


def _pip(words: list[str]) -> list[str]:
    """``python -m pip ...`` as ``pip ...``, without ``-q``."""
    if words[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
        words = ["pip", *words[3:]]
    return [word for word in words if word not in ("-q", "--quiet")]


def _ci_pip_commands(path: Path) -> list[list[str]]:
    """The ``pip install`` commands of ``.ci/run``, as :func:`_pip` writes them."""
    logical = path.read_text().replace("\\\n", " ")
    found: list[list[str]] = []
    for line in logical.splitlines():
        for part in re.split(r"&&|\|\||;", line):
            try:
                words = _pip(shlex.split(part, comments=True))
            except ValueError:
                continue
            if words[:2] == ["pip", "install"]:
                found.append(words)
    return found
