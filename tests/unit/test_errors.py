from tritonx.errors import Code, TritonXError


def test_wrap_and_as_string() -> None:
    err = TritonXError.wrap(ValueError("boom"))
    assert err.code is Code.INTERNAL and err.message == "boom"
    assert TritonXError("x", Code.INVALID_ARG).as_string() == "Invalid argument: x"
