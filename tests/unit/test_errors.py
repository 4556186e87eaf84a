from tritonx.errors import Code, TritonXError


def test_codes_map_like_triton() -> None:
    assert Code.INVALID_ARG.http_status == 400
    assert Code.NOT_FOUND.http_status == 404
    assert Code.UNAVAILABLE.http_status == 503
    assert Code.UNSUPPORTED.http_status == 501
    assert Code.INTERNAL.http_status == 500
    assert Code.UNSUPPORTED.grpc_status_name == "UNIMPLEMENTED"
    assert Code.INVALID_ARG.grpc_status_name == "INVALID_ARGUMENT"


def test_wrap_and_as_string() -> None:
    err = TritonXError.wrap(ValueError("boom"))
    assert err.code is Code.INTERNAL and err.message == "boom"
    assert TritonXError("x", Code.INVALID_ARG).as_string() == "Invalid argument: x"
