"""A worker's ``sys.argv`` is ``[""]``, as in Triton's stub process, never the server's
command line: a ``model.py`` that parses arguments at import (argparse, ``unittest.main()``)
loads and serves."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tritonx import InferenceRequest, Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

MODEL = """
import argparse
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

ARGV = list(sys.argv)
# exits (SystemExit) at import when the server's options are in sys.argv
OPTIONS = argparse.ArgumentParser().parse_args()


class TritonPythonModel:
    def execute(self, requests):
        answer = np.array([json.dumps(ARGV).encode()], dtype=object)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("ARGV", answer)])
            for _ in requests
        ]
"""


async def test_a_model_parsing_arguments_at_import_serves(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, monkeypatch: Any
) -> None:
    # the server's own command line, as `tritonx serve` would have it
    monkeypatch.setattr("sys.argv", ["tritonx", "serve", "--model-repository=/models"])
    model_repository.add(
        "argv",
        backend="python",
        inputs=[("IN", "INT32", [1])],
        outputs=[("ARGV", "BYTES", [1])],
        versions={1: {"model.py": MODEL}},
    )
    async with Server(loopback_settings(model_repository.root), plugin_manager=plugin_manager) as s:
        assert s.model_ready("argv")
        response = await s.infer(InferenceRequest("argv", {"IN": np.array([1], np.int32)}))
        assert json.loads(response.outputs["ARGV"][0]) == [""]
