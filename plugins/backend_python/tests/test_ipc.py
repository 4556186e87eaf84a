"""Shared-memory segments between processes (here both ends in one process, through a real
socket pair): a writer keeps its segments and reuses one only once the arrays built on its
last message are gone; past its limit it falls back to one-off segments, and a larger message
replaces free smaller segments. Segments are nameless (``memfd``): their descriptors go
beside the messages, and what a process holds of them is seen in ``/proc/self``."""

from __future__ import annotations

import gc
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonx_backend_python import _ipc

MIB = 1 << 20
pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def held_segments(prefix: str) -> set[str]:
    """The names of the segments this process holds a descriptor of or maps (``/memfd:``
    entries of ``/proc/self/fd`` and ``/proc/self/maps``) that start with ``prefix``."""
    found: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6:
            found.add(parts[5])
    marker = f"/memfd:{prefix}"
    return {p.removesuffix(" (deleted)")[7:] for p in found if p.startswith(marker)}


Pipe = tuple[_ipc.Channel, _ipc.Channel]


class Writer(_ipc.ShmWriter):
    """A writer and the socket pair its messages cross (this process is both ends)."""

    def __init__(self, prefix: str, tag: str, pipe: Pipe) -> None:
        super().__init__(prefix, tag)
        self.pipe = pipe


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    """Both ends of a socket pair."""
    a, b = socket.socketpair()
    ours, theirs = _ipc.Channel(a.detach()), _ipc.Channel(b.detach())
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.fixture
def writer(tmp_path: Path, pipe: Pipe) -> Iterator[Writer]:
    w = Writer(f"tritonx_test_ipc_{os.getpid()}_", tmp_path.name, pipe)
    yield w
    gc.collect()
    w.cleanup()
    # nothing of the writer is left: no descriptor, no mapping (kept or one-off)
    assert not held_segments(f"{w.prefix}{w.tag}_")


def files(writer: Writer) -> set[str]:
    """The writer's kept segments (each one this process holds too)."""
    kept = set(writer.kept())
    assert kept <= held_segments(f"{writer.prefix}{writer.tag}_")
    return kept


def transfer(segment: _ipc.Segment | None, pipe: Pipe) -> _ipc.Segment:
    """``segment`` as its receiver gets it: through the wire, its descriptor beside it."""
    assert segment is not None
    ours, theirs = pipe
    ours.send_bytes(pickle.dumps(segment), (segment.descriptor(),))
    segment.sent()
    data, fds = theirs.recv()
    received: _ipc.Segment = pickle.loads(data)
    received.attach(fds[0])
    return received


def send(writer: Writer, *arrays: np.ndarray) -> list[np.ndarray]:
    """Pack ``arrays`` as one message and unpack it, as the receiving process would."""
    tensors = [(f"T{i}", a, _ipc.datatype_of(a)) for i, a in enumerate(arrays)]
    segment, descs = _ipc.pack_tensors(tensors, writer)
    received = transfer(segment, writer.pipe)
    return [array for _, array, _ in _ipc.unpack_tensors(received, descs)]


def test_a_segment_is_reused_only_when_its_arrays_are_gone(writer: Writer) -> None:
    first = np.full(MIB, 1.0, dtype=np.float32)  # 4 MiB
    held = send(writer, first)[0]
    kept = files(writer)
    assert len(kept) == 1
    for value in range(2, 6):
        out = send(writer, np.full(MIB, float(value), dtype=np.float32))[0]
        assert out[0] == value and out[-1] == value
        del out
        np.testing.assert_array_equal(held, first)  # never overwritten while held
    assert len(files(writer)) == 2  # the held one and one reused for every other message
    view = held[10:20]  # a view keeps the message's segment too
    del held
    gc.collect()
    send(writer, np.zeros(MIB, dtype=np.float32))
    assert view.tolist() == [1.0] * 10
    del view
    assert len(files(writer)) == 2


def test_mixed_tensors_and_writes_into_received_arrays(writer: Writer) -> None:
    ints = np.arange(300_000, dtype=np.int64).reshape(1000, 300)
    halves = np.linspace(0, 1, 40_000, dtype=np.float16)
    words = np.array([b"a", b"\x00bc", "d\u00e9"], dtype=object)
    out = send(writer, ints, halves, words)
    np.testing.assert_array_equal(out[0], ints)
    np.testing.assert_array_equal(out[1], halves)
    assert out[2].tolist() == [b"a", b"\x00bc", "d\u00e9".encode()]
    out[0][:] = -1  # the receiver may write into its inputs; the sender's array is its own
    assert ints[0, 1] == 1
    del out
    again = send(writer, ints)[0]  # the same segment, rewritten
    np.testing.assert_array_equal(again, ints)


def test_past_the_limit_messages_use_one_off_segments(writer: Writer) -> None:
    per_message = 4 * MIB
    count = _ipc.POOL_LIMIT // per_message + 4  # more held at once than the pool holds
    held = [send(writer, np.full(MIB, float(i), dtype=np.float32))[0] for i in range(count)]
    for i, array in enumerate(held):
        assert array[0] == i and array[-1] == i
    # the kept ones fill the pool; the others are one-off segments (only the receiver's
    # mappings hold them)
    assert len(files(writer)) == _ipc.POOL_LIMIT // per_message
    del held, array
    gc.collect()
    # every kept segment is free again: the next messages reuse them, nothing new appears
    before = files(writer)
    for i in range(3):
        assert send(writer, np.full(MIB, float(i), dtype=np.float32))[0][5] == i
    assert files(writer) == before


def test_a_larger_message_replaces_free_smaller_segments(writer: Writer) -> None:
    small = np.ones(MIB // 4, dtype=np.float32)  # 1 MiB: the smallest kept segment
    held = [send(writer, small)[0] for _ in range(_ipc.POOL_LIMIT // MIB)]
    assert len(files(writer)) == _ipc.POOL_LIMIT // MIB  # the pool is full
    del held
    gc.collect()
    big = np.arange(8 * MIB, dtype=np.float32)  # 32 MiB
    np.testing.assert_array_equal(send(writer, big)[0], big)
    # 32 of the free 1 MiB segments made room for one of 32 MiB
    assert len(files(writer)) == _ipc.POOL_LIMIT // MIB - 32 + 1


def test_a_segment_without_its_descriptor_is_refused() -> None:
    # what arrives is a descriptor, never a name: a segment whose descriptor did not come
    # with its message cannot be read, nor can another writer's be guessed
    descs = [("T", "UINT8", (4096,), (0, 4096))]
    for number in (0, -1):
        with pytest.raises(ValueError, match="came without its descriptor"):
            _ipc.unpack_tensors(_ipc.Segment("someone", number), descs)


@pytest.mark.skipif(not hasattr(os, "MFD_ALLOW_SEALING"), reason="needs sealed memfds")
def test_only_sealed_segments_are_mapped(writer: Writer, tmp_path: Path) -> None:
    """Neither side can resize a segment under the other's mapping (a shrunk one would kill
    the reader with SIGBUS), and a receiver maps nothing else: a file, or a memfd whose size
    is not sealed, is refused."""
    data = np.ones(MIB, dtype=np.float32)
    for count in (MIB, _ipc.POOL_LIMIT // 4 + 1):  # a kept segment, a one-off one
        segment, descs = _ipc.pack_tensors([("T", data[:1].repeat(count), "FP32")], writer)
        received = transfer(segment, writer.pipe)
        fd = received.take()  # (the receiver's copy, handed back below)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        again = _ipc.Segment(received.tag, received.number)
        again.attach(fd)
        assert _ipc.unpack_tensors(again, descs)[0][1][-1] == 1.0
    descs = [("T", "UINT8", (4096,), (0, 4096))]
    unsealed = os.memfd_create("tritonx_test_unsealed", os.MFD_ALLOW_SEALING)
    plain = os.open(tmp_path, os.O_TMPFILE | os.O_RDWR)
    for fd in (unsealed, plain):
        os.ftruncate(fd, _ipc.POOL_MIN)
        for number in (0, -1):
            segment = _ipc.Segment("someone", number)
            segment.attach(os.dup(fd))
            with pytest.raises(ValueError, match="not a sealed memfd"):
                _ipc.unpack_tensors(segment, descs)
        os.close(fd)


def test_descriptors_reach_their_own_messages(pipe: tuple[_ipc.Channel, _ipc.Channel]) -> None:
    """Messages with and without descriptors, read in one go or in parts: each message gets
    the descriptors sent with it."""
    ours, theirs = pipe
    files = [os.memfd_create(f"tritonx_test_order_{i}") for i in range(3)]
    try:
        for i, fd in enumerate(files):
            os.write(fd, bytes([i]))
        ours.send_bytes(b"a", (files[0],))
        ours.send_bytes(b"b")
        ours.send_bytes(b"c" * 200_000, (files[1], files[2]))
        ours.send_bytes(b"d")
        received = [theirs.recv() for _ in range(4)]
    finally:
        _ipc.close_fds(files)
    assert [(data[:1], len(fds)) for data, fds in received] == [
        (b"a", 1),
        (b"b", 0),
        (b"c", 2),
        (b"d", 0),
    ]
    got = [fd for _, fds in received for fd in fds]
    try:
        assert [os.pread(fd, 1, 0) for fd in got] == [b"\x00", b"\x01", b"\x02"]
    finally:
        _ipc.close_fds(got)


def test_a_message_nobody_reads_gives_its_segment_back(writer: Writer) -> None:
    """A kept segment whose message is dropped (unsent, or received and never unpacked) is
    free again for the next message; a one-off one's descriptor is closed."""
    data = np.ones(MIB, dtype=np.float32)
    segment, _ = _ipc.pack_tensors([("T", data, "FP32")], writer)
    assert segment is not None and segment.kept
    segment.discard()  # never sent
    again, descs = _ipc.pack_tensors([("T", data, "FP32")], writer)
    assert again == segment  # the same kept segment
    received = transfer(again, writer.pipe)
    del received  # arrived, never read: given back when dropped
    gc.collect()
    third, descs = _ipc.pack_tensors([("T", data * 3, "FP32")], writer)
    assert third == segment
    out = _ipc.unpack_tensors(transfer(third, writer.pipe), descs)
    assert out[0][1][0] == 3.0
    assert len(files(writer)) == 1
    # one-off segments: past the pool (a message larger than it), dropped either way
    big = np.zeros(_ipc.POOL_LIMIT // 4 + 1, dtype=np.float32)
    before = set(os.listdir("/proc/self/fd"))
    once, _ = _ipc.pack_tensors([("T", big, "FP32")], writer)
    assert once is not None and not once.kept
    once.discard()
    received = transfer(_ipc.pack_tensors([("T", big, "FP32")], writer)[0], writer.pipe)
    del received
    gc.collect()
    assert set(os.listdir("/proc/self/fd")) <= before


# ---------------------------------------------------------------------- the data channel


@pytest.fixture
def channels() -> Iterator[tuple[_ipc.Channel, _ipc.Channel]]:
    """Both ends of a socket pair; the first one non-blocking (as an event loop that watches
    a duplicate of the worker's data socket leaves it)."""
    a, b = socket.socketpair()
    os.set_blocking(a.fileno(), False)
    ours, theirs = _ipc.Channel(a.detach()), _ipc.Channel(b.detach())
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_non_blocking_channel_still_sends_and_receives_whole_messages(
    channels: tuple[_ipc.Channel, _ipc.Channel],
) -> None:
    """A message larger than the socket's buffer leaves in parts while the peer reads
    slowly, and a read waits for a message sent later (the instance thread's path)."""
    ours, theirs = channels
    big = os.urandom(3 << 20)

    def peer() -> None:
        assert theirs.recv_bytes() == big
        time.sleep(0.2)
        theirs.send_bytes(b"later")

    thread = threading.Thread(target=peer)
    thread.start()
    ours.send_bytes(big)
    assert ours.recv_bytes() == b"later"
    thread.join()


def test_recv_ready_returns_a_message_only_once_it_is_complete(
    channels: tuple[_ipc.Channel, _ipc.Channel],
) -> None:
    """The event loop's read: None while a message is incomplete (its bytes kept), the
    message once the rest arrived, the next one kept for later; EOFError when the peer is
    gone."""
    ours, theirs = channels
    assert ours.recv_ready() is None
    whole = struct.pack("!IB", 5, 0) + b"hello" + struct.pack("!IB", 3, 0) + b"abc"
    with socket.socket(fileno=os.dup(theirs.fileno())) as raw:
        raw.sendall(whole[:2])
        assert ours.recv_ready() is None
        raw.sendall(whole[2:7])
        assert ours.recv_ready() is None
        raw.sendall(whole[7:])
    assert ours.recv_ready() == (b"hello", [])
    assert ours.recv_ready() == (b"abc", [])
    assert ours.recv_ready() is None
    theirs.close()
    with pytest.raises(EOFError):
        ours.recv_ready()
