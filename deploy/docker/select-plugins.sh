#!/bin/sh
# Print the pip requirements for the plugins named on the command line (Docker build stage).
# usage: select-plugins.sh VARIANT PLUGIN...   (VARIANT: cpu or cuda)
set -eu
variant="$1"
shift
[ "$variant" = cpu ] || [ "$variant" = cuda ] || { echo "unknown VARIANT '$variant' (cpu or cuda)" >&2; exit 1; }
need_dir() {
    [ -d "plugins/$1" ] || { echo "PLUGINS: plugins/$1 is not in the build context" >&2; exit 1; }
    echo "./plugins/$1"
}
for plugin in "$@"; do
    case "$plugin" in
        onnx) need_dir backend_onnx ;;  # the Dockerfile swaps in onnxruntime-gpu for cuda
        python) need_dir backend_python ;;
        torch)
            need_dir backend_python
            if [ "$variant" = cuda ]; then echo "torch"; else
                echo "--extra-index-url https://download.pytorch.org/whl/cpu"; echo "torch"; fi ;;
        redis) need_dir cache_redis ;;
        checksum) need_dir repoagent_checksum ;;
        decrypt) need_dir repoagent_decrypt ;;
        cloud) need_dir repo_cloud ;;
        *) echo "PLUGINS: unknown plugin '$plugin' (onnx python torch redis checksum decrypt cloud)" >&2; exit 1 ;;
    esac
done
