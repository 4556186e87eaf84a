"""A model's version folder is a package, as under Triton (whose stub imports ``model.py`` as
``<version>.model``): ``model.py`` imports its other modules relatively (``from .helper
import x``) or absolutely (the version folder is on ``sys.path``), in worker processes and
in-process, and two models with same-named helpers each get their own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tritonx import InferenceRequest, Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

from .constants import OFFSET
from .sub.scale import SCALE
import absolute_helper


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            y = (x * SCALE + OFFSET + absolute_helper.EXTRA).astype(np.float32)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", y)]))
        return out
"""


@pytest.mark.parametrize("mode", ["process", "in_process"])
async def test_relative_imports_between_a_models_modules(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, mode: str
) -> None:
    for name, offset in (("first", 100), ("second", 200)):
        model_repository.add(
            name,
            backend="python",
            inputs=[("IN", "FP32", [2])],
            outputs=[("OUT", "FP32", [2])],
            parameters={"TRITONX_EXECUTION_MODE": mode},
            versions={
                1: {
                    "model.py": MODEL,
                    "constants.py": f"OFFSET = {offset}\n",
                    "sub/__init__.py": "",
                    "sub/scale.py": "from ..constants import OFFSET\nSCALE = OFFSET // 100\n",
                    "absolute_helper.py": "EXTRA = 0.5\n",
                }
            },
        )
    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        for name, offset in (("first", 100), ("second", 200)):
            request = InferenceRequest(name, {"IN": np.array([1.0, 2.0], np.float32)})
            answer = (await server.infer(request)).outputs["OUT"].tolist()
            scale = offset // 100
            assert answer == [1.0 * scale + offset + 0.5, 2.0 * scale + offset + 0.5], name
