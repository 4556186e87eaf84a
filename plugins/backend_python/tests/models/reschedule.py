"""Request rescheduling as python_backend's README shows it: each request needs IN
executions. Non-decoupled: every execution but the last releases the request with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` and returns None for it; the last answers OUT =
the executions it took, FLAGS = the request flags it saw, CORR = its correlation ID.
Decoupled: every execution sends OUT = the executions left, the last one with the final
flag. Parameter ``respond_too``: also return a response for a rescheduled request (Triton
refuses it)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        params = config.get("parameters", {})
        self.respond_too = "respond_too" in params
        self.done = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            given = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            wanted, shape = int(given.reshape(-1)[0]), given.shape
            key = request.correlation_id()
            done = self.done.get(key, 0) + 1
            again = done < wanted
            if again:
                if key:  # (outside a sequence every execution is a first one)
                    self.done[key] = done
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                self.done.pop(key, None)
            if self.decoupled:
                out = pb_utils.Tensor("OUT", np.full(shape, wanted - done, np.int32))
                sender = request.get_response_sender()
                flags = 0 if again else pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]), flags=flags)
                continue
            response = pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUT", np.full(shape, done, np.int32)),
                    pb_utils.Tensor("FLAGS", np.full(shape, request.flags(), np.int32)),
                    pb_utils.Tensor("CORR", np.full(shape, int(key), np.int64)),
                ]
            )
            responses.append(None if again and not self.respond_too else response)
        return None if self.decoupled else responses
