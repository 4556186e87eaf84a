#!/bin/sh
# Dockerfile build stage: trim the venv to what a server runs, then byte-compile it or not.
# usage: trim-venv.sh VENV compiled|none
set -eu
venv="$1"
bytecode="$2"
site="$(echo "$venv"/lib/python3*/site-packages)"
# test suites that packages ship inside themselves (never imported by a server)
for tests in "$site"/numpy/*/tests "$site"/numpy/tests "$site"/google/protobuf/internal/*_test.py \
        "$site"/grpc/_cython/_cygrpc/*.pxi; do
    [ -e "$tests" ] && rm -rf "$tests"
done
find "$site" -depth -type d -name __pycache__ -exec rm -rf {} +
case "$bytecode" in
    # unchecked-hash: the sources never change in the image, so no start stats them to check
    compiled) "$venv/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$site" >/dev/null ;;
    none) ;;
    *) echo "trim-venv.sh: BYTECODE is compiled or none, not '$bytecode'" >&2; exit 1 ;;
esac
