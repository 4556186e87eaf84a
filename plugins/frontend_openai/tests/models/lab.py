"""A decoupled model in vLLM's format for the frontend's fault tests. The prompt says what
it does:

* ``[[forever:PORT]]``: connects to 127.0.0.1:PORT and writes ``started``; then a token
  ``" tick"`` every 5 ms until ``request.is_cancelled()``; then connects again, writes
  ``cancelled <tokens sent>`` and ends the request (the test's signals that the request
  reached the model and that the model saw the cancellation);
* ``[[utf8]]``: ``"é"`` split over two responses (its two UTF-8 bytes), then ``"!"``;
* ``[[fail:N]]``: N tokens ``" x"``, then an error response ``model failed mid-stream``;
* anything else: the prompt's words, one token each.
"""

import re
import socket
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_FOREVER = re.compile(r"\[\[forever:(\d+)\]\]")
_FAIL = re.compile(r"\[\[fail:(\d+)\]\]")


def _text(value):
    data = value if isinstance(value, bytes) else value.encode()
    return pb_utils.Tensor("text_output", np.array([data], dtype=np.object_))


def _notify(port, message):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(message.encode())


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            prompt = prompt.reshape(-1)[0].decode()
            threading.Thread(target=self.run, args=(request, prompt), daemon=True).start()
        return None

    def run(self, request, prompt):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        forever = _FOREVER.search(prompt)
        fail = _FAIL.search(prompt)
        if forever:
            port = int(forever.group(1))
            _notify(port, "started")
            sent = 0
            while not request.is_cancelled():
                sender.send(pb_utils.InferenceResponse([_text(" tick")]))
                sent += 1
                time.sleep(0.005)
            _notify(port, f"cancelled {sent}")
            sender.send(flags=final)
        elif "[[utf8]]" in prompt:
            for piece in (b"\xc3", b"\xa9", b"!"):
                sender.send(pb_utils.InferenceResponse([_text(piece)]))
            sender.send(flags=final)
        elif fail:
            for _ in range(int(fail.group(1))):
                sender.send(pb_utils.InferenceResponse([_text(" x")]))
            error = pb_utils.TritonError("model failed mid-stream")
            sender.send(pb_utils.InferenceResponse(error=error), flags=final)
        else:
            words = re.findall(r"\s*\S+", prompt)
            for word in words[:-1]:
                sender.send(pb_utils.InferenceResponse([_text(word)]))
            sender.send(
                pb_utils.InferenceResponse([_text(words[-1] if words else "")]), flags=final
            )
