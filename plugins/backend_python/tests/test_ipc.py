"""Shared-memory segments between processes (here both ends in one process): a writer keeps
its segments and reuses one only once the arrays built on its last message are gone; past
its limit it falls back to one-off segments, and a larger message replaces free smaller
segments."""

from __future__ import annotations

import gc
import glob
import os
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
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[_ipc.ShmWriter]:
    w = _ipc.ShmWriter(f"tritonx_test_ipc_{os.getpid()}_", tmp_path.name)
    yield w
    w.cleanup()
    assert not files(w)


def files(writer: _ipc.ShmWriter) -> set[str]:
    return set(glob.glob(writer.pattern()))


def send(writer: _ipc.ShmWriter, *arrays: np.ndarray) -> list[np.ndarray]:
    """Pack ``arrays`` as one message and unpack it, as the receiving process would."""
    tensors = [(f"T{i}", a, _ipc.datatype_of(a)) for i, a in enumerate(arrays)]
    segment, descs = _ipc.pack_tensors(tensors, writer)
    assert segment is not None
    return [array for _, array, _ in _ipc.unpack_tensors(segment, descs)]


def test_a_segment_is_reused_only_when_its_arrays_are_gone(writer: _ipc.ShmWriter) -> None:
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


def test_mixed_tensors_and_writes_into_received_arrays(writer: _ipc.ShmWriter) -> None:
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


def test_past_the_limit_messages_use_one_off_segments(writer: _ipc.ShmWriter) -> None:
    per_message = 4 * MIB
    count = _ipc.POOL_LIMIT // per_message + 4  # more held at once than the pool holds
    held = [send(writer, np.full(MIB, float(i), dtype=np.float32))[0] for i in range(count)]
    for i, array in enumerate(held):
        assert array[0] == i and array[-1] == i
    # the kept ones fill the pool; the others were unlinked as soon as they were mapped
    assert len(files(writer)) == _ipc.POOL_LIMIT // per_message
    del held, array
    gc.collect()
    # every kept segment is free again: the next messages reuse them, nothing new appears
    before = files(writer)
    for i in range(3):
        assert send(writer, np.full(MIB, float(i), dtype=np.float32))[0][5] == i
    assert files(writer) == before


def test_a_larger_message_replaces_free_smaller_segments(writer: _ipc.ShmWriter) -> None:
    small = np.ones(MIB // 4, dtype=np.float32)  # 1 MiB: the smallest kept segment
    held = [send(writer, small)[0] for _ in range(_ipc.POOL_LIMIT // MIB)]
    assert len(files(writer)) == _ipc.POOL_LIMIT // MIB  # the pool is full
    del held
    gc.collect()
    big = np.arange(8 * MIB, dtype=np.float32)  # 32 MiB
    np.testing.assert_array_equal(send(writer, big)[0], big)
    # 32 of the free 1 MiB segments made room for one of 32 MiB
    assert len(files(writer)) == _ipc.POOL_LIMIT // MIB - 32 + 1


@pytest.mark.parametrize("name", ["../x_k0", "/tmp/x_1", "sub/x_k1", ".hidden_2", ""])
def test_a_segment_name_that_is_not_a_plain_file_name_is_refused(tmp_path: Path, name: str) -> None:
    # a worker names the segments it sends; the server opens, maps and (one-off) unlinks
    # them: a name must not reach a file outside the shared-memory folder
    victim = tmp_path / "victim"
    victim.write_bytes(b"\0" * 4096)
    descs = [("T", "UINT8", (4096,), (0, 4096))]
    with pytest.raises(ValueError, match="invalid shared-memory segment name"):
        _ipc.unpack_tensors(name, descs)
    with pytest.raises(ValueError, match="invalid shared-memory segment name"):
        _ipc.unlink_segment(name)
    assert victim.read_bytes() == b"\0" * 4096


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
    whole = struct.pack("!I", 5) + b"hello" + struct.pack("!I", 3) + b"abc"
    with socket.socket(fileno=os.dup(theirs.fileno())) as raw:
        raw.sendall(whole[:2])
        assert ours.recv_ready() is None
        raw.sendall(whole[2:6])
        assert ours.recv_ready() is None
        raw.sendall(whole[6:])
    assert ours.recv_ready() == b"hello"
    assert ours.recv_ready() == b"abc"
    assert ours.recv_ready() is None
    theirs.close()
    with pytest.raises(EOFError):
        ours.recv_ready()
