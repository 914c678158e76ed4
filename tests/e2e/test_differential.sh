#!/bin/sh
# tests/e2e/test_differential.sh — random programs run by einrun under every
# option that changes the plan or the lowering (--rewrite, --objective,
# --selector, --exchange-chunks, --topology, --schedule; P = 1..8), each saved
# tensor compared with an independent NumPy interpreter of the program
# (tests/e2e/diffcheck.py, which prints the TAP). It caught einrun --rewrite
# writing zeros, another tensor, or crashing (issue 22). EIN_DIFF_RUNS and
# EIN_DIFF_SEED choose another sample.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
. "$SRC/tests/e2e/lib.sh"
require_numpy
scratch diff
exec "$PY" "$SRC/tests/e2e/diffcheck.py" "$EINRUN" "$S/runs" --runs "${EIN_DIFF_RUNS:-32}" \
    --seed "${EIN_DIFF_SEED:-22}"
