"""A non-decoupled model that answers through ``request.get_response_sender()``, as the
request parameter "how" asks (the same for every request of a batch):

"final": ``send(response, flags=FINAL)`` in execute, returns None; "split": ``send(response)``
then ``send(flags=FINAL)``, returns None; "after": a thread per request sends
``send(response, flags=FINAL)`` once execute is returning, returns None; "mixed": the first
request through its sender, the others in the returned list (None for the first); "both":
sends and also returns the response; "two": sends twice (logs the error of the second send,
then the final flag); "final_only": only the final flag; "nothing": returns None and never
takes the sender.

Y = X, N = the number of requests of the batch.
"""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(request, count):
    x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("Y", x),
            pb_utils.Tensor("N", np.full(x.shape, count, np.int32)),
        ]
    )


class TritonPythonModel:
    def execute(self, requests):
        how = json.loads(requests[0].parameters()).get("how", "final")
        count = len(requests)
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if how == "final":
            for request in requests:
                request.get_response_sender().send(answer(request, count), flags=final)
            return None
        if how == "split":
            for request in requests:
                sender = request.get_response_sender()
                sender.send(answer(request, count))
                sender.send(flags=final)
            return None
        if how == "after":
            returning = threading.Event()

            def later(request, sender):
                returning.wait()
                sender.send(answer(request, count), flags=final)

            for request in requests:
                sender = request.get_response_sender()
                threading.Thread(target=later, args=(request, sender)).start()
            returning.set()
            return None
        if how == "mixed":
            first = requests[0]
            first.get_response_sender().send(answer(first, count), flags=final)
            return [None] + [answer(r, count) for r in requests[1:]]
        if how == "both":
            responses = []
            for request in requests:
                response = answer(request, count)
                request.get_response_sender().send(response, flags=final)
                responses.append(response)
            return responses
        if how == "two":
            for request in requests:
                sender = request.get_response_sender()
                sender.send(answer(request, count))
                try:
                    sender.send(answer(request, count))
                except pb_utils.TritonModelException as exc:
                    pb_utils.Logger.log_warn(f"second send: {exc}")
                sender.send(flags=final)
            return None
        if how == "final_only":
            for request in requests:
                request.get_response_sender().send(flags=final)
            return None
        return None
