"""The frontend's settings: its ``--frontend-config`` keys and the ``SAGEMAKER_TRITON_*``
variables it reads; a value it cannot use, or a key it does not read, stops the start."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from sagemaker_testing import add_identity, serve, url_of

from tritonx.errors import TritonXError


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ({"thread_count": "0"}, {}, "thread_count=0: expected a positive integer"),
        ({"thread_count": "-3"}, {}, "thread_count=-3: expected a positive integer"),
        ({"thread_count": "many"}, {}, "thread_count=many: expected a positive integer"),
        ({"models_root": "opt/ml/models"}, {}, "models_root=opt/ml/models: expected an absolute"),
        ({"max_models": "0"}, {}, "max_models=0: expected a positive integer"),
        ({"max_model_names": "x"}, {}, "max_model_names=x: expected a positive integer"),
        ({"max_model_files": "-1"}, {}, "max_model_files=-1: expected a positive integer"),
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


def test_model_management_needs_explicit_model_control(tmp_path: Path) -> None:
    """Triton's multi-model endpoint registers repositories: refused (400) in the other
    model control modes."""
    root = tmp_path / "models"
    add_identity(root / "h", "model")
    (tmp_path / "repo").mkdir()
    with serve(tmp_path / "repo", {"models_root": str(root)}) as server:
        url = url_of(server)
        answer = requests.post(
            f"{url}/models", json={"model_name": "m", "url": str(root / "h" / "model")}
        )
        assert answer.status_code == 400
        assert "not allowed if model control mode is not EXPLICIT" in answer.json()["error"]
        assert requests.get(f"{url}/models").json() == {"models": []}


def test_restricted_health_and_inference(tmp_path: Path) -> None:
    """--http-restricted-api health covers /ping, inference /invocations (403 with Triton's
    message, the body unread); with the header they are served."""
    restrictions = {"health": ("X-Key", "h"), "inference": ("X-Key", "i")}
    with serve(tmp_path, http_restricted_api=restrictions) as server:
        url = url_of(server)
        answer = requests.get(f"{url}/ping")
        assert answer.status_code == 403
        assert answer.json() == {"error": "This API is restricted, expecting header 'X-Key'"}
        assert requests.get(f"{url}/ping", headers={"X-Key": "h"}).status_code == 200
        answer = requests.post(f"{url}/invocations", data=b"x" * 100_000)
        assert answer.status_code == 403
        answer = requests.post(f"{url}/invocations", data=b"{}", headers={"X-Key": "i"})
        assert answer.status_code == 404  # (the unspecified default model: not found)
