"""Returns right or wrong outputs, as COMMAND (BYTES [1] per batch item) asks, for the output
checks. The config declares OUT (FP32 [-1, 2]) and AUX (INT32 [1]), with batching.

"ok": OUT [batch, 3, 2] FP32 and AUX; "dtype": OUT as FP64; "shape": OUT [batch, 3, 5];
"no_batch": OUT without the batch dimension; "extra": also EXTRA, which the config lacks;
"missing": OUT only. Decoupled configs get the response through the sender, then the final
flag.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def respond(self, what, batch):
        out = np.ones((batch, 3, 2), np.float32)
        aux = np.full((batch, 1), 7, np.int32)
        tensors = {"OUT": out, "AUX": aux}
        if what == "dtype":
            tensors["OUT"] = out.astype(np.float64)
        elif what == "shape":
            tensors["OUT"] = np.ones((batch, 3, 5), np.float32)
        elif what == "no_batch":
            tensors["OUT"] = np.ones((3, 2), np.float32)
        elif what == "extra":
            tensors["EXTRA"] = np.zeros((batch, 1), np.int64)
        elif what == "missing":
            del tensors["AUX"]
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, array) for name, array in tensors.items()]
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            command = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy()
            response = self.respond(command.reshape(-1)[0].decode(), command.shape[0])
            if self.decoupled:
                sender = request.get_response_sender()
                sender.send(response)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses
