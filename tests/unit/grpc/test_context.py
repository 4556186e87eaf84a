"""``tritonx._transports.grpc.context.CallContext``: what the gRPC handlers call on their context, and
both engines' contexts providing every member of it alike.

grpc ships no type stubs and mypy does not check the tests, so the signatures are compared
here at run time: each member is present, async exactly where the Protocol's is, takes the
Protocol's positional arguments (and requires no others), and where both sides annotate a
parameter or the return with a plain class, it is the same class.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tritonx._transports.grpc import context as context_module
from tritonx._transports.grpc.context import CallContext

#: the modules whose handlers (or helpers they pass their context to) call the context
HANDLER_MODULES = ("servicer", "receive", "health", "errors")

MEMBERS = sorted(
    name
    for name, value in vars(CallContext).items()
    if not name.startswith("_") and callable(value)
)


def aio_context_type() -> type:
    """The class of the context grpc.aio really hands a handler (one call to a server)."""
    seen: list[type] = []

    async def handler(request: bytes, context: Any) -> bytes:
        seen.append(type(context))
        return b""

    async def call() -> None:
        server = grpc.aio.server()
        rpc = grpc.unary_unary_rpc_method_handler(handler)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", {"M": rpc}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await channel.unary_unary("/t.S/M")(b"", timeout=20)
        finally:
            await server.stop(None)

    asyncio.run(call())
    (found,) = seen
    return found


#: the implementations: grpc's documented interface, the class grpc.aio hands handlers, and
#: the loop engine's context (imported when the test runs)
IMPLEMENTATIONS: dict[str, Callable[[], type]] = {
    "grpc.aio.ServicerContext": lambda: grpc.aio.ServicerContext,
    "grpc.aio-handed": aio_context_type,
    "loop-engine": lambda: importlib.import_module("tritonx._transports.grpc.calls").Context,
}


@pytest.fixture(scope="module", params=list(IMPLEMENTATIONS))
def implementation(request: pytest.FixtureRequest) -> type:
    return IMPLEMENTATIONS[request.param]()


def hints(function: Any) -> dict[str, Any]:
    """``function``'s annotations, resolved (those that do not resolve left out: grpc's
    forward references to its ``Metadata`` class)."""
    try:
        return typing.get_type_hints(function)
    except NameError:
        raw = getattr(function, "__annotations__", {})
        return {k: v for k, v in raw.items() if not isinstance(v, str)}


def plain_class(annotation: Any) -> type | None:
    """``annotation`` when it is a plain class (None included, as NoneType), else None."""
    if annotation is None or annotation is type(None):
        return type(None)
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation
    return None


def positional(function: Any) -> list[inspect.Parameter]:
    """The parameters after ``self``."""
    return list(inspect.signature(function).parameters.values())[1:]


def test_the_protocol_lists_exactly_what_the_handlers_call() -> None:
    """Every ``context.<name>`` in the handler modules is a member, and every member is
    used there (a handler that needs more adds it to the Protocol and the loop engine)."""
    used: set[str] = set()
    for module in HANDLER_MODULES:
        path = Path(context_module.__file__).with_name(f"{module}.py")
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "context"
            ):
                used.add(node.attr)
    assert used == set(MEMBERS)


def test_the_protocol_takes_positional_arguments_only() -> None:
    """(So the implementations may name them as they like: grpc's and the loop engine's
    names differ.)"""
    for name in MEMBERS:
        for parameter in positional(getattr(CallContext, name)):
            assert parameter.kind is inspect.Parameter.POSITIONAL_ONLY, (name, parameter)


@pytest.mark.parametrize("name", MEMBERS)
def test_each_engine_provides_the_member(implementation: type, name: str) -> None:
    expected = getattr(CallContext, name)
    actual = getattr(implementation, name, None)
    assert callable(actual), f"{implementation.__qualname__} has no {name}"
    assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(expected), name
    wanted = positional(expected)
    placeholders = [object()] * len(wanted)
    # the Protocol's arguments, by position, are all it needs (TypeError otherwise)
    inspect.signature(actual).bind(object(), *placeholders)
    got = positional(actual)
    expected_hints, actual_hints = hints(expected), hints(actual)
    pairs = [(p.name, q.name) for p, q in zip(wanted, got, strict=False)]
    pairs.append(("return", "return"))
    for mine, theirs in pairs:
        want = plain_class(expected_hints.get(mine))
        have = actual_hints.get(theirs, Any)
        if want is None or have is Any:
            continue
        assert plain_class(have) is want, (name, mine, have, want)


def test_a_loop_engine_context_is_a_call_context() -> None:
    """The loop engine's context as the handlers type it (mypy checks this where the loop
    engine declares it; here: it constructs with the call's metadata source and answers
    ``invocation_metadata`` from it)."""
    calls = importlib.import_module("tritonx._transports.grpc.calls")
    pairs = (("x-request-id", "a"), ("k-bin", b"\x00"))
    context: CallContext = calls.Context(lambda: pairs)
    assert tuple(context.invocation_metadata() or ()) == pairs
