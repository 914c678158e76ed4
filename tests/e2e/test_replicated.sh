#!/bin/sh
# tests/e2e/test_replicated.sh — replicated specs (planner/pl_spec.h, issue
# 36): one token through two residual MLP blocks (rmsnorm, column-split
# projection, row-split projection, residual add), as a decode step is. On
# 2 and 3 CPU devices the plan search computes the rmsnorms and the adds on
# every device ("rep:P" in --explain), so each block boundary is ONE
# exchange (the row-split projection's partial sums all-reduced onto every
# device); y equals a NumPy float64 reference written here; the saved
# program carries the replicated specs and runs to the same bytes (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
EINPLAN="$(cd "$B" && pwd)/einplan"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
. "$SRC/tests/e2e/lib.sh"
scratch replicated

require_numpy
echo "1..11"

cat > mlp.ein <<'EIN'
dims t=1 d=256 f=512
input x[t, d]
input n1[d]
input w1[d, f]
input w2[f, d]
input n2[d]
input w3[d, f]
input w4[f, d]
h1 = rmsnorm(x, n1, 1e-5)
a1 = matmul(h1, w1)
s1 = silu(a1)
b1 = matmul(s1, w2)
r1 = add(x, b1)
h2 = rmsnorm(r1, n2, 1e-5)
a2 = matmul(h2, w3)
s2 = silu(a2)
b2 = matmul(s2, w4)
r2 = add(r1, b2)
y = rmsnorm(r2, n2, 1e-5)
save y
EIN

cat > ref.py <<'PY'
import sys
import numpy as np
names = ["x", "n1", "w1", "w2", "n2", "w3", "w4"]
shapes = {"x": (1, 256), "n1": (256,), "n2": (256,), "w1": (256, 512), "w3": (256, 512),
          "w2": (512, 256), "w4": (512, 256)}
if sys.argv[1] == "gen":
    r = np.random.default_rng(5)
    for n in names:
        s = 1.0 if n[0] != "w" else 1 / np.sqrt(shapes[n][0])
        np.save(n + ".npy", (r.standard_normal(shapes[n]) * s + (1.0 if n[0] == "n" else 0))
                .astype(np.float32))
    sys.exit(0)
v = {n: np.load(n + ".npy").astype(np.float64) for n in names}
def rms(a, w):
    return a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + 1e-5) * w
def silu(a):
    return a / (1 + np.exp(-a))
r1 = v["x"] + silu(rms(v["x"], v["n1"]) @ v["w1"]) @ v["w2"]
r2 = r1 + silu(rms(r1, v["n2"]) @ v["w3"]) @ v["w4"]
want = rms(r2, v["n2"])
got = np.load(sys.argv[2]).astype(np.float64)
err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))
print("max relative error %.3g" % err)
sys.exit(0 if got.shape == want.shape and err <= 1e-5 else 1)
PY
"$PY" ref.py gen || exit 1
INPUTS="--input x=x.npy --input n1=n1.npy --input w1=w1.npy --input w2=w2.npy \
--input n2=n2.npy --input w3=w3.npy --input w4=w4.npy"

for nd in 2 3; do
    rm -f y.npy
    # shellcheck disable=SC2086
    if "$EINRUN" --cpu $nd --explain $INPUTS mlp.ein > out$nd.txt 2>&1 &&
            msg=$("$PY" ref.py check y.npy); then
        ok "$nd devices: y equals NumPy's ($msg)"
    else
        not_ok "$nd devices: y equals NumPy's" "$(cat out$nd.txt)" "${msg:-}"
    fi
    cp y.npy y$nd.npy 2>/dev/null
    # (y, saved and read by nothing, may stay on one device)
    nrep=$(grep -c "^  \(h1\|r1\|h2\|r2\) .*rep:$nd " out$nd.txt)
    if [ "$nrep" -eq 4 ]; then
        ok "$nd devices: the rmsnorms and adds are replicated (rep:$nd)"
    else
        not_ok "$nd devices: the rmsnorms and adds are replicated (rep:$nd)" \
            "$(grep '^  ' out$nd.txt)"
    fi
done

# Exchanges that move data at P = 2: the two all-reduces (b1 for r1, b2 for
# r2); every other exchange is local (a device's own copy).
"$EINPLAN" --devices 2 --exchanges mlp.ein > ex.txt 2>&1
line=$(grep '^programs:' ex.txt)
tot=$(echo "$line" | sed -n 's/.* \([0-9]*\) exchanges (.*/\1/p')
loc=$(echo "$line" | sed -n 's/.* \([0-9]*\) local).*/\1/p')
moving=$(awk '/^# exchange/ { name = $0 } /->/ { if (name != "") { print name; name = "" } }' ex.txt)
if [ -n "$tot" ] && [ -n "$loc" ] && [ $((tot - loc)) -eq 2 ] &&
        [ "$(echo "$moving" | sed 's/.*: //' | tr '\n' ,)" = "b1 for r1,b2 for r2," ]; then
    ok "P = 2: one exchange per block boundary (b1 for r1, b2 for r2)"
else
    not_ok "P = 2: one exchange per block boundary (b1 for r1, b2 for r2)" "$line" "$moving"
fi
# ... and each is an all-reduce: both devices end with the sum.
if grep -A3 "^# exchange .*: b1 for r1" ex.txt | grep -q "^OUT: A0_0+A0_1 @ 0, 1"; then
    ok "P = 2: b1's partial sums are summed onto both devices"
else
    not_ok "P = 2: b1's partial sums are summed onto both devices" "$(grep -A6 'b1 for r1' ex.txt)"
fi

# The saved program: its plan keeps the replicated specs, and it runs to
# the same bytes without compiling again.
rm -f y.npy
# shellcheck disable=SC2086
if "$EINRUN" --cpu 2 $INPUTS --save-program p.einprog mlp.ein > sv.txt 2>&1 &&
        rm -f y.npy && "$EINRUN" --explain $INPUTS p.einprog > ld.txt 2>&1 &&
        cmp -s y.npy y2.npy; then
    ok "a saved program with replicated specs runs to the same bytes"
else
    not_ok "a saved program with replicated specs runs to the same bytes" "$(cat sv.txt ld.txt)"
fi
if [ "$(grep -c '^  .*rep:2 ' ld.txt)" -eq "$(grep -c '^  .*rep:2 ' out2.txt)" ] &&
        grep -q '^  h1 .*rep:2 ' ld.txt; then
    ok "the loaded program's plan has the same replicated specs"
else
    not_ok "the loaded program's plan has the same replicated specs" "$(grep '^  ' ld.txt)"
fi

# The same program twice: the same plan and exchanges (determinism).
"$EINPLAN" --devices 2 --exchanges mlp.ein > ex2.txt 2>&1
if cmp -s ex.txt ex2.txt; then
    ok "the same graph gives the same replicated plan and exchanges"
else
    not_ok "the same graph gives the same replicated plan and exchanges" "$(diff ex.txt ex2.txt | head)"
fi

# einplan --json: "replicas": 2 on a replicated operator, no key elsewhere.
"$EINPLAN" --devices 2 --json mlp.ein > pj.json 2>/dev/null
if "$PY" -c '
import json, sys
ops = {o["name"]: o for o in json.load(open("pj.json"))["ops"]}
sys.exit(0 if ops["h1"].get("replicas") == 2 and ops["r1"].get("replicas") == 2
         and "replicas" not in ops["a1"] and ops["h1"]["agg"] == "none" else 1)'; then
    ok "einplan --json: replicas 2 on h1 and r1, none on a1"
else
    not_ok "einplan --json: replicas 2 on h1 and r1, none on a1" "$(head -c 600 pj.json)"
fi

# On one device there is nothing to replicate.
"$EINPLAN" --devices 1 mlp.ein > p1.txt 2>&1
if grep -q "^h1 " p1.txt && ! grep -q "rep:" p1.txt; then
    ok "1 device: no replicated spec"
else
    not_ok "1 device: no replicated spec" "$(cat p1.txt)"
fi
exit $((fails > 0))
