"""Reports the ``six`` it imports at module top (from the model's own environment when it has
requirements), where it and numpy were imported from, the interpreter and its pid."""

import json
import os
import sys

import numpy as np
import six
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        info = {
            "version": six.__version__,
            "six": six.__file__,
            "numpy": np.__file__,
            "executable": sys.executable,
            "path0": sys.path[0],
            "pid": os.getpid(),
            "ppid": os.getppid(),
        }
        responses = []
        for request in requests:
            shape = pb_utils.get_input_tensor_by_name(request, "IN").shape()
            out = np.full(shape, json.dumps(info).encode(), dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INFO", out)]))
        return responses
