"""Misbehaves on request: INPUT0 (a string) says how.

"raise" raises from execute, "error" answers with an error response, "abort" calls
os.abort(), "segv" dereferences a null pointer, "exit" calls sys.exit(3); anything else
is echoed. With the config parameter ``FAIL_INITIALIZE`` set, ``initialize`` raises.
"""

import ctypes
import json
import os
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if "FAIL_INITIALIZE" in config.get("parameters", {}):
            raise RuntimeError("asked to fail initialize")

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            what = tensor.as_numpy().reshape(-1)[0].decode()
            if what == "raise":
                raise ValueError("asked to raise")
            if what == "abort":
                os.abort()
            if what == "segv":
                ctypes.string_at(0)
            if what == "exit":
                sys.exit(3)
            if what == "error":
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(
                            "asked for an error", pb_utils.TritonError.INVALID_ARG
                        )
                    )
                )
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", tensor.as_numpy())]
                )
            )
        return responses
