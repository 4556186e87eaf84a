"""The frontend's settings: its ``--frontend-config`` keys and the ``SAGEMAKER_TRITON_*``
variables it reads; a value it cannot use, or a key it does not read, stops the start."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from sagemaker_testing import serve, url_of

from tritonx.errors import TritonXError


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ({"thread_count": "0"}, {}, "thread_count=0: expected a positive integer"),
        ({"thread_count": "-3"}, {}, "thread_count=-3: expected a positive integer"),
        ({"thread_count": "many"}, {}, "thread_count=many: expected a positive integer"),
        ({"models_root": "opt/ml/models"}, {}, "models_root=opt/ml/models: expected an absolute"),
        ({"ping_mode": "live"}, {}, r"unknown key(s) ping_mode"),
        ({}, {"SAGEMAKER_TRITON_PING_MODE": "always"}, "invalid SAGEMAKER_TRITON_PING_MODE"),
        ({}, {"SAGEMAKER_TRITON_INFERENCE_TYPE": "x"}, "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE"),
    ],
)
def test_refused(tmp_path: Path, config: dict[str, str], env: dict[str, str], message: str) -> None:
    with pytest.raises(TritonXError) as refused, serve(tmp_path, config, env):
        pass
    assert message in str(refused.value)


def test_thread_count_is_accepted(tmp_path: Path) -> None:
    with serve(tmp_path, {"thread_count": "16"}) as server:
        assert requests.get(f"{url_of(server)}/ping").status_code == 200
