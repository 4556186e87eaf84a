"""``tritonx._transports.http.errors``: Triton's error code → HTTP status table and error bodies."""

from __future__ import annotations

import orjson

from tritonx._transports.http.errors import STATUS, response_for, status_code
from tritonx.errors import Code, TritonXError


def test_status_table_matches_triton() -> None:
    # server src/http_server.cc HttpCodeFromError
    assert STATUS == {
        Code.UNKNOWN: 400,
        Code.INTERNAL: 500,
        Code.NOT_FOUND: 404,
        Code.INVALID_ARG: 400,
        Code.UNAVAILABLE: 503,
        Code.UNSUPPORTED: 501,
        Code.ALREADY_EXISTS: 400,
        Code.CANCELLED: 400,
    }
    assert status_code(TritonXError("x", Code.UNSUPPORTED)) == 501


def test_error_body() -> None:
    response = response_for(TritonXError('no "model"', Code.NOT_FOUND))
    assert response.status == 404 and response.content_type == "application/json"
    assert isinstance(response.body, bytes)
    assert orjson.loads(response.body) == {"error": 'no "model"'}
