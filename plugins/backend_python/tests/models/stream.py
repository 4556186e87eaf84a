"""Decoupled: for each request, a thread sends a response every 20 ms (PID: the worker's pid,
INDEX: 0, 1, ...) until COUNT (INT32 [1]) responses are sent or the response sender says the
request was cancelled; then a last response (SAW_CANCEL: whether it was cancelled) and the
final flag. On cancellation it also touches <STATE_DIR>/stream_saw_cancel.
"""

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.state = Path(config["parameters"]["STATE_DIR"]["string_value"])

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, count), daemon=True).start()
        return None

    def stream(self, sender, count):
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        cancelled = False
        for index in range(count):
            if sender.is_cancelled():
                cancelled = True
                (self.state / "stream_saw_cancel").touch()
                break
            out = pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[pid, out]))
            time.sleep(0.02)
        last = pb_utils.Tensor("SAW_CANCEL", np.array([cancelled]))
        sender.send(
            pb_utils.InferenceResponse(output_tensors=[pid, last]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
