#!/bin/sh
# tests/e2e/test_saved_program.sh — einrun --save-program FILE writes a
# compiled program and `einrun FILE` runs it without compiling again: the
# same outputs, byte for byte, as the run that compiled it; a saved
# program for another device count or topology, or a damaged one, stops
# einrun with exit 2 and a message saying which (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
NPY="$(cd "$B" && pwd)/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-saved.XXXXXX") || exit 1
export TMPDIR="$S"
trap 'rm -rf "$S"' EXIT
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"
echo "1..9"
n=0

write_ffn ffn.ein
"$NPY" write x.npy f32 1 37 24 && "$NPY" write w1.npy f32 2 24 50 &&
    "$NPY" write w2.npy f32 3 50 24 || exit 1
ins="--input x=x.npy --input w1=w1.npy --input w2=w2.npy"

# check NAME STATUS PATTERN einrun-args...
check() {
    name=$1; want=$2; pat=$3; shift 3
    "$EINRUN" "$@" > out.txt 2>&1
    got=$?
    if [ "$got" -eq "$want" ] && grep -q -e "$pat" out.txt; then
        ok "$name"
    else
        not_ok "$name" "exit $got (want $want), no '$pat' in:" "$(cat out.txt)"
    fi
}

check "--save-program writes the program while running" 0 "" \
    --cpu 3 --schedule search $ins --output y=y1.npy --save-program ffn.einprog ffn.ein
[ -s ffn.einprog ] || not_ok "no ffn.einprog written"
check "einrun FILE runs the saved program" 0 "" \
    --cpu 3 $ins --output y=y2.npy ffn.einprog
if "$NPY" compare y2.npy y1.npy 0 | grep -q "bytes identical"; then
    ok "same outputs, byte for byte"
else
    not_ok "same outputs" "$("$NPY" compare y2.npy y1.npy 0)"
fi
check "another device count is refused" 2 "device count differs" \
    --cpu 2 $ins ffn.einprog
check "another topology is refused" 2 "topology differs" \
    --cpu 3 --topology dgx-v100 $ins ffn.einprog
head -c 300 ffn.einprog > cut.einprog
check "a truncated file is refused" 2 "not a valid saved program" \
    --cpu 3 $ins cut.einprog

# A decode step (states, cache_write, rope_at, decode_attention) saved and
# run again: the graph's state flags and the generation operators survive.
check "a decode step with states is saved" 0 "" \
    --cpu 2 --output y=d1.npy --save-program dec.einprog "$SRC/examples/decode.ein"
check "the saved decode step runs" 0 "" --cpu 2 --output y=d2.npy dec.einprog
if "$NPY" compare d2.npy d1.npy 0 | grep -q "bytes identical"; then
    ok "the saved decode step gives the same output"
else
    not_ok "decode outputs" "$("$NPY" compare d2.npy d1.npy 0 2>&1)"
fi
