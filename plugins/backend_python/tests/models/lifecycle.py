"""Shows and controls its worker process, for the recovery and cancellation tests.

The config parameter STATE_DIR names a folder. ``initialize`` appends "<time> <pid>" to
STATE_DIR/starts and writes the pid to STATE_DIR/<instance name>.pid; while
STATE_DIR/crash_initialize exists it then exits (os._exit(5)), while STATE_DIR/slow_initialize
exists it first sleeps as many seconds as that file says, and while STATE_DIR/hold_initialize
exists it waits.

COMMAND (BYTES [1]) says what execute does; PID (INT64 [1]) answers the worker's pid and
SAW_CANCEL (BOOL [1]) whether ``request.is_cancelled()`` turned true:
"pid"; "sleep:<s>"; "hang" (sleeps an hour); "exit" (sys.exit(3)); "os_exit" (os._exit(4));
"segv" (reads address 0); "kill" (SIGKILL to itself); "garbage" (writes a length-prefixed
message that is no pickle to its data socket, the socket no other thread of the worker is
blocked reading, then sleeps an hour); "fork:<s>" (forks a child that holds
the worker's files for <s> seconds, writes its pid to STATE_DIR/child.pid, then sleeps <s>
seconds too); "wait_cancel:<s>" (polls
``is_cancelled()`` for up to <s> seconds after touching STATE_DIR/waiting, touches
STATE_DIR/saw_cancel when it turns true).
"""

import ctypes
import json
import os
import signal
import stat
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.state = Path(config["parameters"]["STATE_DIR"]["string_value"])
        with open(self.state / "starts", "a") as starts:
            starts.write(f"{time.time()} {os.getpid()}\n")
        slow = self.state / "slow_initialize"
        if slow.exists():
            time.sleep(float(slow.read_text() or "2"))
        while (self.state / "hold_initialize").exists():  # until the test lets it go on
            time.sleep(0.02)
        (self.state / f"{args['model_instance_name']}.pid").write_text(str(os.getpid()))
        if (self.state / "crash_initialize").exists():
            os._exit(5)

    def execute(self, requests):
        responses = []
        for request in requests:
            command = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy()
            what, _, arg = command.reshape(-1)[0].decode().partition(":")
            saw_cancel = False
            if what == "sleep":
                time.sleep(float(arg))
            elif what == "hang":
                time.sleep(3600)
            elif what == "exit":
                sys.exit(3)
            elif what == "os_exit":
                os._exit(4)
            elif what == "segv":
                ctypes.string_at(0)
            elif what == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif what == "garbage":
                read_by_others = set()  # Linux: a blocked thread's syscall number and args
                for tid in os.listdir("/proc/self/task"):
                    if int(tid) != threading.get_native_id():
                        call = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
                        if call[0] in ("0", "45", "47"):  # read, recvfrom, recvmsg
                            read_by_others.add(int(call[1], 16))
                for fd in map(int, os.listdir("/proc/self/fd")):
                    try:
                        if stat.S_ISSOCK(os.fstat(fd).st_mode) and fd not in read_by_others:
                            # a whole frame (length, no descriptors) that is no pickle
                            os.write(fd, struct.pack("!IB", 8, 0) + b"\x00garbage")
                    except OSError:
                        pass
                time.sleep(3600)
            elif what == "fork":
                child = os.fork()
                if child == 0:
                    time.sleep(float(arg))
                    os._exit(0)
                (self.state / "child.pid").write_text(str(child))
                time.sleep(float(arg))
            elif what == "wait_cancel":
                (self.state / "waiting").touch()
                deadline = time.monotonic() + float(arg)
                while time.monotonic() < deadline:
                    if request.is_cancelled():
                        saw_cancel = True
                        (self.state / "saw_cancel").touch()
                        break
                    time.sleep(0.01)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
                        pb_utils.Tensor("SAW_CANCEL", np.array([saw_cancel])),
                    ]
                )
            )
        return responses
