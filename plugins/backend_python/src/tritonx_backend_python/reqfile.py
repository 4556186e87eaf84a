"""A model's requirements file, read under the operator's rules before anything is installed.

A requirements file may come from a client (the load API's ``file:`` overrides, or a config
whose ``TRITONX_REQUIREMENTS`` names a file of the model's folder), so it is never handed to
the installer as is. :func:`read_plan` reads it (and the files it includes with ``-r`` / ``-c``)
and turns it into a :class:`Plan`: the lines the installer will get, where each local path is a
reference to a :class:`LocalInput` (a wheel, an sdist, a project folder or a ``--find-links``
folder inside the model's folder). :func:`stage` copies those inputs into a fresh folder, hashing
what it copies, and writes the requirements file the installer reads; :func:`digest` hashes
them in place (``tritonx check``, and the cache lookup before a copy). The environment's cache
key covers the plan's lines and the digests, so two models whose requirements are the same
bytes but whose wheels differ never share an environment.
The plan and the staging and hashing of its inputs live in
:mod:`~tritonx_backend_python.reqplan` (their names are re-exported here); this module reads
and checks the files.

What a file may hold (anything else fails the load with INVALID_ARG, naming the file, the line
number and the kind of problem, never the file's text):

* plain requirement specifiers (``name[extras] <versions> ; markers``), with ``--hash``;
* relative paths to wheels, sdists and project folders inside the model's folder (symbolic
  links followed; also as ``name @ file:<relative path>``), resolved against the folder of
  the file that names them; ``--find-links`` to a folder inside the model's folder;
* ``-r`` / ``-c`` of files inside the model's folder (their lines obey the same rules);
* ``--no-index``;
* ``--index-url`` / ``--extra-index-url`` / ``--find-links`` URLs that the operator names in
  ``--backend-config=python,requirements-index-urls=<url>[,<url>...]``;
* the options the operator names in ``--backend-config=python,requirements-allowed-options=``
  (from :data:`PASSABLE_OPTIONS`).

Never: ``-e`` / ``--editable``, absolute paths, ``~``, paths (or ``-r`` / ``-c`` files) leaving
the model's folder, other URLs (``https://``, ``git+...``, ``name @ <url>``), ``${VARIABLE}``
(pip and uv would expand the server's environment variables), any other option.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tritonx.errors import invalid_arg
from tritonx_backend_python.reqplan import LocalInput, Part, Plan, digest, stage

__all__ = [
    "ALLOWED_OPTIONS_KEY",
    "INDEX_URLS_KEY",
    "INSTALL_TIMEOUT_KEY",
    "PASSABLE_OPTIONS",
    "InstallPolicy",
    "LocalInput",
    "Plan",
    "digest",
    "read_plan",
    "stage",
]

#: ``--backend-config=python,<key>=<url>[,<url>...]``: the index (and ``--find-links``) URLs a
#: requirements file may name
INDEX_URLS_KEY = "requirements-index-urls"
#: ``--backend-config=python,<key>=<option>[,<option>...]``: further installer options a
#: requirements file may use (from :data:`PASSABLE_OPTIONS`)
ALLOWED_OPTIONS_KEY = "requirements-allowed-options"
#: ``--backend-config=python,<key>=<seconds>``: how long one install may take
INSTALL_TIMEOUT_KEY = "requirements-install-timeout-seconds"
#: the default of :data:`INSTALL_TIMEOUT_KEY`
DEFAULT_INSTALL_TIMEOUT = 600.0

#: options that only narrow what the installer may use: always allowed
_NARROWING = frozenset({"--no-index", "--hash"})
#: options the operator may allow (they read no file and reach no host by themselves);
#: True: takes a value
PASSABLE_OPTIONS: Mapping[str, bool] = {
    "--pre": False,
    "--prefer-binary": False,
    "--require-hashes": False,
    "--only-binary": True,
    "--no-binary": True,
    "--trusted-host": True,
    "--use-feature": True,
    "--config-settings": True,
    "--global-option": True,
}
#: every option a pip or uv requirements file knows, by each of its spellings; True: takes a value
_OPTIONS: Mapping[str, tuple[str, bool]] = {
    "-i": ("--index-url", True),
    "--index-url": ("--index-url", True),
    "--extra-index-url": ("--extra-index-url", True),
    "--no-index": ("--no-index", False),
    "-f": ("--find-links", True),
    "--find-links": ("--find-links", True),
    "-r": ("--requirement", True),
    "--requirement": ("--requirement", True),
    "-c": ("--constraint", True),
    "--constraint": ("--constraint", True),
    "-e": ("--editable", True),
    "--editable": ("--editable", True),
    "--hash": ("--hash", True),
    "-C": ("--config-settings", True),
    **{name: (name, takes) for name, takes in PASSABLE_OPTIONS.items()},
}
#: options that may follow a requirement on its line
_PER_REQUIREMENT = frozenset({"--hash", "--config-settings", "--global-option"})

#: a requirements file (or one it includes) larger than this is refused
MAX_FILE_BYTES = 1 << 20
#: ``-r`` / ``-c`` may nest this deep
MAX_DEPTH = 10
#: what a wheel or sdist file name ends with
ARCHIVES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_EXTRAS = rf"\[\s*(?:{_NAME}(?:\s*,\s*{_NAME})*)?\s*\]"
#: a PEP 440 version (``packaging``'s pattern), with the ``.*`` of ``==`` / ``!=``
_PEP440 = (
    r"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:\.\*)?"
    r"(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?"
    r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
    r"(?:[-_.]?dev[-_.]?[0-9]*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
)
_VERSION = rf"(?:===\s*[A-Za-z0-9_.+!-]+|(?:~=|==|!=|<=|>=|<|>)\s*{_PEP440})"
_VERSIONS = rf"{_VERSION}(?:\s*,\s*{_VERSION})*"
#: a plain requirement specifier (PEP 508 without a URL; markers checked apart)
_SPECIFIER = re.compile(
    rf"^{_NAME}\s*(?:{_EXTRAS})?\s*(?:{_VERSIONS}|\(\s*{_VERSIONS}\s*\))?\s*(?P<markers>;.*)?$",
    re.IGNORECASE,
)
#: the tokens of environment markers (PEP 508)
_MARKER_TOKEN = re.compile(
    r"\s*(?:'[^']*'|\"[^\"]*\"|===|==|!=|<=|>=|~=|<|>|\(|\)|not\s+in\b|in\b|and\b|or\b"
    r"|(?P<variable>[A-Za-z_][A-Za-z0-9_.]*))\s*"
)
#: the variables of environment markers (PEP 508, and the dotted names of PEP 345)
_MARKER_VARIABLES = frozenset(
    {
        "python_version", "python_full_version", "os_name", "sys_platform", "platform_release",
        "platform_system", "platform_version", "platform_machine",
        "platform_python_implementation", "implementation_name", "implementation_version",
        "extra", "os.name", "sys.platform", "platform.version", "platform.machine",
        "platform.python_implementation", "python_implementation",
    }
)  # fmt: skip
#: ``name[extras] @ <url> ; markers``
_DIRECT = re.compile(
    rf"^(?P<name>{_NAME}\s*(?:{_EXTRAS})?)\s*@\s*(?P<url>\S+)\s*(?P<markers>;.*)?$"
)
#: ``<path>[extras] ; markers``
_PATH = re.compile(rf"^(?P<path>[^\s;\[]+)(?P<extras>{_EXTRAS})?\s*(?P<markers>;.*)?$")
#: a name a staged copy may keep (a wheel's or sdist's file name is read by the installer)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_COMMENT = re.compile(r"(^|\s)#.*$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class InstallPolicy:
    """What the operator allows requirements files (``--backend-config=python,...``).

    :param index_urls: the URLs ``--index-url``, ``--extra-index-url`` and ``--find-links``
        may name (compared without a trailing ``/``).
    :param options: further options allowed (from :data:`PASSABLE_OPTIONS`).
    :param timeout: seconds one install may take before it is killed.
    """

    index_urls: frozenset[str] = frozenset()
    options: frozenset[str] = frozenset()
    timeout: float = DEFAULT_INSTALL_TIMEOUT

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> InstallPolicy:
        """Read :data:`INDEX_URLS_KEY`, :data:`ALLOWED_OPTIONS_KEY` and
        :data:`INSTALL_TIMEOUT_KEY`.

        :raises TritonXError: INVALID_ARG for an option that cannot be allowed, a URL that is
            not one, or a timeout that is not a number of seconds > 0.
        """
        urls = frozenset(
            u.strip().rstrip("/") for u in config.get(INDEX_URLS_KEY, "").split(",") if u.strip()
        )
        for url in sorted(urls):
            if not _URL.match(url):
                raise invalid_arg(
                    f"python backend: {INDEX_URLS_KEY} takes URLs separated by commas, got '{url}'"
                )
        options = frozenset(
            o.strip() for o in config.get(ALLOWED_OPTIONS_KEY, "").split(",") if o.strip()
        )
        for option in sorted(options - PASSABLE_OPTIONS.keys()):
            raise invalid_arg(
                f"python backend: {ALLOWED_OPTIONS_KEY} cannot allow '{option}': it takes "
                f"{', '.join(PASSABLE_OPTIONS)} (index URLs go in {INDEX_URLS_KEY}; -e, "
                "absolute paths and paths outside the model's folder are never allowed)"
            )
        text = config.get(INSTALL_TIMEOUT_KEY, "").strip()
        try:
            timeout = float(text) if text else DEFAULT_INSTALL_TIMEOUT
        except ValueError:
            timeout = -1.0
        if not timeout > 0 or timeout == float("inf"):
            raise invalid_arg(
                f"python backend: {INSTALL_TIMEOUT_KEY} must be a number of seconds > 0, "
                f"got '{text}'"
            )
        return cls(urls, options, timeout)


class _Reader:
    """Reads one requirements file and those it includes into a :class:`Plan`."""

    def __init__(self, model_dir: Path, policy: InstallPolicy, model: str) -> None:
        self.root = model_dir.resolve()
        self.policy = policy
        self.model = model
        self.plan = Plan()
        self._stack: list[Path] = []

    # ----------------------------------------------------------------- errors

    def _label(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def refuse(self, path: Path, number: int, problem: str) -> Exception:
        """INVALID_ARG naming the model, the file, the line number and the problem."""
        return invalid_arg(
            f"python model '{self.model}': requirements file {self._label(path)} line "
            f"{number}: {problem}"
        )

    # ----------------------------------------------------------------- files

    def read_file(self, path: Path, constraint: bool) -> None:
        """Read ``path`` (resolved, inside the model's folder) into the plan."""
        if path in self._stack:
            raise invalid_arg(
                f"python model '{self.model}': requirements file {self._label(path)} includes "
                "itself (-r / -c)"
            )
        if len(self._stack) >= MAX_DEPTH:
            raise invalid_arg(
                f"python model '{self.model}': requirements files nest deeper than {MAX_DEPTH} "
                "(-r / -c)"
            )
        text = self._text(path)
        self._stack.append(path)
        self.plan.files.append(self._label(path))
        try:
            for number, line in logical_lines(text):
                self.read_line(path, number, line, constraint)
        finally:
            self._stack.pop()

    def _text(self, path: Path) -> str:
        label = self._label(path)
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                raise invalid_arg(
                    f"python model '{self.model}': requirements file {label} is not a file"
                )
            if info.st_size > MAX_FILE_BYTES:
                raise invalid_arg(
                    f"python model '{self.model}': requirements file {label} is larger than "
                    f"{MAX_FILE_BYTES >> 20} MiB"
                )
            data = path.read_bytes()
        except OSError as exc:
            raise invalid_arg(
                f"python model '{self.model}': cannot read the requirements file {label}: "
                f"{exc.strerror or type(exc).__name__}"
            ) from exc
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise invalid_arg(
                f"python model '{self.model}': requirements file {label} is not UTF-8 text "
                f"(byte {exc.start})"
            ) from exc

    # ----------------------------------------------------------------- lines

    def read_line(self, path: Path, number: int, line: str, constraint: bool) -> None:
        """One logical line: options, or a requirement with its own options."""
        if "${" in line:
            raise self.refuse(
                path,
                number,
                "${...} (environment variables) is refused: pip and uv would put the server's "
                "environment variables there",
            )
        if line.startswith("-"):
            self.read_options(path, number, line, constraint)
            return
        match = re.search(r"\s-", line)
        requirement, options = (
            (line, "") if match is None else (line[: match.start()], line[match.start() :])
        )
        parts = self.read_requirement(path, number, requirement.strip(), constraint)
        for name, value in self.options(path, number, options):
            if name not in _PER_REQUIREMENT:
                raise self.refuse(
                    path, number, f"option {name} cannot follow a requirement on its line"
                )
            self.check_passable(path, number, name)
            parts.append(f" {name}={value}")
        (self.plan.constraints if constraint else self.plan.requirements).append(parts)

    def options(self, path: Path, number: int, text: str) -> Iterator[tuple[str, str]]:
        """The options of ``text``: (canonical name, value or "")."""
        try:
            tokens = shlex.split(text, posix=True)
        except ValueError:
            raise self.refuse(
                path, number, "cannot be split into options (unbalanced quotes)"
            ) from None
        position = 0
        while position < len(tokens):
            token = tokens[position]
            position += 1
            value: str | None = None
            if token.startswith("--"):
                spelled, eq, attached = token.partition("=")
                if eq:
                    value = attached
            elif token.startswith("-") and len(token) > 1:
                spelled, attached = token[:2], token[2:]
                if attached:
                    value = attached
            else:
                raise self.refuse(path, number, "holds a value that belongs to no option")
            known = _OPTIONS.get(spelled)
            if known is None:
                raise self.refuse(
                    path, number, "holds an installer option that tritonx does not know"
                )
            name, takes_value = known
            if takes_value and value is None:
                if position >= len(tokens) or tokens[position].startswith("-"):
                    raise self.refuse(path, number, f"option {name} needs a value")
                value = tokens[position]
                position += 1
            elif not takes_value and value is not None:
                raise self.refuse(path, number, f"option {name} takes no value")
            value = value or ""
            if any(c.isspace() for c in value) or (takes_value and not value):
                raise self.refuse(
                    path, number, f"the value of option {name} is empty or has spaces"
                )
            yield name, value

    def check_passable(self, path: Path, number: int, name: str) -> None:
        if name in _NARROWING or name in self.policy.options:
            return
        raise self.refuse(
            path,
            number,
            f"option {name} is not allowed: the server's operator may allow it with "
            f"--backend-config=python,{ALLOWED_OPTIONS_KEY}={name}",
        )

    def read_options(self, path: Path, number: int, line: str, constraint: bool) -> None:
        for name, value in self.options(path, number, line):
            if name in ("--requirement", "--constraint"):
                target = self.local(path, number, value, name, folder=False)
                self.read_file(target, constraint or name == "--constraint")
            elif name == "--editable":
                raise self.refuse(
                    path,
                    number,
                    "option -e/--editable is refused: an environment may be shared and must "
                    "not link to a model's folder",
                )
            elif name in ("--index-url", "--extra-index-url"):
                self.plan.options.append([f"{name} {self.allowed_url(path, number, name, value)}"])
            elif name == "--find-links":
                if _URL.match(value) and not value.lower().startswith("file:"):
                    self.plan.options.append(
                        [f"{name} {self.allowed_url(path, number, name, value)}"]
                    )
                else:
                    folder = self.local(path, number, value, name, folder=True)
                    ref = self.plan.add_input(LocalInput(folder, "links", folder=True))
                    self.plan.options.append([f"{name} ", ref])
            elif name in _PER_REQUIREMENT and name != "--config-settings":
                raise self.refuse(path, number, f"option {name} must follow a requirement")
            else:
                self.check_passable(path, number, name)
                self.plan.options.append([f"{name}={value}" if value else name])

    def allowed_url(self, path: Path, number: int, name: str, value: str) -> str:
        url = value.rstrip("/")
        if url in self.policy.index_urls:
            return url
        how = (
            f"allows only the URLs of --backend-config=python,{INDEX_URLS_KEY}"
            if self.policy.index_urls
            else f"allows none (--backend-config=python,{INDEX_URLS_KEY}=<url>[,<url>...])"
        )
        raise self.refuse(path, number, f"option {name} names a URL the server {how}")

    def read_requirement(self, path: Path, number: int, text: str, constraint: bool) -> list[Part]:
        """A requirement: a plain specifier, ``name @ file:<path>`` or a local path."""
        direct = _DIRECT.match(text)
        if direct is not None:
            url = direct["url"]
            if not url.lower().startswith("file:"):
                raise self.refuse(
                    path,
                    number,
                    "a requirement with a URL (name @ <url>) is refused: only files inside the "
                    "model's folder (name @ file:<relative path>)",
                )
            if constraint:
                raise self.refuse(path, number, "a constraint must be a name and versions")
            local = self.local_package(path, number, url)
            self.check_markers(path, number, direct["markers"])
            return [f"{direct['name'].strip()} @ ", local, _markers(direct["markers"])]
        specifier = _SPECIFIER.match(text)
        if specifier is not None and not _looks_like_path(text):
            self.check_markers(path, number, specifier["markers"])
            return [text]
        if _URL.match(text) and not text.lower().startswith("file:"):
            raise self.refuse(
                path,
                number,
                "a URL is refused: only requirement specifiers and files inside the model's folder",
            )
        match = _PATH.match(text)
        if match is None or not _looks_like_path(match["path"]):
            raise self.refuse(
                path, number, "is neither a requirement specifier nor a path to a package"
            )
        if constraint:
            raise self.refuse(path, number, "a constraint must be a name and versions")
        local = self.local_package(path, number, match["path"])
        self.check_markers(path, number, match["markers"])
        return [local, match["extras"] or "", _markers(match["markers"])]

    def check_markers(self, path: Path, number: int, text: str | None) -> None:
        """Refuse environment markers made of anything but PEP 508's tokens (the installer's
        error would quote them)."""
        if not text:
            return
        position, rest = 0, text[1:]
        while position < len(rest):
            token = _MARKER_TOKEN.match(rest, position)
            if token is None or token.end() == position:
                raise self.refuse(path, number, "its environment markers (after ;) are no markers")
            variable = token["variable"]
            if variable is not None and variable not in _MARKER_VARIABLES:
                raise self.refuse(
                    path, number, "its environment markers (after ;) name an unknown variable"
                )
            position = token.end()

    def local_package(self, path: Path, number: int, text: str) -> int:
        """A wheel, sdist or project folder inside the model's folder: its reference."""
        target = self.local(path, number, text, "a local package", folder=None)
        if target.is_dir():
            if not any((target / n).is_file() for n in ("pyproject.toml", "setup.py")):
                raise self.refuse(
                    path,
                    number,
                    "names a folder that is no project (no pyproject.toml or setup.py)",
                )
            return self.plan.add_input(LocalInput(target, "project", folder=True))
        if not target.name.lower().endswith(ARCHIVES):
            raise self.refuse(
                path, number, f"names a file that is no wheel or sdist ({', '.join(ARCHIVES)})"
            )
        if not _SAFE_NAME.match(target.name):
            raise self.refuse(
                path,
                number,
                "names a package file whose name has characters other than letters, digits "
                "and . _ + -",
            )
        return self.plan.add_input(LocalInput(target, target.name, folder=False))

    def local(self, path: Path, number: int, text: str, what: str, folder: bool | None) -> Path:
        """The resolved path of ``text`` (relative to ``path``'s folder), refused unless it
        is inside the model's folder (symbolic links followed) and exists (a folder when
        ``folder``, a file when not; either when ``None``)."""
        raw = text
        if raw.lower().startswith("file:"):
            parsed = urllib.parse.urlsplit(raw)
            if parsed.netloc or parsed.query or parsed.fragment:
                raise self.refuse(path, number, f"{what}: a file: URL must be a relative path")
            raw = urllib.parse.unquote(parsed.path)
        if raw.startswith("~"):
            raise self.refuse(path, number, f"{what}: a path from a home folder (~) is refused")
        if os.path.isabs(raw) or raw.startswith("\\"):
            raise self.refuse(
                path,
                number,
                f"{what}: an absolute path is refused: name files inside the model's folder "
                "by their path relative to the requirements file",
            )
        joined = Path(os.path.normpath(path.parent / raw))
        if not joined.is_relative_to(self.root):
            raise self.refuse(path, number, f"{what}: the path leaves the model's folder (..)")
        resolved = joined.resolve()
        if not resolved.is_relative_to(self.root):
            raise self.refuse(
                path, number, f"{what}: the path leaves the model's folder (a symbolic link)"
            )
        if folder is True and not resolved.is_dir():
            raise self.refuse(path, number, f"{what}: names no folder")
        if folder is False and not resolved.is_file():
            raise self.refuse(path, number, f"{what}: names no file")
        if folder is None and not (resolved.is_dir() or resolved.is_file()):
            raise self.refuse(path, number, f"{what}: names no file or folder")
        return resolved


def _markers(text: str | None) -> str:
    return f" {text.strip()}" if text else ""


def _looks_like_path(text: str) -> bool:
    """pip's test: a path holds a separator, starts with ``.`` or ``~``, is a ``file:`` URL or
    names an archive."""
    first = re.split(r"[\[;\s]", text, maxsplit=1)[0]
    return (
        "/" in first
        or "\\" in first
        or first.startswith((".", "~"))
        or first.lower().startswith("file:")
        or first.lower().endswith(ARCHIVES)
    )


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of its first line, text) of each logical line: comments removed, lines ending
    with ``\\`` joined to the next, blank ones left out."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\") and not _COMMENT.search(raw):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        line = _COMMENT.sub("", "".join(pending)).strip()
        pending = []
        if line:
            yield start, line
    if pending:
        line = _COMMENT.sub("", "".join(pending)).strip()
        if line:
            yield start, line


def read_plan(requirements: Path, model_dir: Path, policy: InstallPolicy, model: str) -> Plan:
    """Read a model's requirements file (inside ``model_dir``) into a :class:`Plan`.

    :raises TritonXError: INVALID_ARG for anything the rules refuse (see the module's
        docstring): the file, its line number and the kind of problem, never its text.
    """
    reader = _Reader(model_dir, policy, model)
    path = requirements.resolve()
    if not path.is_relative_to(reader.root):
        raise invalid_arg(
            f"python model '{model}': its requirements file must be inside the model's folder "
            "(symbolic links followed)"
        )
    reader.read_file(path, constraint=False)
    return reader.plan
