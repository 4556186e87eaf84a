"""Decoupled repeat: one response per element of IN (OUT = the element, IDX = its index),
sent from a thread after execute() returned, then the final flag alone."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.respond, args=(sender, values))
            thread.start()
            self.threads.append(thread)
        return None

    def respond(self, sender, values):
        for idx, value in enumerate(values):
            out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
            index = pb_utils.Tensor("IDX", np.array([idx], dtype=np.uint32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out, index]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
