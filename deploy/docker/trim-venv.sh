#!/bin/sh
# Dockerfile build stage: trim the venv to what a server runs, then byte-compile it or not.
# usage: trim-venv.sh VENV compiled|none
set -eu
venv="$1"
bytecode="$2"
site="$(echo "$venv"/lib/python3*/site-packages)"
# test suites packages ship inside themselves, and what only builds C++ extensions against
# torch (the image has no compiler)
rm -rf "$site"/numpy/*/tests "$site"/numpy/tests "$site"/google/protobuf/internal/*_test.py \
    "$site"/grpc/_cython/_cygrpc/*.pxi "$site"/torch/include "$site"/torch/share/cmake
find "$site" -depth -type d -name __pycache__ -exec rm -rf {} +
case "$bytecode" in
    # unchecked-hash: the sources never change in the image, so no start stats them to check.
    # A file written for a newer Python (torch ships some in its test helpers) cannot be
    # compiled, nor imported: it stays source, and is named here.
    compiled)
        "$venv/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$site" \
            | grep '^\*\*\* Error compiling' >&2 || true ;;
    none) ;;
    *) echo "trim-venv.sh: BYTECODE is compiled or none, not '$bytecode'" >&2; exit 1 ;;
esac
