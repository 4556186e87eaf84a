"""The frontend's pure parts: the redirect header's routing table (Triton's
``VertexAiAPIServer::Handle``) and the binary content type's header size (Triton's
``GetInferenceHeaderLength``, ``std::stoi`` included), without a server."""

from __future__ import annotations

import pytest

from tritonx.errors import Code, TritonXError
from tritonx_frontend_vertexai.binary import BINARY_CONTENT_TYPE, json_header_size
from tritonx_frontend_vertexai.frontend import choose_default_model
from tritonx_frontend_vertexai.redirect import (
    MAX_REDIRECT_LENGTH,
    Redirect,
    RedirectRefused,
    route_redirect,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("metrics", Redirect("metrics")),
        ("v2/models/stats", Redirect("kserve", "/v2/models/stats", "GET", "statistics")),
        ("v2/models/m", Redirect("kserve", "/v2/models/m", "GET", "metadata")),
        (
            "v2/models/m/versions/3",
            Redirect("kserve", "/v2/models/m/versions/3", "GET", "metadata"),
        ),
        ("v2/models/m/infer", Redirect("kserve", "/v2/models/m/infer", "POST", "inference")),
        ("v2/models/m/ready", Redirect("kserve", "/v2/models/m/ready", "GET", "health")),
        ("v2/models/m/config", Redirect("kserve", "/v2/models/m/config", "GET", "model-config")),
        ("v2/models/m/stats", Redirect("kserve", "/v2/models/m/stats", "GET", "statistics")),
        # a model name is any segment: it is encoded for the server's routes to decode
        (
            "v2/models/a:b@c/infer",
            Redirect("kserve", "/v2/models/a%3Ab%40c/infer", "POST", "inference"),
        ),
        ("v2", Redirect("kserve", "/v2", "GET", "metadata")),
        ("v2/health/live", Redirect("kserve", "/v2/health/live", "GET", "health")),
        ("v2/health/ready", Redirect("kserve", "/v2/health/ready", "GET", "health")),
        (
            "v2/cudasharedmemory/region/r/status",
            Redirect("kserve", "/v2/cudasharedmemory/region/r/status", "GET", "shared-memory"),
        ),
        ("v2/systemsharedmemory/register", Redirect("forbidden")),
        (
            "v2/repository/index",
            Redirect("kserve", "/v2/repository/index", "POST", "model-repository"),
        ),
        (
            "v2/repository/r/index",
            Redirect("kserve", "/v2/repository/r/index", "POST", "model-repository"),
        ),
        ("v2/repository/models/m/load", Redirect("forbidden")),
        ("v2/models/m/generate", Redirect("unknown")),
        ("v2/models/m/versions/1/trace/setting", Redirect("unknown")),
        ("v2/logging", Redirect("unknown")),
        ("v2/models/m/infer/more", Redirect("unknown")),
    ],
)
def test_routing_table(value: str, expected: Redirect) -> None:
    assert route_redirect(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "/v2",
        "v2//x",
        "v2/",
        "./v2",
        "v2/../v2",
        "v2/%76",
        "v2?x",
        "v2#x",
        "v2\\x",
        "v2 x",
        "v2\tx",
        "v2/\u00e9",
        "v2/\x00",
        "a" * (MAX_REDIRECT_LENGTH + 1),
    ],
)
def test_values_refused_before_routing(value: str) -> None:
    with pytest.raises(RedirectRefused, match=r"^X-Vertex-Ai-Triton-Redirect "):
        route_redirect(value)


def test_the_longest_value_accepted() -> None:
    value = "v2/models/" + "m" * (MAX_REDIRECT_LENGTH - len("v2/models/"))
    assert route_redirect(value).path == "/" + value


@pytest.mark.parametrize(
    ("content_type", "length", "size"),
    [
        (None, 10, None),
        ("application/json", 10, None),
        (f"{BINARY_CONTENT_TYPE}4", 10, 4),
        (f"{BINARY_CONTENT_TYPE}10", 10, 10),
        (f"{BINARY_CONTENT_TYPE}0", 10, 0),
        # std::stoi: leading white space and a sign, anything after the digits ignored
        (f"{BINARY_CONTENT_TYPE} \t+7; charset=x", 10, 7),
        (f"{BINARY_CONTENT_TYPE}007", 10, 7),
        # leading zeros are not digits that count towards the 32 read
        (f"{BINARY_CONTENT_TYPE}{'0' * 40}5", 10, 5),
        # a body of unknown length (chunked): the server checks the size as it reads
        (f"{BINARY_CONTENT_TYPE}12345", None, 12345),
    ],
)
def test_json_header_size(content_type: str | None, length: int | None, size: int | None) -> None:
    assert json_header_size(content_type, length) == size


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (
            f"x{BINARY_CONTENT_TYPE}4",
            f"expect MIME type for binary data starts with '{BINARY_CONTENT_TYPE}', got: x{BINARY_CONTENT_TYPE}4",
        ),
        (f"{BINARY_CONTENT_TYPE}", "Unable to parse inference header size, got: "),
        (f"{BINARY_CONTENT_TYPE}-", "Unable to parse inference header size, got: -"),
        (
            f"{BINARY_CONTENT_TYPE}2147483648",
            "Unable to parse inference header size, value is out of range, got: 2147483648",
        ),
        (
            f"{BINARY_CONTENT_TYPE}-2147483649",
            "Unable to parse inference header size, value is out of range, got: -2147483649",
        ),
        (f"{BINARY_CONTENT_TYPE}-1", "inference header size should be in range (0, 10), got: -1"),
        (f"{BINARY_CONTENT_TYPE}11", "inference header size should be in range (0, 10), got: 11"),
    ],
)
def test_json_header_size_errors(content_type: str, message: str) -> None:
    with pytest.raises(TritonXError) as error:
        json_header_size(content_type, 10)
    assert (error.value.code, error.value.message) == (Code.INVALID_ARG, message)


def test_default_model_choice() -> None:
    assert choose_default_model("", ["m"]) == "m"
    assert choose_default_model("b", ["a", "b"]) == "b"
    for configured, ready in (("", []), ("", ["a", "b"]), ("", ["m", "m"]), ("c", ["a"])):
        with pytest.raises(TritonXError) as error:
            choose_default_model(configured, ready)
        assert error.value.code == Code.INVALID_ARG
