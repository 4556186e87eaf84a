"""The checks of Triton's qa/python_models/bls_model_loading, run from ``initialize`` on the
model named by the config parameter "LOAD_NAME" (a model of the repository whose versions 2
and 3 exist, version policy "all"); "FILE_SOURCE" names a file whose bytes become the
override ``files={"file:1/model.py": ...}`` (Triton's test uses an ONNX file) and
"FILE_CONFIG" the override config (JSON) to go with them. Every check unloads the model
after it, as the test's ``tearDown`` does.

RESULT (BYTES [1]) is "ok", or the checks that failed, one per line.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def parameter(config, key):
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = parameter(config, "LOAD_NAME")
        self.file_source = parameter(config, "FILE_SOURCE")
        self.file_config = parameter(config, "FILE_CONFIG")
        self.failed = []
        for check in (self.load_unload, self.config_override, self.file_override):
            try:
                check()
            except Exception as exc:  # a check that raised counts as failed
                self.failed.append(f"{check.__name__} raised {type(exc).__name__}: {exc}")
            pb_utils.unload_model(self.name)

    def expect(self, what, value, wanted):
        if value != wanted:
            self.failed.append(f"{what}: {value!r}, wanted {wanted!r}")

    def ready(self, name, version=""):
        try:
            return pb_utils.is_model_ready(model_name=name, model_version=version)
        except pb_utils.TritonModelException as exc:
            if f"Request for unknown model: '{name}'" not in str(exc):
                self.failed.append(f"is_model_ready({name!r}) raised {exc}")
            return False

    def refused(self, what, **kwargs):
        try:
            pb_utils.load_model(**kwargs)
        except (pb_utils.TritonModelException, UnicodeDecodeError):
            return
        self.failed.append(f"{what} was not refused")

    def load_unload(self):
        self.expect("ready before the load", self.ready(self.name), False)
        pb_utils.load_model(model_name=self.name)
        self.expect("ready after the load", self.ready(self.name), True)
        pb_utils.unload_model(self.name)
        self.expect("ready after the unload", self.ready(self.name), False)

    def config_override(self):
        self.expect("ready before the load", self.ready(self.name), False)
        pb_utils.load_model(self.name)
        self.expect("ready after the load", self.ready(self.name), True)
        self.refused("a config that is not JSON", model_name=self.name, config='"a": {{}}')
        for version in ("2", "3"):
            self.expect(
                f"version {version} after a refused load", self.ready(self.name, version), True
            )
        only_2 = '{"backend":"python", "version_policy":{"specific":{"versions":[2]}}}'
        pb_utils.load_model(self.name, config=only_2)
        self.expect("version 2 with its config", self.ready(self.name, "2"), True)
        self.expect("version 3 with its config", self.ready(self.name, "3"), False)

    def file_override(self):
        self.expect("ready before the load", self.ready(self.name), False)
        pb_utils.load_model(self.name)
        self.expect("ready after the load", self.ready(self.name), True)
        files = {"file:1/model.py": Path(self.file_source).read_bytes()}
        self.refused("files without a config", model_name=self.name, config="", files=files)
        config = Path(self.file_config).read_text()
        pb_utils.load_model(model_name="override_model", config=config, files=files)
        self.expect("original version 1", self.ready(self.name, "1"), False)
        self.expect("original version 3", self.ready(self.name, "3"), True)
        self.expect("override version 1", self.ready("override_model", "1"), True)
        self.expect("override version 3", self.ready("override_model", "3"), False)
        pb_utils.load_model(self.name, config, files)
        self.expect("overridden version 1", self.ready(self.name, "1"), True)
        self.expect("overridden version 3", self.ready(self.name, "3"), False)
        self.expect("override version 1 again", self.ready("override_model", "1"), True)
        self.expect("override version 3 again", self.ready("override_model", "3"), False)

    def execute(self, requests):
        text = "\n".join(self.failed) or "ok"
        out = pb_utils.Tensor("RESULT", np.array([text.encode()], dtype=object))
        return [pb_utils.InferenceResponse(output_tensors=[out]) for _ in requests]
