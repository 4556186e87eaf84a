#!/usr/bin/env bash
# Run perf_analyzer (installed by tools/perf_analyzer/setup.sh) with its libraries found.
# Usage: tools/perf_analyzer/run.sh -m <model> -u 127.0.0.1:8001 -i grpc [...]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ ! -x "$HERE/bin/perf_analyzer" ]; then
  echo "perf_analyzer is not installed: run bash $HERE/setup.sh" >&2
  exit 127
fi
export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$HERE/bin/perf_analyzer" "$@"
