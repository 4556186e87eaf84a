"""schemathesis over tritonx's OpenAPI document (docs/openapi.yaml) against a real server.

Every generated request (valid and invalid by the document) must get an answer that is not a
5xx, except the 5xx answers Triton gives for the same request (triton-reference §1.1, §1.9): a
load that fails (500 "failed to load ..."), a body that is not JSON (500 "failed to parse the
request JSON buffer"), a JSON value of the wrong type (500 "attempt to access JSON ..."; Triton's
JSON reader reports INTERNAL), a decoupled model over HTTP (501). After each case the server must still be live.
The number of examples per operation is bounded (``TRITONX_FUZZ_EXAMPLES``, default 25) so the
suite stays within CI's time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import schemathesis
from hypothesis import HealthCheck, settings

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
EXAMPLES = int(os.environ.get("TRITONX_FUZZ_EXAMPLES", "25"))

schema = schemathesis.openapi.from_path(SPEC)

#: 5xx answers Triton gives for the same requests (status, a part of the error text).
DOCUMENTED_5XX: tuple[tuple[int, str], ...] = (
    (500, "failed to load '"),
    (500, "failed to parse the request JSON buffer"),
    (500, "attempt to access JSON non-"),
    (500, "attempt to access non-existing object member"),
    (500, "failed to get request params"),
    (501, "HTTP end point doesn't support models with decoupled transaction policy"),
)


def _documented(status: int, text: str) -> bool:
    """Whether a 5xx answer is one Triton gives too (a JSON error body naming the cause)."""
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    error = str(body.get("error", "")) if isinstance(body, dict) else ""
    return any(status == code and part in error for code, part in DOCUMENTED_5XX)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_http_api(case: schemathesis.Case, served: Any) -> None:
    response = case.call(base_url=served.base_url, timeout=30)
    if response.status_code >= 500:
        assert _documented(response.status_code, response.text), (
            f"{case.method} {case.formatted_path} -> {response.status_code} {response.text[:500]}"
            f"\n{case.as_curl_command()}"
        )
    served.assert_alive()
