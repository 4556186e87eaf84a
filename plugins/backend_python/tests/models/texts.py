"""Triton's texts: the request parameter "what" picks the case.

"params": builds ``InferenceResponse(parameters=[...])`` (a list, not a dict); "bf16":
answers, in TEXT, what ``as_numpy()`` on the BF16 input INPUT0 raised; "dlpack": answers
OUTPUT0 = 2 * INPUT0 (BF16) through ``to_dlpack()`` / ``from_dlpack()`` and torch. The
config parameter DIE_IN_INITIALIZE makes ``initialize`` end its process.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        if "DIE_IN_INITIALIZE" in params:
            os._exit(3)

    def execute(self, requests):
        responses = []
        for request in requests:
            what = json.loads(request.parameters()).get("what")
            if what == "params":
                responses.append(pb_utils.InferenceResponse(parameters=["not", "a", "dict"]))
                continue
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if what == "bf16":
                try:
                    tensor.as_numpy()
                    text = "no error"
                except pb_utils.TritonModelException as exc:
                    text = str(exc)
                out = pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=object))
            else:
                import torch

                doubled = torch.from_dlpack(tensor.to_dlpack()) * 2
                out = pb_utils.Tensor.from_dlpack("OUTPUT0", doubled)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
