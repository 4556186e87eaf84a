"""A :class:`Channel`: one end of a Unix socket pair carrying length-prefixed messages, each
with the file descriptors that go with it (``SCM_RIGHTS``).

Part of what crosses between the server and a worker (:mod:`tritonx_backend_python._ipc`,
which re-exports these names): the data socket and the control socket of a worker are each a
channel at both ends. Needs only the standard library: worker processes import it,
including ones running in another interpreter (``EXECUTION_ENV_PATH``).
"""

from __future__ import annotations

import array as _array
import collections
import os
import select
import socket
import struct
from collections.abc import Iterable, Sequence

#: A message's header: its length and how many descriptors came with it.
_HEAD = struct.Struct("!IB")
#: The most descriptors one message may carry (messages carry at most one segment).
MAX_FDS = 4
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * _array.array("i").itemsize)
#: Received descriptors are close-on-exec at once (a model that starts a program leaks none).
_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


def close_fds(fds: Iterable[int]) -> None:
    """Close descriptors nobody will use."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """One end of a Unix socket carrying length-prefixed messages, each with the descriptors
    that go with it (``SCM_RIGHTS``), with the fewest system calls: a message is one write
    and, when small, one read (what arrives beyond it is kept for the next one). One thread
    sends and one receives at a time.

    Works on a blocking or a non-blocking socket (an event loop watching a duplicate of the
    descriptor makes it non-blocking); :meth:`recv_ready` is the event loop's non-blocking
    read. The descriptors of a message arrive with its first bytes, in the order the
    messages were sent: the channel queues them and hands each message its own.
    """

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._fd = fd
        self._buffer = b""
        #: descriptors received and not yet handed out with their message
        self._fds: collections.deque[int] = collections.deque()

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._fd

    def send_bytes(self, data: bytes, fds: Sequence[int] = ()) -> None:
        """Send one message with ``fds`` (duplicated into the receiver; the caller keeps and
        closes its own). Raises OSError once the peer is gone."""
        if self._fd < 0:
            raise OSError("the channel is closed")
        if len(fds) > MAX_FDS:
            raise ValueError(f"a message carries at most {MAX_FDS} descriptors")
        view = memoryview(_HEAD.pack(len(data), len(fds)) + data)
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _array.array("i", fds))]
            while True:
                try:
                    view = view[self._sock.sendmsg([view], rights) :]
                    break
                except BlockingIOError:
                    select.select([], [self._fd], [])
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # a non-blocking socket whose buffer is full
                select.select([], [self._fd], [])

    def poll(self, timeout: float | None = None) -> bool:
        """Whether a message (or the end) can be read within ``timeout`` seconds."""
        if self._buffer:
            return True
        if self._fd < 0:
            raise OSError("the channel is closed")
        ready, _, _ = select.select([self._fd], [], [], timeout)
        return bool(ready)

    def _recv(self) -> bytes:
        """What one read returns (the descriptors that came with it are queued); raises
        BlockingIOError on a non-blocking socket with nothing to read."""
        chunk, ancillary, _flags, _ = self._sock.recvmsg(1 << 16, _ANCILLARY, _RECV_FLAGS)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = _array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self._fds.extend(fds)
        if not chunk:
            raise EOFError("the peer closed the channel")
        return chunk

    def _read(self) -> bytes:
        while True:
            try:
                return self._recv()
            except BlockingIOError:  # a non-blocking socket: wait for the bytes
                select.select([self._fd], [], [])

    def _take(self, buffer: bytes) -> tuple[bytes, list[int]] | None:
        """The first message of ``buffer`` and its descriptors, if it is complete (the rest is
        kept)."""
        if len(buffer) < _HEAD.size:
            self._buffer = buffer
            return None
        size, count = _HEAD.unpack_from(buffer)
        end = _HEAD.size + size
        if len(buffer) < end:
            self._buffer = buffer
            return None
        self._buffer = buffer[end:]
        if count > len(self._fds):  # lost on the way (never, unless the peer is broken)
            close_fds(self._fds)
            self._fds.clear()
            raise ValueError(f"a message announced {count} descriptors that did not arrive")
        return buffer[_HEAD.size : end], [self._fds.popleft() for _ in range(count)]

    def recv(self) -> tuple[bytes, list[int]]:
        """The next message and the descriptors that came with it (the caller's to close).

        :raises EOFError: the peer is gone.
        """
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer or self._read()
        while len(buffer) < _HEAD.size:
            buffer += self._read()
        end = _HEAD.size + _HEAD.unpack_from(buffer)[0]
        if len(buffer) < end:
            parts = [buffer]
            have = len(buffer)
            while have < end:
                chunk = self._read()
                parts.append(chunk)
                have += len(chunk)
            buffer = b"".join(parts)
        message = self._take(buffer)
        assert message is not None
        return message

    def recv_bytes(self) -> bytes:
        """The next message, for messages that carry no descriptor (any that came is closed).

        :raises EOFError: the peer is gone.
        """
        data, fds = self.recv()
        close_fds(fds)
        return data

    def recv_ready(self) -> tuple[bytes, list[int]] | None:
        """The next message and its descriptors if the bytes that can be read without
        waiting complete it, else None (what arrived is kept: call again when the socket is
        readable).

        :raises EOFError: the peer is gone.
        """
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer
        while True:
            message = self._take(buffer)
            if message is not None:
                return message
            try:
                chunk = self._recv()
            except BlockingIOError:
                return None
            except EOFError:
                self._buffer = buffer
                raise
            buffer = buffer + chunk if buffer else chunk

    def close(self) -> None:
        """Close the socket (and descriptors received for messages nobody read)."""
        if self._fd < 0:
            return
        self._fd = -1
        self._sock.close()
        close_fds(self._fds)
        self._fds.clear()
