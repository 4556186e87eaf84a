"""Example models bundled with the OpenAI frontend.

``mock_llm`` (:data:`MOCK_LLM`): a deterministic **mock** of a vLLM model (a decoupled Triton
python-backend model with the vLLM backend's inputs and outputs, no language model inside),
for tests and demos; ``mock_llm/1/model.py`` documents what it answers. Put it in a model
repository with :func:`copy_mock_llm`::

    from tritonx_frontend_openai.examples import copy_mock_llm
    copy_mock_llm(Path("models"))            # models/mock_llm
    # tritonx serve --model-repository models  (needs the python backend plugin)
"""

from __future__ import annotations

import pathlib
import re
import shutil
from collections.abc import Mapping

__all__ = ["MOCK_LLM", "copy_mock_llm"]

#: the mock LLM's model folder (config.pbtxt, 1/model.py)
MOCK_LLM = pathlib.Path(__file__).resolve().parent / "mock_llm"

_NAME_LINE = re.compile(r'^name:\s*"[^"]*"[ \t]*$', re.MULTILINE)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def copy_mock_llm(
    dest_repository: pathlib.Path,
    name: str = "mock_llm",
    *,
    parameters: Mapping[str, str] | None = None,
) -> pathlib.Path:
    """Copy the mock LLM into the model repository ``dest_repository`` as model ``name``
    (its config's ``name`` rewritten) and return the new model folder.

    ``parameters`` are added to its config as string parameters (``token_delay_ms``,
    ``request_log``, or e.g. ``TRITONX_EXECUTION_MODE``). An existing folder of that name is
    refused (:class:`FileExistsError`)."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"not a model name: {name!r}")
    target = pathlib.Path(dest_repository) / name
    shutil.copytree(MOCK_LLM, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    config_path = target / "config.pbtxt"
    config = _NAME_LINE.sub(f'name: "{_quote(name)}"', config_path.read_text(), count=1)
    for key, value in (parameters or {}).items():
        config += (
            f'parameters {{ key: "{_quote(str(key))}" '
            f'value: {{ string_value: "{_quote(str(value))}" }} }}\n'
        )
    config_path.write_text(config)
    return target
