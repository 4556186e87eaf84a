"""A model whose own ``is_ready()`` takes as long as the test says: each call appends a line
to STATE_DIR/calls, then waits while STATE_DIR/hold exists, then returns True. ``execute``
doubles IN."""

import json
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.state = Path(config["parameters"]["STATE_DIR"]["string_value"])

    def is_ready(self):
        with open(self.state / "calls", "a") as calls:
            calls.write("is_ready\n")
        while (self.state / "hold").exists():  # until the test lets it answer
            time.sleep(0.01)
        return True

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
