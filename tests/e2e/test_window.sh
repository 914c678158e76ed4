#!/bin/sh
# tests/e2e/test_window.sh — sliding-window attention (issue 34) from a
# .ein file: attention(q, k, v, window=W) over packed sequences with
# grouped-query heads, on 1, 2 and 3 CPU devices, against a NumPy masked
# softmax written here with transformers' rule (key u visible to query t
# when t - W < u <= t, within t's sequence); windows shorter than every
# sequence, between the lengths, and longer than all; with the keys split
# into blocks (a single sequence and kv head on 3 devices); the window
# makes a difference (full attention is not the reference); bad windows are
# parse errors naming the argument (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
. "$SRC/tests/e2e/lib.sh"
scratch window

require_numpy
echo "1..20"

cat > ref.py <<'PY'
import sys
import numpy as np

def gen(seed, hq, hkv, t, d):
    r = np.random.default_rng(seed)
    for n, h in (("q", hq), ("k", hkv), ("v", hkv)):
        np.save(n + ".npy", r.standard_normal((h, t, d)).astype(np.float32))

def ref(lens, w):
    """transformers' sliding-window causal attention, float64."""
    q, k, v = (np.load(n + ".npy").astype(np.float64) for n in ("q", "k", "v"))
    hq, t, d = q.shape
    g = hq // k.shape[0]
    start = np.repeat(np.cumsum([0] + lens[:-1]), lens)
    i = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    vis = (j <= i) & (j >= start[:, None])
    if w > 0:
        vis &= j > i - w            # masked when i - j >= w
    y = np.empty_like(q)
    for h in range(hq):
        s = q[h] @ k[h // g].T / np.sqrt(d)
        s = np.where(vis, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        y[h] = (p / p.sum(axis=1, keepdims=True)) @ v[h // g]
    return y

cmd = sys.argv[1]
if cmd == "gen":
    gen(int(sys.argv[2]), *map(int, sys.argv[3:7]))
else:   # check Y LENS W TOL: max error relative to max(1, |ref|)
    lens = [int(x) for x in sys.argv[3].split(",")]
    want = ref(lens, int(sys.argv[4]))
    got = np.load(sys.argv[2]).astype(np.float64)
    err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))
    print("max relative error %.3g" % err)
    sys.exit(0 if err <= float(sys.argv[5]) else 1)
PY

# run NAME NDEV LENS W [EXTRA]: y.npy of attention(..., window=W) vs the
# reference ($ARGS: more einrun options).
ARGS=""
run() {
    rm -f y.npy
    # shellcheck disable=SC2086
    if "$EINRUN" --cpu "$2" --explain $ARGS --input q=q.npy --input k=k.npy --input v=v.npy \
            "$1.ein" > out.txt 2>&1 && msg=$("$PY" ref.py check y.npy "$3" "$4" 1e-5); then
        ok "window $4 over sequences [$3] on $2 device(s)${5:-}"
    else
        not_ok "window $4 over sequences [$3] on $2 device(s)${5:-}" "$(cat out.txt)" "${msg:-}"
    fi
}

# Packed sequences 9, 30, 21, 4 (64 tokens), 4 query heads over 2 kv heads.
"$PY" ref.py gen 1 4 2 64 8 || exit 1
for w in 3 12 40; do
    cat > w$w.ein <<EIN
dims hq=4 hkv=2 tokens=64 d=8
seqs [9, 30, 21, 4]
input q[hq, tokens, d]
input k[hkv, tokens, d]
input v[hkv, tokens, d]
y = attention(q, k, v, window=$w)
save y
EIN
    for nd in 1 2 3; do
        run w$w $nd 9,30,21,4 $w
    done
done

# One sequence and one kv head: on 2 and 3 devices only the tokens split,
# into query or key blocks (the default plan takes query blocks).
"$PY" ref.py gen 2 2 1 96 8 || exit 1
cat > one.ein <<'EIN'
dims hq=2 hkv=1 tokens=96 d=8
input q[hq, tokens, d]
input k[hkv, tokens, d]
input v[hkv, tokens, d]
y = attention(q, k, v, window=10)
save y
EIN
for nd in 1 2 3; do
    run one $nd 96 10
done
# Key blocks merged by log-sum-exp: the random selector's seed 1 splits
# the keys 3 ways (checked from --explain), each block only the window's
# keys.
ARGS="--selector=random --plan-seed 1"
run one 3 96 10 " (key blocks)"
if grep -q "^  y .*q_blocks:1 k_blocks:3" out.txt; then
    ok "that plan split the keys into 3 blocks"
else
    not_ok "that plan split the keys into 3 blocks" "$(grep '^  y ' out.txt)"
fi
ARGS=""
# A dim name as the window.
sed -e 's/^dims hq=2/dims win=10 hq=2/' -e 's/window=10/window=win/' one.ein > named.ein
run named 2 96 10 " (window given as a dim name)"

# The window matters: the full-attention result is not the reference.
sed 's/, window=10//' one.ein > full.ein
rm -f y.npy
"$EINRUN" --cpu 2 --input q=q.npy --input k=k.npy --input v=v.npy full.ein > out.txt 2>&1
if [ -f y.npy ] && ! "$PY" ref.py check y.npy 96 10 1e-3 > /dev/null 2>&1 &&
        "$PY" ref.py check y.npy 96 0 1e-5 > /dev/null 2>&1; then
    ok "without window= the same file is full causal attention, not the windowed result"
else
    not_ok "without window= the same file is full causal attention, not the windowed result" \
        "$(cat out.txt)"
fi

# parse_err NAME LINE PATTERN
parse_err() {
    printf 'dims t=4 h=2 d=4\ninput q[h, t, d]\n%s\nsave y\n' "$2" > bad.ein
    "$EINRUN" --cpu 1 bad.ein > out.txt 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$3" out.txt; then
        ok "$1"
    else
        not_ok "$1" "exit $rc: $(cat out.txt)"
    fi
}
parse_err "a negative window" "y = attention(q, q, q, window=-3)" \
    "bad.ein:3:31: attention window '-3' is negative"
parse_err "a window that is not an integer" "y = attention(q, q, q, window=2.5)" \
    "bad.ein:3:31: bad attention window '2.5'"
parse_err "window given twice" "y = attention(q, q, q, window=2, window=3)" \
    "bad.ein:3:34: window given twice"
parse_err "window on another operator" "y = softmax(q, window=2)" \
    "bad.ein:3:16: softmax takes no keyword argument 'window'"
