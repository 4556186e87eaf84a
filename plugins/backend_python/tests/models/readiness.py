"""A model whose own ``is_ready()`` answers what STATE_DIR/ready says: ``true``, ``false``,
``raise`` (raises), ``none`` (returns None), ``hang`` (sleeps 30 s), ``async`` (an async
is_ready returning True). ``execute`` doubles IN."""

import asyncio
import json
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.state = Path(config["parameters"]["STATE_DIR"]["string_value"])

    def is_ready(self):
        what = (self.state / "ready").read_text().strip()
        if what == "true":
            return True
        if what == "false":
            return False
        if what == "raise":
            raise RuntimeError("the database is gone")
        if what == "hang":
            time.sleep(30)
            return True
        if what == "async":
            return self._ready_later()
        return None

    async def _ready_later(self):
        await asyncio.sleep(0)
        return True

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
