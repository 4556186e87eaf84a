"""A non-decoupled model whose request gets a response with the final flag through
``request.get_response_sender()`` and then more, as the request parameter "how" asks (the
same for every request of a batch):

"return_too": also returns the responses from ``execute``; "second": sends a second response
(its TritonModelException is not caught: ``execute`` raises it); "final_again": sends the
final flag again (not caught either); "caught": sends a second response and logs the
TritonModelException it raises ("caught: <text>"), then returns None; "first_then_raise":
only the batch's first request is answered, then ``execute`` raises ValueError("after the
first").

Y = X; N = 1 for the sender's response, 2 for any later one.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def answer(request, n):
    x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("Y", x),
            pb_utils.Tensor("N", np.full(x.shape, n, np.int32)),
        ]
    )


class TritonPythonModel:
    def execute(self, requests):
        how = json.loads(requests[0].parameters())["how"]
        if how == "first_then_raise":
            requests[0].get_response_sender().send(answer(requests[0], 1), flags=FINAL)
            raise ValueError("after the first")
        for request in requests:
            sender = request.get_response_sender()
            sender.send(answer(request, 1), flags=FINAL)
            if how == "second":
                sender.send(answer(request, 2))
            elif how == "final_again":
                sender.send(flags=FINAL)
            elif how == "caught":
                try:
                    sender.send(answer(request, 2), flags=FINAL)
                except pb_utils.TritonModelException as exc:
                    pb_utils.Logger.log_warn(f"caught: {exc}")
        if how == "return_too":
            return [answer(request, 2) for request in requests]
        return None
