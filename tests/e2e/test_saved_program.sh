#!/bin/sh
# tests/e2e/test_saved_program.sh — einrun --save-program FILE writes a
# compiled program and `einrun FILE` runs it without compiling again: the
# same outputs, byte for byte, as the run that compiled it; a saved
# program for another device count or topology, or a damaged one (any bit
# flipped), stops einrun with exit 2 and a message saying which; without
# --cpu/--gpus it runs on the devices it was compiled for; compile-time
# flags given with it are refused by name (exit 2); a damaged file's raw
# bytes are never echoed (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
NPY="$(cd "$B" && pwd)/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch saved
echo "1..19"
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
# One bit flipped in the middle: refused by the checksum.
size=$(wc -c < ffn.einprog)
python3 - "$size" <<'PY' || exit 1
import sys
b = bytearray(open("ffn.einprog", "rb").read())
b[int(sys.argv[1]) // 2] ^= 0x10
open("flip.einprog", "wb").write(bytes(b))
PY
check "a flipped bit is refused" 2 "checksum does not match" --cpu 3 $ins flip.einprog

# Without --cpu or --gpus: the devices it was compiled for (3).
check "the saved device count is the default" 0 "" $ins --output y=y3.npy ffn.einprog
if "$NPY" compare y3.npy y1.npy 0 | grep -q "bytes identical"; then
    ok "the default device count gives the same outputs"
else
    not_ok "default device count" "$("$NPY" compare y3.npy y1.npy 0 2>&1)"
fi
# Compile-time flags are refused by name, not ignored.
# (--seed only when it is not the seed it was compiled with, 1.)
for flag in "--rewrite" "--objective time" "--exchange-chunks 2" "--seed 5" "--no-reuse"; do
    name=${flag%% *}
    check "$name with a saved program is refused" 2 "^einrun: $name: .*saved program" \
        $flag $ins ffn.einprog
done
check "its own --seed is accepted" 0 "" --seed 1 $ins --output y=y4.npy ffn.einprog
# A damaged file's bytes are escaped in the message, never raw (a .npy
# header whose dtype holds 0xff and an escape sequence).
python3 - <<'PY' || exit 1
import struct
h = b"{'descr': '<f\xff\x1b[31m', 'fortran_order': False, 'shape': (37, 24), }"
h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
open("raw.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h)
PY
"$EINRUN" --cpu 1 --input x=raw.npy --generate-missing ffn.ein > raw.txt 2>&1
if LC_ALL=C grep -q "$(printf '[\033\200-\377]')" raw.txt; then
    not_ok "a damaged file's bytes are escaped" "raw bytes in: $(od -c raw.txt | head)"
elif ! grep -q "<f\\\\xff\\\\x1b\[31m" raw.txt; then
    not_ok "a damaged file's bytes are escaped" "no <f\\xff\\x1b[31m in: $(cat raw.txt)"
else
    ok "a damaged file's bytes are escaped"
fi

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
