"""Helpers of the SageMaker frontend's tests (``conftest.py`` puts this folder on the path):
servers started in a thread of their own
(``tritonx.testing.ServerThread``) with the ``sagemaker`` frontend on a free loopback port,
driven by plain HTTP clients (``requests``), as SageMaker's own clients are plain HTTP."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import requests

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, ServerThread, identity, loopback_settings

BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="

#: the input of the tests' identity models, INT32 [1, 16]
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)

#: a python model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32 [1, 16])
ADD_SUB = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            answers.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.int32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.int32)),
            ]))
        return answers
"""


def add_identity(root: Path, name: str, **kw: Any) -> Path:
    """An identity model ``name`` (INPUT0 -> OUTPUT0, INT32 [1, 16]) in the folder ``root``
    (``root/name/config.pbtxt``, ``root/name/1``)."""
    return ModelRepositoryBuilder(root).add_identity(name, datatype="INT32", dims=[1, 16], **kw)


def add_add_sub(root: Path, name: str) -> Path:
    """The python :data:`ADD_SUB` model ``name`` in the folder ``root``."""
    return ModelRepositoryBuilder(root).add(
        name,
        backend="python",
        inputs=[("INPUT0", "INT32", [1, 16]), ("INPUT1", "INT32", [1, 16])],
        outputs=[("OUTPUT0", "INT32", [1, 16]), ("OUTPUT1", "INT32", [1, 16])],
        versions={1: {"model.py": ADD_SUB}},
    )


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (None: removed), restored after."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def serve(
    root: Path,
    config: Mapping[str, str] | None = None,
    env: Mapping[str, str | None] | None = None,
    plugins: tuple[str, ...] = (),
    **overrides: Any,
) -> Iterator[Server]:
    """A started server over ``root`` with the ``sagemaker`` frontend (its ``config``) on a
    free loopback port; ``env``: the ``SAGEMAKER_TRITON_*`` variables the frontend reads at
    start; ``plugins``: installed plugins to load besides (``backend_python``)."""
    import tritonx_frontend_sagemaker

    frontend = {"port": "0", "address": "127.0.0.1", **(config or {})}
    settings = loopback_settings(
        root,
        frontend_config={"sagemaker": frontend},
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        **overrides,
    )
    manager = make_plugin_manager(
        autoload=bool(plugins), only=plugins or None, extra=[identity, tritonx_frontend_sagemaker]
    )
    with environment(env or {}), ServerThread(Server(settings, plugin_manager=manager)) as srv:
        yield srv


def url_of(server: Server) -> str:
    """The ``sagemaker`` frontend's base URL."""
    return server.frontend_urls["sagemaker"]


def infer_body(data: np.ndarray = DATA, name: str = "INPUT0") -> dict[str, Any]:
    """A KServe v2 JSON request of one INT32 input."""
    return {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": list(data.shape), "data": data.tolist()}
        ]
    }


def binary_body(data: np.ndarray = DATA, binary_output: bool = False) -> tuple[bytes, int]:
    """A request in SageMaker's binary form (its body, its JSON header's size), made by
    tritonclient's request encoder."""
    import tritonclient.http as httpclient

    tensor = httpclient.InferInput("INPUT0", list(data.shape), "INT32")
    tensor.set_data_from_numpy(data, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_output)]
    body, length = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=outputs)
    return body, length


def parse_answer(response: requests.Response) -> Any:
    """tritonclient's reading of an answer, in SageMaker's binary form or JSON."""
    import tritonclient.http as httpclient

    kind = response.headers["Content-Type"]
    length = int(kind[len(BINARY) :]) if kind.startswith(BINARY) else None
    return httpclient.InferenceServerClient.parse_response_body(
        response.content, header_length=length
    )
