#!/usr/bin/env bash
# Install NVIDIA's perf_analyzer into tools/perf_analyzer/ (git-ignored), idempotently.
#
# perf_analyzer is the C++ load generator that ships inside the tritonclient 2.41.0 wheel
# (tritonclient-2.41.0.data/data/bin/perf_analyzer, platform manylinux1_x86_64). It needs:
#   * libb64.so.0d      from Debian's libb64-0d package (unpacked here, no system install),
#   * libcudart.so.12   from the PyPI wheel nvidia-cuda-runtime-cu12 (no GPU is needed).
# Only `pip download` and `apt-get download` are used; nothing outside this folder changes.
# Afterwards run it through tools/perf_analyzer/run.sh, which sets LD_LIBRARY_PATH.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="python3"; fi
fi
TRITONCLIENT_VERSION="2.41.0"
CUDART_VERSION="${CUDART_VERSION:-12.9.79}"
DL="$HERE/downloads"
mkdir -p "$DL" "$HERE/bin" "$HERE/lib"

# 1. perf_analyzer from the tritonclient wheel.
if [ ! -x "$HERE/bin/perf_analyzer" ]; then
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux1_x86_64 --dest "$DL" "tritonclient==${TRITONCLIENT_VERSION}"
  "$PY" - "$DL" "$HERE/bin" "$TRITONCLIENT_VERSION" <<'PYEOF'
import glob, os, sys, zipfile
dl, bindir, ver = sys.argv[1:]
wheel = glob.glob(os.path.join(dl, f"tritonclient-{ver}-*manylinux1_x86_64*.whl"))[0]
with zipfile.ZipFile(wheel) as zf:
    member = f"tritonclient-{ver}.data/data/bin/perf_analyzer"
    target = os.path.join(bindir, "perf_analyzer")
    with zf.open(member) as src, open(target + ".tmp", "wb") as dst:
        dst.write(src.read())
    os.chmod(target + ".tmp", 0o755)
    os.replace(target + ".tmp", target)
PYEOF
fi

# 2. libcudart.so.12 from nvidia-cuda-runtime-cu12.
if [ ! -e "$HERE/lib/libcudart.so.12" ]; then
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --dest "$DL" "nvidia-cuda-runtime-cu12==${CUDART_VERSION}"
  "$PY" - "$DL" "$HERE/lib" <<'PYEOF'
import glob, os, sys, zipfile
dl, libdir = sys.argv[1:]
wheel = sorted(glob.glob(os.path.join(dl, "nvidia_cuda_runtime_cu12-*.whl")))[-1]
with zipfile.ZipFile(wheel) as zf:
    member = next(n for n in zf.namelist() if n.endswith("/libcudart.so.12"))
    target = os.path.join(libdir, "libcudart.so.12")
    with zf.open(member) as src, open(target + ".tmp", "wb") as dst:
        dst.write(src.read())
    os.replace(target + ".tmp", target)
PYEOF
fi

# 3. libb64.so.0d from Debian's libb64-0d (unpacked, not installed system-wide).
if ! ls "$HERE"/lib/libb64.so.0d >/dev/null 2>&1; then
  (
    cd "$DL"
    if ! ls libb64-0d_*.deb >/dev/null 2>&1; then
      # (as root, apt's _apt sandbox user cannot write here: download as the caller)
      APT_OPTS=(-o APT::Sandbox::User="$(id -un)")
      apt-get "${APT_OPTS[@]}" download libb64-0d \
        || { apt-get update -qq && apt-get "${APT_OPTS[@]}" download libb64-0d; }
    fi
    rm -rf "$DL/libb64-root"
    dpkg-deb -x "$(ls libb64-0d_*.deb | head -n1)" "$DL/libb64-root"
  )
  cp -L "$(find "$DL/libb64-root" -name 'libb64.so.0d' | head -n1)" "$HERE/lib/libb64.so.0d"
fi

# 4. Check that every shared library resolves.
missing="$(LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$HERE/bin/perf_analyzer" | grep 'not found' || true)"
if [ -n "$missing" ]; then
  echo "perf_analyzer still misses shared libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "perf_analyzer ready: $HERE/run.sh --help"
