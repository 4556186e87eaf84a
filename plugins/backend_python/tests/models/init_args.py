"""Returns what it was given: initialize args, model dir, request metadata and inputs, and
where it runs (pid, parent pid, interpreter). A request parameter ``sleep_s`` keeps the
instance busy that long first."""

import json
import os
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.pid = os.getpid()

    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(float(json.loads(request.parameters()).get("sleep_s", 0)))
            info = {
                "args": self.args,
                "model_dir": pb_utils.get_model_dir(),
                "pid": self.pid,
                "ppid": os.getppid(),
                "executable": sys.executable,
                "id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "parameters": request.parameters(),
                "requested": request.requested_output_names(),
                "inputs": {t.name(): [t.triton_dtype(), t.shape()] for t in request.inputs()},
            }
            data = pb_utils.get_input_tensor_by_name(request, "DATA").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor(
                            "INFO", np.array([json.dumps(info).encode()], dtype=object)
                        ),
                        pb_utils.Tensor("DATA_OUT", data[::-1].copy()),
                    ]
                )
            )
        return responses
