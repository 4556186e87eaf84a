"""Differential test: the same bytes to ``h2`` (the reference, in-process) and to tritonx's
gRPC listener; where ``h2`` finds a protocol error tritonx must answer with one too.

Each example is a client's side of a connection: the preface, SETTINGS, a prefix of valid
frames (gRPC calls opened and ended, their headers cut into CONTINUATION frames, padded or
prioritised, messages cut into DATA frames, trailers, RST_STREAM, WINDOW_UPDATE, PRIORITY,
SETTINGS, PING, frames of unknown types) and then, usually, one frame made wrong (random
type, flags, stream, length or payload; SETTINGS payloads; header blocks from ``hpack``'s
encoder with random octets; frames inside a header block; oversized frames), then a PING
whose ACK tells that the peer read everything.

* ``h2.connection.H2Connection(client_side=False, validate_inbound_headers=True)`` raises
  ``h2.exceptions.ProtocolError`` (or one of its subclasses: a connection error) or writes
  RST_STREAM (a stream error) ⇒ tritonx sends GOAWAY or RST_STREAM with an error code, or
  closes the connection.
* ``h2`` takes everything ⇒ tritonx answers the PING, with no GOAWAY or RST_STREAM of an
  error code before it (NO_ERROR is fine: a gRPC answer ends a stream the client still
  sends on that way).

(``h2`` emits ``StreamReset`` / ``ConnectionTerminated`` events for the *client's*
RST_STREAM / GOAWAY, which are not errors of the server's; its own answers are read from what
it writes.)

Shapes left out, each an ``h2`` quirk rather than a tritonx bug:

* a client's GOAWAY followed by anything: ``h2`` then refuses every frame ("Invalid input
  RECV_PING in state CLOSED"); RFC 9113 §6.8 lets the connection go on (the valid GOAWAY is a
  conformance case; GOAWAY on a stream or of a bad length still is generated).
* frame type 0xA (ALTSVC, RFC 7838): ``h2`` parses it and rejects a short one; a server that
  does not implement it must ignore it (RFC 9113 §5.5).
* setting 0x8 (SETTINGS_ENABLE_CONNECT_PROTOCOL, RFC 8441) with a value above 1: ``h2``
  validates it; an endpoint without RFC 8441 ignores unknown settings (RFC 9113 §6.5.2).
* frames on a stream after the client ended it, where the outcome depends on the other side
  having answered: ``h2`` never answers, so its stream stays half-closed (remote) while
  tritonx's may be closed. A WINDOW_UPDATE that overflows such a stream's window, or one of
  0 (RFC 9113 §6.9 both forbids the increment and tells a receiver not to treat WINDOW_UPDATE
  on a closed stream as an error), a SETTINGS_INITIAL_WINDOW_SIZE taking such windows past
  2^31-1: not generated.
* a setting repeated in one SETTINGS frame, an invalid value before a valid one: ``h2``
  (hyperframe) keeps only the last value of each; RFC 9113 §6.5.3 processes them in order
  (tritonx refuses the invalid one).
* RST_STREAM on an idle stream: ``h2`` ignores it once the connection has a stream (RFC 9113
  §5.1: connection error PROTOCOL_ERROR, which tritonx sends; a conformance case).
* a ``host`` field differing from ``:authority``: ``h2`` refuses it; RFC 9113 §8.3.1 says a
  server SHOULD.
* more DATA than 65535 octets: ``h2`` announces the default windows, tritonx larger ones.
* the gRPC metadata tritonx answers at once (``grpc-*`` fields: an invalid ``grpc-timeout``
  ends the call before the client did, closing the stream on tritonx's side only).

Frames that once were engine gaps (a stream depending on itself, frames on closed streams, a
new stream numbered below an earlier one, a PRIORITY of a bad length on a stream not open, a
GOAWAY shorter than 8 octets, malformed requests) are in the catalogue of violations. The
last one closed, WINDOW_UPDATE on an idle even (server) stream below the client's last one
(RFC 9113 §5.1: connection error PROTOCOL_ERROR; conformance case
``test_idle_even_stream_below_the_last_one``), is generated on its own by
:func:`test_differential_known_gaps`, a regression test now that the engine refuses it.

Bounded by ``TRITONX_FUZZ_EXAMPLES`` (default 50) per test; ``TRITONX_FUZZ_SHRINK=1`` shrinks
the known gaps' failures too.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.exceptions
import hpack
import pytest
from h2frames import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    HEALTH_CHECK,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PUSH_PROMISE,
    READ_TIMEOUT,
    RST_STREAM,
    SERVER_LIVE,
    SETTINGS,
    WINDOW_UPDATE,
    Frame,
    continuation,
    data,
    filler_message,
    frame,
    grpc_request,
    headers,
    parse_frames,
    ping,
    priority,
    priority_fields,
    rst_stream,
    settings,
    window_update,
)
from hypothesis import HealthCheck, Phase, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("TRITONX_FUZZ_EXAMPLES", "50"))
SHRINK = os.environ.get("TRITONX_FUZZ_SHRINK") == "1"


def fuzz_settings(shrink: bool) -> hypothesis_settings:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )


SENTINEL = b"sentinel"
ALTSVC = 0xA
UNKNOWN_TYPES = st.integers(ALTSVC + 1, 0xFF)
STREAM_ERRORS = st.one_of(st.integers(0, 0xD), st.integers(0, 2**32 - 1))
#: lower-case metadata names tritonx passes to the call as they are
NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12).filter(
    lambda n: (
        not n.startswith("grpc-")
        and n not in {"te", "host", "content-length", "content-type", "connection", "keep-alive"}
        and n not in {"proxy-connection", "transfer-encoding", "upgrade", "user-agent"}
    )
)
VALUES = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=0, max_size=20
).map(lambda v: v.strip())


@dataclass
class Stream:
    """A stream as the client left it: ``open`` (headers sent), ``ended`` (END_STREAM sent)
    or ``reset`` (RST_STREAM sent); ``left``: the message octets not sent yet."""

    state: str
    left: bytes = b""


@dataclass
class Program:
    """What one example writes after the preface, and its steps in words."""

    steps: list[str] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)

    def add(self, step: str, *chunks: bytes) -> None:
        self.steps.append(step)
        self.chunks.extend(chunks)

    @property
    def wire(self) -> bytes:
        return PREFACE + b"".join(self.chunks) + ping(SENTINEL)

    def __str__(self) -> str:
        return "\n  ".join(["program:", *self.steps])


class Builder:
    """Draws a program: a valid prefix, then one final step (see the module's docstring)."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.encoder = hpack.Encoder()
        self.streams: dict[int, Stream] = {}
        self.highest = 0  # highest stream the client opened
        self.skipped: list[int] = []  # ids skipped over (closed without use)
        self.pings = 0
        self.program = Program()

    # -------------------------------------------------------------- helpers

    def ids(self, *states: str) -> list[int]:
        return [sid for sid, s in self.streams.items() if s.state in states]

    def idle_id(self) -> int:
        """An odd id above every stream the client opened."""
        return (self.highest or -1) + 2 * self.draw(st.integers(1, 3))

    def block(self, fields: list[tuple[str, str]]) -> bytes:
        return self.encoder.encode(fields, huffman=self.draw(st.booleans()))

    def some_stream(self) -> int:
        """A stream id that keeps both sides in step: 0, open, idle (odd or even, above every
        stream the client opened) or the largest."""
        even = (self.highest + 1 if self.highest else 2) + 2 * self.draw(st.integers(0, 50))
        choices = [0, self.idle_id(), even, 2**31 - 1, *self.ids("open")]
        return self.draw(st.sampled_from(choices))

    def even_below(self, sid: int) -> bool:
        """An even (server) stream id below the client's highest: still idle (the known gap:
        see the module's docstring)."""
        return 0 < sid < self.highest and not sid & 1

    def steer(self, kind: int, flags: int, sid: int, payload: bytes) -> int:
        """The stream a final frame goes on, moved off the shapes left out (the module's
        docstring) and off the known gap."""
        if kind == PING and not flags & ACK:
            self.pings += 1
        if kind == GOAWAY and sid == 0 and len(payload) >= 8:
            return 1  # a valid GOAWAY: h2 refuses whatever follows
        if kind == RST_STREAM and sid not in self.streams and len(payload) == 4:
            return 0  # on an idle stream: h2 ignores it once a stream was opened
        if kind == WINDOW_UPDATE and sid:
            if self.even_below(sid):
                return 0
            state = self.streams.get(sid)
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF if len(payload) == 4 else 1
            if (state is None or state.state != "open") and not 0 < increment <= 65535:
                return 0  # 0 or an overflow on a stream only h2 still has open
        return sid

    def dependency(self, stream: int) -> bytes:
        """Priority fields that do not depend on ``stream`` itself."""
        on = self.draw(st.sampled_from([0, *self.streams, self.highest + 2]))
        if on == stream:
            on = 0
        return priority_fields(on, self.draw(st.integers(0, 255)), self.draw(st.booleans()))

    # -------------------------------------------------------------- the valid prefix

    def start(self) -> None:
        pairs = self.draw(st.lists(self.valid_setting(), max_size=4))
        self.program.add(f"SETTINGS {pairs}", settings(*pairs), settings(ack=True))

    def valid_setting(self) -> st.SearchStrategy[tuple[int, int]]:
        return st.one_of(
            st.tuples(st.just(1), st.integers(0, 2**32 - 1)),
            st.tuples(st.just(2), st.integers(0, 1)),
            st.tuples(st.just(3), st.integers(0, 2**32 - 1)),
            st.tuples(st.just(4), st.integers(0, 1 << 20)),
            st.tuples(st.just(5), st.integers(16384, 2**24 - 1)),
            st.tuples(st.just(6), st.integers(0, 2**32 - 1)),
            st.tuples(st.integers(0x9, 0xFFFF), st.integers(0, 2**32 - 1)),
        )

    def open_stream(self) -> None:
        sid = self.idle_id()
        self.skipped += range((self.highest or -1) + 2, sid, 2)
        self.highest = sid
        path = self.draw(st.sampled_from([SERVER_LIVE, HEALTH_CHECK]))
        extra = self.draw(st.lists(st.tuples(NAMES, VALUES), max_size=3))
        block = self.block(grpc_request(path, "localhost", extra))
        end = self.draw(st.integers(0, 9)) == 0
        message = (
            filler_message(self.draw(st.integers(7, 400)))
            if self.draw(st.booleans())
            else b"\0\0\0\0\0"
        )
        cuts = sorted(
            self.draw(st.lists(st.integers(1, max(1, len(block) - 1)), max_size=2, unique=True))
        )
        cuts = [c for c in cuts if 0 < c < len(block)]
        pieces = [block[a:b] for a, b in zip([0, *cuts], [*cuts, len(block)], strict=True)]
        pad = self.draw(st.one_of(st.none(), st.integers(0, 20)))
        prio = self.dependency(sid) if self.draw(st.booleans()) else None
        chunks = [headers(sid, pieces[0], end, len(pieces) == 1, pad, prio)]
        chunks += [continuation(sid, p, i == len(pieces) - 2) for i, p in enumerate(pieces[1:])]
        self.streams[sid] = Stream("ended" if end else "open", b"" if end else message)
        self.program.add(
            f"HEADERS {sid} {path} {extra} end_stream={end} pad={pad} "
            f"priority={prio is not None} in {len(pieces)} frame(s)",
            *chunks,
        )

    def send_data(self, sid: int) -> None:
        stream = self.streams[sid]
        n = self.draw(st.integers(0, len(stream.left)))
        piece, stream.left = stream.left[:n], stream.left[n:]
        end = self.draw(st.booleans()) if not stream.left else self.draw(st.integers(0, 9)) == 0
        pad = self.draw(st.one_of(st.none(), st.integers(0, 20)))
        if end:
            stream.state = "ended"
        self.program.add(
            f"DATA {sid} {len(piece)} octets end_stream={end} pad={pad}", data(sid, piece, end, pad)
        )

    def send_trailers(self, sid: int) -> None:
        fields = self.draw(st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=2))
        self.streams[sid].state = "ended"
        self.program.add(
            f"trailers {sid} {fields}", headers(sid, self.block(fields), end_stream=True)
        )

    def valid_step(self) -> None:
        draw = self.draw
        kinds = ["open", "settings", "window", "priority", "unknown", "ping-ack"]
        if self.ids("open"):
            kinds += ["data", "data", "trailers", "reset"]
        if self.ids("ended"):
            kinds += ["reset"]
        if self.pings < 1:
            kinds.append("ping")
        kind = draw(st.sampled_from(kinds))
        if kind == "open":
            self.open_stream()
        elif kind == "data":
            self.send_data(draw(st.sampled_from(self.ids("open"))))
        elif kind == "trailers":
            self.send_trailers(draw(st.sampled_from(self.ids("open"))))
        elif kind == "reset":
            sid = draw(st.sampled_from(self.ids("open", "ended")))
            code = draw(STREAM_ERRORS)
            self.streams[sid].state = "reset"
            self.program.add(f"RST_STREAM {sid} {code}", rst_stream(sid, code))
        elif kind == "settings":
            pairs = draw(st.lists(self.valid_setting(), max_size=3))
            self.program.add(f"SETTINGS {pairs}", settings(*pairs))
        elif kind == "window":
            sid = draw(st.sampled_from([0, *self.streams]))
            increment = draw(st.integers(1, 65535))
            self.program.add(f"WINDOW_UPDATE {sid} +{increment}", window_update(sid, increment))
        elif kind == "priority":
            sid = draw(st.sampled_from([*self.streams, self.idle_id()]))
            self.program.add(f"PRIORITY {sid}", frame(PRIORITY, 0, sid, self.dependency(sid)))
        elif kind == "unknown":
            kind_id = draw(UNKNOWN_TYPES)
            payload = draw(st.binary(max_size=16))
            sid = draw(st.integers(0, 2**31 - 1))
            flags = draw(st.integers(0, 255))
            self.program.add(
                f"unknown frame type {kind_id:#x} on {sid}", frame(kind_id, flags, sid, payload)
            )
        elif kind == "ping":
            self.pings += 1
            payload = draw(st.binary(min_size=8, max_size=8).filter(lambda p: p != SENTINEL))
            self.program.add("PING", ping(payload))
        else:
            self.program.add("PING ACK", ping(draw(st.binary(min_size=8, max_size=8)), ack=True))

    # -------------------------------------------------------------- the final step

    def random_frame(self) -> None:
        draw = self.draw
        kind = draw(st.one_of(st.integers(0, 9), UNKNOWN_TYPES))
        flags = draw(st.integers(0, 255))
        sid = self.some_stream()
        payload = draw(st.binary(max_size=40))
        sid = self.steer(kind, flags, sid, payload)
        self.program.add(
            f"random frame type {kind:#x} flags {flags:#x} on {sid}: {payload!r}",
            frame(kind, flags, sid, payload),
        )

    def violation(self, name: str) -> None:
        """One of the catalogue's shapes (the ``v_`` methods: frames the RFC refuses), its
        details random."""
        chunks = getattr(self, "v_" + name)()
        frames, _ = parse_frames(b"".join(chunks))
        self.program.add(f"{name}: " + ", ".join(str(f) for f in frames), *chunks)

    def open_or_idle(self) -> int:
        return self.draw(st.sampled_from([*self.ids("open"), self.idle_id()]))

    def with_valid_settings(self, bad: tuple[int, int]) -> list[bytes]:
        """SETTINGS with ``bad`` among valid pairs of other settings (a repeated one: see the
        module's docstring)."""
        pairs = self.draw(st.lists(self.valid_setting(), max_size=2))
        pairs = [(k, v) for k, v in pairs if k != bad[0]]
        pairs.insert(self.draw(st.integers(0, len(pairs))), bad)
        return [settings(*pairs)]

    def some_flags(self) -> int:
        """Random flags without bit 0 (ACK, END_STREAM)."""
        return self.draw(st.integers(0, 255)) & ~0x1

    def binary(self, lo: int = 0, hi: int = 16, but: int | None = None) -> bytes:
        return self.draw(st.binary(min_size=lo, max_size=hi).filter(lambda p: len(p) != but))

    def request_block(self) -> bytes:
        return self.block(grpc_request(SERVER_LIVE, "localhost"))

    # the catalogue

    def v_settings_enable_push(self) -> list[bytes]:
        return self.with_valid_settings((2, self.draw(st.integers(2, 2**32 - 1))))

    def v_settings_initial_window(self) -> list[bytes]:
        return self.with_valid_settings((4, self.draw(st.integers(2**31, 2**32 - 1))))

    def v_settings_frame_size_low(self) -> list[bytes]:
        return self.with_valid_settings((5, self.draw(st.integers(0, 16383))))

    def v_settings_frame_size_high(self) -> list[bytes]:
        return self.with_valid_settings((5, self.draw(st.integers(2**24, 2**32 - 1))))

    def v_settings_length(self) -> list[bytes]:
        payload = self.draw(st.binary(min_size=1, max_size=17).filter(lambda p: len(p) % 6))
        return [frame(SETTINGS, self.some_flags(), 0, payload)]

    def v_settings_ack_with_payload(self) -> list[bytes]:
        return [frame(SETTINGS, ACK, 0, self.binary(1, 12))]

    def v_settings_on_a_stream(self) -> list[bytes]:
        sid = self.draw(st.integers(1, 2**31 - 1))
        return [frame(SETTINGS, self.some_flags(), sid, bytes(6 * self.draw(st.integers(0, 2))))]

    def v_ping_length(self) -> list[bytes]:
        return [frame(PING, self.some_flags(), 0, self.binary(0, 16, but=8))]

    def v_ping_on_a_stream(self) -> list[bytes]:
        sid = self.draw(st.integers(1, 2**31 - 1))
        return [frame(PING, self.some_flags(), sid, self.binary(8, 8))]

    def v_window_update_0_on_the_connection(self) -> list[bytes]:
        return [window_update(0, 0)]

    def v_window_update_overflow_on_the_connection(self) -> list[bytes]:
        return [window_update(0, 2**31 - 1), window_update(0, self.draw(st.integers(1, 2**31 - 1)))]

    def v_window_update_length(self) -> list[bytes]:
        sid = self.draw(st.sampled_from([0, *self.ids("open")]))
        return [frame(WINDOW_UPDATE, 0, sid, self.binary(0, 8, but=4))]

    def v_window_update_0_on_a_stream(self) -> list[bytes]:
        return [window_update(self.open_or_idle(), 0)]

    def v_window_update_overflow_on_a_stream(self) -> list[bytes]:
        sid = self.draw(st.sampled_from(self.ids("open") or [0]))
        return [window_update(sid, 2**31 - 1), window_update(sid, 2**31 - 1)]

    def v_window_update_on_an_idle_stream(self) -> list[bytes]:
        return [window_update(self.idle_id(), self.draw(st.integers(1, 99)))]

    def v_rst_stream_on_stream_0(self) -> list[bytes]:
        return [rst_stream(0, self.draw(STREAM_ERRORS))]

    def v_rst_stream_length(self) -> list[bytes]:
        return [frame(RST_STREAM, 0, self.open_or_idle(), self.binary(0, 8, but=4))]

    def v_rst_stream_on_an_idle_stream(self) -> list[bytes]:
        # (once a stream was opened h2 ignores it: the module's docstring)
        return [rst_stream(self.idle_id() if not self.streams else 0, self.draw(STREAM_ERRORS))]

    def v_priority_on_stream_0(self) -> list[bytes]:
        return [frame(PRIORITY, 0, 0, self.dependency(0))]

    def v_priority_length(self) -> list[bytes]:
        sid = self.draw(st.sampled_from([0, *self.ids("open")]))
        return [frame(PRIORITY, 0, sid, self.binary(0, 9, but=5))]

    def v_goaway_on_a_stream(self) -> list[bytes]:
        sid = self.draw(st.integers(1, 2**31 - 1))
        return [frame(GOAWAY, 0, sid, self.binary(8, 16))]

    def v_push_promise(self) -> list[bytes]:
        promised = (self.idle_id() + 1).to_bytes(4, "big")
        return [frame(PUSH_PROMISE, END_HEADERS, self.open_or_idle(), promised)]

    def v_data_on_stream_0(self) -> list[bytes]:
        return [data(0, self.binary(0, 8), self.draw(st.booleans()))]

    def v_data_on_an_idle_stream(self) -> list[bytes]:
        return [data(self.idle_id(), self.binary(0, 8), self.draw(st.booleans()))]

    def v_data_padding(self) -> list[bytes]:
        open_ids = self.ids("open")
        if not open_ids:
            return [frame(DATA, PADDED, 0, b"\x01")]
        body = self.binary(0, 8)
        pad = len(body) + 1 + self.draw(st.integers(0, 3))
        flags = PADDED | self.draw(st.sampled_from([0, END_STREAM]))
        return [frame(DATA, flags, self.draw(st.sampled_from(open_ids)), bytes((pad,)) + body)]

    def v_headers_on_stream_0(self) -> list[bytes]:
        return [headers(0, self.request_block(), self.draw(st.booleans()))]

    def v_headers_on_an_even_stream(self) -> list[bytes]:
        return [headers(self.idle_id() + 1, self.request_block(), end_stream=True)]

    def v_headers_padding(self) -> list[bytes]:
        block = self.request_block()
        pad = len(block) + 1 + self.draw(st.integers(0, 3))
        flags = PADDED | END_HEADERS | self.draw(st.sampled_from([0, END_STREAM]))
        return [frame(HEADERS, flags, self.idle_id(), bytes((pad,)) + block)]

    def v_headers_priority_too_short(self) -> list[bytes]:
        return [frame(HEADERS, 0x20 | END_HEADERS, self.idle_id(), self.binary(0, 4))]

    def v_trailers_without_end_stream(self) -> list[bytes]:
        open_ids = self.ids("open")
        if not open_ids:
            return [headers(0, b"")]
        return [headers(self.draw(st.sampled_from(open_ids)), self.block([("x-trailer", "1")]))]

    def v_continuation_without_headers(self) -> list[bytes]:
        return [continuation(self.open_or_idle(), self.binary(0, 8), self.draw(st.booleans()))]

    def v_hpack(self) -> list[bytes]:
        """A request block made undecodable (RFC 7541): index 0, an index past any table, a
        size update after a field or over 4096, a literal past the block's end."""
        block = self.request_block()
        bad = self.draw(
            st.sampled_from(
                [
                    block + b"\x80",
                    block + b"\xff\x49",  # index 200
                    block + b"\x21",
                    b"\x3f\xe2\x1f" + block,  # size 4097
                    block + b"\x00\x05ab",
                    b"\x40\x7f",
                ]
            )
        )
        return [headers(self.idle_id(), bad, end_stream=True)]

    def v_priority_on_itself(self) -> list[bytes]:
        sid = self.draw(st.sampled_from([*self.streams, self.idle_id()]))
        return [priority(sid, depends_on=sid, weight=self.draw(st.integers(0, 255)))]

    def v_headers_priority_on_itself(self) -> list[bytes]:
        sid = self.idle_id()
        block = headers(sid, self.request_block(), priority=priority_fields(sid))
        return [block, data(sid, b"\0" * 5, end_stream=True)]

    def v_priority_length_not_open(self) -> list[bytes]:
        sid = self.draw(
            st.sampled_from([*self.ids("ended", "reset"), *self.skipped, self.idle_id()])
        )
        return [frame(PRIORITY, 0, sid, self.binary(0, 9, but=5))]

    def v_goaway_short(self) -> list[bytes]:
        return [frame(GOAWAY, 0, 0, self.binary(0, 7))]

    def v_data_on_a_closed_stream(self) -> list[bytes]:
        closed = [*self.ids("ended", "reset"), *self.skipped]
        sid = self.draw(st.sampled_from(closed)) if closed else self.idle_id()
        return [data(sid, self.binary(0, 8), self.draw(st.booleans()))]

    def v_headers_on_a_closed_stream(self) -> list[bytes]:
        closed = [*self.ids("ended", "reset"), *self.skipped]
        sid = self.draw(st.sampled_from(closed)) if closed else 0
        return [headers(sid, self.request_block(), self.draw(st.booleans()))]

    def v_headers_below_the_last_stream(self) -> list[bytes]:
        sid = self.draw(st.sampled_from(self.skipped)) if self.skipped else 0
        return [headers(sid, self.request_block(), end_stream=True)]

    def v_malformed_request(self) -> list[bytes]:
        sid = self.idle_id()
        fields = self.draw(MALFORMED)(grpc_request(SERVER_LIVE, "localhost"))
        return [headers(sid, self.block(fields)), data(sid, b"\0" * 5, end_stream=True)]

    def v_frame_too_large(self) -> list[bytes]:
        kind = self.draw(st.sampled_from([DATA, HEADERS, SETTINGS, PING, 0x30]))
        return [frame(kind, 0, 0, bytes(16385))]

    def garbled_headers(self) -> None:
        """A new stream's header block from the encoder with random octets, or random
        octets, possibly cut into CONTINUATION frames."""
        draw = self.draw
        sid = self.idle_id()
        block = self.block(grpc_request(SERVER_LIVE, "localhost"))
        noise = draw(st.binary(min_size=1, max_size=24))
        how = draw(st.sampled_from(["append", "prepend", "insert", "replace"]))
        at = draw(st.integers(0, len(block)))
        block = {
            "append": block + noise,
            "prepend": noise + block,
            "insert": block[:at] + noise + block[at:],
            "replace": noise,
        }[how]
        end = draw(st.booleans())
        if draw(st.booleans()) and len(block) > 1:
            cut = draw(st.integers(1, len(block) - 1))
            chunks = [
                headers(sid, block[:cut], end, end_headers=False),
                continuation(sid, block[cut:]),
            ]
        else:
            chunks = [headers(sid, block, end)]
        self.program.add(f"HEADERS {sid} with {noise!r} ({how})", *chunks)

    def interrupted_block(self) -> None:
        """HEADERS without END_HEADERS, then a frame that is not its CONTINUATION."""
        draw = self.draw
        sid = self.idle_id()
        block = self.block(grpc_request(SERVER_LIVE, "localhost"))
        cut = draw(st.integers(1, len(block) - 1))
        other = draw(
            st.sampled_from(
                [
                    ("CONTINUATION on another stream", continuation(sid + 2, block[cut:])),
                    ("CONTINUATION on stream 0", continuation(0, block[cut:])),
                    ("DATA", data(sid, b"\0" * 5)),
                    ("HEADERS", headers(sid + 2, block[cut:])),
                    ("PRIORITY", priority(sid)),
                    ("SETTINGS", settings()),
                    ("WINDOW_UPDATE", window_update(0, 1)),
                    ("RST_STREAM", rst_stream(sid, 8)),
                    ("unknown frame", frame(0x20, 0, 0, b"")),
                ]
            )
        )
        self.program.add(
            f"HEADERS {sid} without END_HEADERS, then {other[0]}",
            headers(sid, block[:cut], end_headers=False),
            other[1],
        )

    def oversized(self) -> None:
        draw = self.draw
        kind = draw(st.sampled_from([DATA, HEADERS, PRIORITY, SETTINGS, PING, 0x30]))
        sid = 0 if kind in (SETTINGS, PING) else self.some_stream() or 1
        self.program.add(f"{kind:#x} of 16385 octets on {sid}", frame(kind, 0, sid, bytes(16385)))

    def mutated(self) -> None:
        """A frame of a valid step with its type, flags, stream or length changed."""
        draw = self.draw
        before = len(self.program.chunks)
        model = ({k: Stream(v.state, v.left) for k, v in self.streams.items()}, self.highest)
        self.valid_step()
        self.streams, self.highest = model  # (the step's frame may no longer do what it did)
        frames, _ = parse_frames(b"".join(self.program.chunks[before:]))
        if not frames:
            return
        at = draw(st.integers(0, len(frames) - 1))
        f = frames[at]
        what = draw(st.sampled_from(["type", "flags", "stream", "truncate", "extend"]))
        kind, flags, sid, payload = f.type, f.flags, f.stream, f.payload
        if what == "type":
            kind = draw(st.sampled_from([t for t in range(10) if t != f.type]))
        elif what == "flags":
            flags = draw(st.integers(0, 255))
        elif what == "stream":
            sid = self.some_stream()
        elif what == "truncate":
            payload = payload[: draw(st.integers(0, len(payload)))]
        else:
            payload += draw(st.binary(min_size=1, max_size=8))
        sid = self.steer(kind, flags, sid, payload)
        frames[at] = Frame(kind, flags, sid, payload)
        del self.program.chunks[before:]
        self.program.steps[-1] += f", frame {at}'s {what} changed: {frames[at]}"
        self.program.chunks.extend(f.to_bytes() for f in frames[: at + 1])

    def final_step(self) -> None:
        """One of the catalogue's violations (most examples), nothing (about a sixth), or a
        random, garbled, interrupted, oversized or mutated frame."""
        others = ["random", "random", "garbled", "garbled", "interrupted", "oversized"]
        others += ["mutated", "mutated"]
        choice = self.draw(st.sampled_from([*VIOLATIONS, *others, *["none"] * 10]))
        event(f"final step: {choice}")
        if choice in VIOLATIONS:
            self.violation(choice)
        elif choice == "random":
            self.random_frame()
        elif choice == "garbled":
            self.garbled_headers()
        elif choice == "interrupted":
            self.interrupted_block()
        elif choice == "oversized":
            self.oversized()
        elif choice == "mutated":
            self.mutated()

    # -------------------------------------------------------------- known engine gaps

    def gap_step(self) -> None:
        """A frame of the known gap: WINDOW_UPDATE on an even (server) stream id below the
        client's highest, idle (RFC 9113 §5.1): h2 refuses it, tritonx ignores it."""
        if self.highest < 3:
            self.open_stream()
            self.open_stream()
        sid = self.draw(st.sampled_from(range(2, self.highest, 2)))
        increment = self.draw(st.integers(1, 2**31 - 1))
        self.program.add(f"WINDOW_UPDATE on idle stream {sid}", window_update(sid, increment))


#: the names of the catalogue's violations
VIOLATIONS = sorted(name[2:] for name in dir(Builder) if name.startswith("v_"))


def _malformed(change: str, value: str) -> Any:
    def apply(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if change == "add":
            name, _, val = value.partition("=")
            return [*fields, (name, val)]
        if change == "drop":
            return [(n, v) for n, v in fields if n != value]
        if change == "first":
            name, _, val = value.partition("=")
            return [(name, val), *fields]
        name, _, val = value.partition("=")  # "set"
        return [(n, val if n == name else v) for n, v in fields]

    return apply


MALFORMED = st.sampled_from(
    [
        _malformed("add", "X-Upper=1"),
        _malformed("add", "connection=close"),
        _malformed("add", "transfer-encoding=chunked"),
        _malformed("set", "te=gzip"),
        _malformed("add", ":unknown=1"),
        _malformed("add", ":status=200"),
        _malformed("add", ":method=POST"),
        _malformed("drop", ":method"),
        _malformed("drop", ":scheme"),
        _malformed("drop", ":path"),
        _malformed("set", ":path="),
        _malformed("first", "x-first=1"),
        _malformed("add", "content-length=1"),
        _malformed("add", "x-bad=a\nb"),
        _malformed("add", "x bad=1"),
    ]
)


@st.composite
def programs(draw: Any, gap: bool = False) -> Program:
    builder = Builder(draw)
    builder.start()
    for _ in range(draw(st.integers(0, 10))):
        builder.valid_step()
    if gap:
        builder.gap_step()
    else:
        builder.final_step()
    return builder.program


# ---------------------------------------------------------------------------- the two sides


@dataclass
class Verdict:
    """What a side answered: ``error`` (a connection or stream error), in words."""

    error: bool
    detail: str


def h2_verdict(wire: bytes, validate: bool = True) -> Verdict:
    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=False, validate_inbound_headers=validate)
    )
    conn.initiate_connection()
    conn.data_to_send()
    try:
        conn.receive_data(wire)
    except h2.exceptions.ProtocolError as exc:
        return Verdict(True, f"h2 raised {type(exc).__name__}: {exc}")
    resets = [f for f in parse_frames(conn.data_to_send())[0] if f.type in (RST_STREAM, GOAWAY)]
    if resets:
        return Verdict(True, "h2 wrote " + ", ".join(str(f) for f in resets))
    return Verdict(False, "h2 took every frame")


def tritonx_verdict(port: int, wire: bytes) -> Verdict:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    sock.settimeout(READ_TIMEOUT)
    try:
        try:
            sock.sendall(wire)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buffer = b""
        seen: list[str] = []
        errors: list[str] = []
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            except TimeoutError:
                raise AssertionError(
                    f"tritonx sent nothing for {READ_TIMEOUT} s; read {seen}"
                ) from None
            if not chunk:
                return Verdict(True, f"tritonx closed the connection; read {seen}")
            buffer += chunk
            frames, buffer = parse_frames(buffer)
            for f in frames:
                seen.append(str(f))
                if f.type == RST_STREAM and f.error_code != NO_ERROR:
                    errors.append(str(f))
                if f.type == GOAWAY:
                    return Verdict(f.error_code != NO_ERROR, f"tritonx sent {f}; read {seen}")
                if f.type == PING and f.flags & ACK and f.payload == SENTINEL:
                    return Verdict(bool(errors), f"tritonx answered the PING; read {seen}")
    finally:
        sock.close()


def check(port: int, program: Program) -> None:
    wire = program.wire
    reference = h2_verdict(wire)
    answer = tritonx_verdict(port, wire)
    verdicts = f"h2 {'refuses' if reference.error else 'takes'}, "
    event(verdicts + f"tritonx {'refuses' if answer.error else 'takes'}")
    if reference.error != answer.error:
        pytest.fail(f"{reference.detail}\nbut {answer.detail}\n{program}")


@fuzz_settings(shrink=True)
@given(program=programs())
def test_differential(h2_port: int, program: Program) -> None:
    """tritonx errs where ``h2`` does, and nowhere else."""
    check(h2_port, program)


@fuzz_settings(shrink=SHRINK)
@given(program=programs(gap=True))
def test_differential_known_gaps(h2_port: int, program: Program) -> None:
    """Programs that end in what was the engine's gap (WINDOW_UPDATE on an idle even stream
    below the client's last one): h2 refuses it, and so must the engine."""
    check(h2_port, program)
