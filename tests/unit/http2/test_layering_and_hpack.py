"""``tritonx._transports.http2`` stays a layer of its own (design amendment 13): it imports nothing of
gRPC and no other tritonx package, ``tritonx._transports.grpc`` sits on top of it (no cycle), and the one
name it uses below ``hpack``'s public API is guarded: the installed ``hpack`` is inside the
range ``core/pyproject.toml`` pins, and ``hpack.huffman_table.decode_huffman`` still decodes
RFC 7541's Huffman strings.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import hpack
from packaging.requirements import Requirement

from tritonx._transports.http2.hpack import HeaderDecoder

ROOT = Path(__file__).resolve().parents[3]
HTTP2 = ROOT / "core" / "src" / "tritonx" / "_transports" / "http2"
GRPC = ROOT / "core" / "src" / "tritonx" / "_transports" / "grpc"


def imports(folder: Path) -> dict[str, set[str]]:
    """Module file → the modules it imports (absolute names)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[path.name] = names
    return found


def test_http2_imports_nothing_of_grpc_nor_the_rest_of_tritonx() -> None:
    for module, names in imports(HTTP2).items():
        for name in names:
            assert not name.startswith("grpc"), f"http2/{module} imports {name}"
            if name.startswith("tritonx"):
                assert name.startswith("tritonx._transports.http2"), (
                    f"http2/{module} imports {name}"
                )


def test_grpc_reaches_http2_only_through_its_public_modules() -> None:
    used = {name for names in imports(GRPC).values() for name in names}
    assert {
        "tritonx._transports.http2.connection",
        "tritonx._transports.http2.hpack",
    } <= used  # the layer below
    assert not any(name.startswith("tritonx._transports.http2._") for name in used)


def test_hpack_is_inside_the_pinned_range() -> None:
    project = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())
    pins = [Requirement(r) for r in project["project"]["dependencies"]]
    pin = next(r for r in pins if r.name == "hpack")
    assert pin.specifier, (
        "hpack must be pinned to a range: tritonx._transports.http2.hpack uses its internals"
    )
    assert hpack.__version__ in pin.specifier, (
        f"hpack {hpack.__version__} is outside {pin.specifier}: check that "
        "hpack.huffman_table.decode_huffman still exists and decodes, then move the pin"
    )


def test_hpacks_huffman_decoder_still_decodes_rfc_7541_strings() -> None:
    from hpack.huffman_table import decode_huffman

    # RFC 7541 C.4.1: "www.example.com"
    assert decode_huffman(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    # and through the decoder: C.4.1's whole request
    block = bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")
    assert HeaderDecoder().decode(block) == [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
    ]
