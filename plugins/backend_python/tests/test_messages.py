"""The messages between the server and worker processes survive the wire unchanged, their
shared-memory segments' descriptors beside them."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from tritonx_backend_python import _ipc
from tritonx_backend_python import messages as m

TENSORS = [(((0, "IN"), "FP32", (2,), b"\x00" * 8))]
WIRE = (None, [("OUT", "INT32", (1,), b"\x01\x00\x00\x00")], None, "{}")

EXAMPLES: list[m.Message] = [
    m.Init("/m/1/model.py", {"model_name": "m"}, True, "prefix_"),
    m.AutoComplete("/m/1/model.py", '{"name": "m"}'),
    m.Execute(7, None, TENSORS, [(7, "id", 0, 1, 2, "{}", ["OUT"])]),
    m.Finalize(),
    m.BlsReply(3, WIRE, True),
    m.RpcReply(4, 1.5, None),
    m.Ready(1234, True),
    m.InitFailed("RuntimeError: x", "Traceback ..."),
    m.AutoCompleted('{"name": "m"}', None),
    m.Finalized(),
    m.Done(7, None, TENSORS, [(None, "{}"), (("bad", 3), "{}")], None, 3),
    m.Send(8, None, True),
    m.BlsCall(5, "other", -1, None, [], ["OUT"], "rid", "corr", 0, 0, "{}", False, 7),
    m.RpcCall(6, "load", {"model_name": "other"}),
    m.Log(2, "a line"),
    m.NewMetricFamily("family", "what it counts", 0),
    m.MetricUpdate("family", (("model", "m"),), "increment", 1.0),
    m.ReadyCheck(5),
    m.ReadyAnswer(5, "is_ready() returned False"),
]


def test_every_kind_round_trips() -> None:
    assert {type(e) for e in EXAMPLES} == set(m.KINDS)
    for message in EXAMPLES:
        back = m.loads(m.dumps(message))
        assert type(back) is type(message)
        assert back == message


def test_every_message_class_is_registered() -> None:
    # (dataclass(slots=True) replaces each class: compare names)
    subclasses = {cls.__name__ for cls in m.Message.__subclasses__()}
    assert subclasses == {cls.__name__ for cls in m.KINDS}
    assert [cls.wire_tag for cls in m.KINDS] == list(range(len(m.KINDS)))


def test_responses_round_trip() -> None:
    from tritonx_backend_python import pb_utils

    writer = _ipc.ShmWriter("tritonx_test_messages_", "t")
    a, b = socket.socketpair()
    ours, theirs = _ipc.Channel(a.detach()), _ipc.Channel(b.detach())
    try:
        big = np.arange(100_000, dtype=np.float32)  # over the inline limit: a segment
        response = pb_utils.InferenceResponse(
            [pb_utils.Tensor("A", big), pb_utils.Tensor("B", np.array([b"x"], dtype=object))],
            parameters={"k": "v"},
        )
        wire = m.encode_response(response, writer)
        assert wire is not None and wire[0] is not None
        m.send(ours, m.Send(1, wire, False))
        sent = m.recv(theirs)
        assert isinstance(sent, m.Send) and sent.response is not None
        back = m.decode_response(sent.response)
        np.testing.assert_array_equal(back.output_tensors()[0].as_numpy(), big)
        assert back.output_tensors()[1].as_numpy().tolist() == [b"x"]
        assert back.parameters() == '{"k": "v"}'
        assert m.encode_response(None, writer) is None
        # without its descriptor (or with one it has no segment for) a message is refused
        with pytest.raises(ValueError, match="came with 0 descriptors for 1 shared-memory"):
            m.loads(m.dumps(m.Send(1, m.encode_response(response, writer), False)))
        ours.send_bytes(m.dumps(m.Finalize()), (theirs.fileno(),))
        with pytest.raises(ValueError, match="came with 1 descriptors for 0 shared-memory"):
            m.recv(theirs)
    finally:
        ours.close()
        theirs.close()
        writer.cleanup()
