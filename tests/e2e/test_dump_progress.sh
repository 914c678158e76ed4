#!/bin/sh
# tests/e2e/test_dump_progress.sh — einrun --dump-inputs DIR writes the
# inputs the workers used (generated, .npy or .safetensors): a NumPy FFN on
# the dumped files equals einrun's result; a bad DIR is one line, exit 2.
# Progress lines show on a terminal (a pty from script(1)), not with
# --quiet, and never when stderr is a file (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
EINGEN="$(cd "$B" && pwd)/eingen"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
GEN="$SRC/tests/e2e/st_gen.py"
. "$SRC/tests/e2e/lib.sh"
scratch dump

require_numpy
echo "1..8"
write_ffn ffn.ein
mkdir st
"$PY" "$GEN" ffn st f32 || exit 1

# dumped NAME ARGS...: einrun --dump-inputs d ARGS, then NumPy on d/*.npy.
dumped() {
    name=$1
    shift
    rm -rf d y.npy
    if "$EINRUN" --cpu 3 --dump-inputs d "$@" ffn.ein > out.txt 2>&1 &&
            "$PY" "$GEN" ffnref d ref.npy && msg=$("$PY" "$GEN" check y.npy ref.npy 1e-5); then
        ok "$name"
    else
        not_ok "$name" "$(cat out.txt)" "${msg:-}"
    fi
}
dumped "generated inputs dumped are the ones used" --seed 9
dumped "inputs from a .safetensors file dumped are the ones used" \
    --weights st/model.safetensors --map w2=layers.0.w2 --allow-unused-weights
if grep -q "^einrun: wrote 3 inputs to d/$" out.txt && [ -f d/x.npy ] && [ -f d/w1.npy ] && [ -f d/w2.npy ]; then
    ok "einrun says where the inputs went"
else
    not_ok "einrun says where the inputs went" "$(cat out.txt)"
fi
touch afile
"$EINRUN" --cpu 1 --dump-inputs afile ffn.ein > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "dump-inputs afile: not a directory" out.txt && [ "$(out_lines out.txt)" -eq 1 ]; then
    ok "a --dump-inputs that is a file is refused"
else
    not_ok "a --dump-inputs that is a file is refused" "exit $rc: $(cat out.txt)"
fi

# Progress. script(1) gives einrun a terminal.
if ! command -v script > /dev/null 2>&1; then
    for t in 5 6 7 8; do ok "# SKIP no script(1)"; done
    exit 0
fi
"$EINGEN" llama --seqs 2 --tokens 256 --scale 0.0625 --dtype f32 > l.ein
script -qec "$EINRUN --cpu 2 --iterations 3 l.ein" /dev/null > tty.txt 2>&1
if grep -q "planning: " tty.txt && grep -q "lowering, synthesising exchanges: .*/" tty.txt &&
        grep -q "running (iterations): .*/3" tty.txt && grep -q "saved y" tty.txt; then
    ok "progress shows on a terminal"
else
    not_ok "progress shows on a terminal" "$(tr '\r\033' '|E' < tty.txt | head -c 2000)"
fi
script -qec "$EINRUN --cpu 2 --quiet --iterations 3 l.ein" /dev/null > tty.txt 2>&1
if ! grep -q "planning\|running (iter" tty.txt && grep -q "saved y" tty.txt; then
    ok "--quiet silences it"
else
    not_ok "--quiet silences it" "$(tr '\r\033' '|E' < tty.txt | head -c 2000)"
fi
"$EINRUN" --cpu 2 --iterations 3 l.ein > out.txt 2> err.txt
if [ ! -s err.txt ] || ! grep -q "$(printf '\r')\|planning\|running (iter" err.txt; then
    ok "nothing when stderr is a file"
else
    not_ok "nothing when stderr is a file" "$(cat err.txt)"
fi
script -qec "$EINRUN --cpu 2 --dump-inputs dd l.ein" /dev/null > tty.txt 2>&1
if grep -q "writing inputs: .*/10" tty.txt && [ -f dd/wq.npy ]; then
    ok "--dump-inputs shows its progress"
else
    not_ok "--dump-inputs shows its progress" "$(tr '\r\033' '|E' < tty.txt | head -c 2000)"
fi
