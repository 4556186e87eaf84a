"""The tritonserver flags ``tritonx serve`` recognises and refuses, each with its reason
(:func:`tritonx._runtime.cli_options.serve_options` adds them as hidden options that refuse)."""

from __future__ import annotations

_NO_GPU = "no GPU support verified: "
_PLUGINS = (
    "plugins are Python distributions found through entry points, not shared libraries in a "
    "folder ('tritonx plugins' lists them)"
)

#: tritonserver flags tritonx does not implement yet, each with why: recognised and refused
#: with a message giving that reason (never accepted silently, never click's bare
#: "No such option").
NOT_IMPLEMENTED_FLAGS: dict[str, str] = {
    "--enable-peer-access": _NO_GPU + "CUDA peer access between GPUs is not managed by tritonx",
    "--grpc-infer-thread-count": "the gRPC server runs its handlers on tritonx's event loop, "
    "without inference handler threads (--grpc-engine chooses the server)",
    "--grpc-max-response-pool-size": "there is no response object pool: "
    "--grpc-max-stream-in-flight and --grpc-max-send-buffer bound the answers held",
    "--backend-directory": _PLUGINS,
    "--repoagent-directory": _PLUGINS,
    "--cache-directory": _PLUGINS,
    "--pinned-memory-pool-byte-size": _NO_GPU + "pinned host memory pools are not managed by "
    "tritonx",
    "--cuda-memory-pool-byte-size": _NO_GPU + "CUDA memory pools are not managed by tritonx",
    "--cuda-virtual-address-size": _NO_GPU + "implicit state is not kept in growable CUDA memory",
    "--min-supported-compute-capability": _NO_GPU + "tritonx does not choose GPUs by compute "
    "capability",
    "--buffer-manager-thread-count": "tritonx has no buffer manager thread pool to size",
    "--host-policy": "NUMA node and CPU core placement (host policies) is not implemented",
    "--model-load-gpu-limit": _NO_GPU + "GPU memory is not measured at load "
    "(--model-memory-budget bounds host memory)",
    "--allow-poll-model-repository": "removed from tritonserver in 2020: use "
    "--model-control-mode=poll",
    "--allow-model-control": "removed from tritonserver in 2020: use --model-control-mode=explicit",
}
