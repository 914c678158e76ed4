#!/bin/sh
# tests/e2e/test_pin.sh — CPU workers pinned to cores (TAP): with 2 to N
# devices on the N CPUs einrun may use, worker d pins itself to the
# (d mod N)-th of them and logs it; one device, more devices than CPUs and
# EIN_PIN=0 leave placement to the kernel; EIN_PIN=1 pins regardless
# (wrapping round the CPUs); a CPU set narrowed by taskset is respected.
# The results are the same bytes pinned or not.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch pin
unset EIN_PIN
write_ffn ffn.ein
N=$(nproc)
echo "1..6"

# run NAME DEVICES [env...]: einrun with worker logs in NAME/, output NAME.npy
run() {
    name=$1 dev=$2
    shift 2
    rm -rf "$name" && mkdir "$name" &&
        env "$@" "$EINRUN" --cpu "$dev" --seed 3 --log-dir "$name" --output y="$name.npy" \
            ffn.ein > "$name.out" 2>&1
}
# pins NAME: "D:CPU ..." from the workers' logs, in device order
pins() { cat "$1"/worker-*.log 2>/dev/null | sed -n 's/^device \([0-9]*\) pinned to CPU \([0-9]*\).*/\1:\2/p' | sort -n | tr '\n' ' '; }

if [ "$N" -ge 2 ]; then
    run two 2 && p=$(pins two)
    c0=$(echo "$p" | sed -n 's/.*0:\([0-9]*\).*/\1/p'); c1=$(echo "$p" | sed -n 's/.*1:\([0-9]*\).*/\1/p')
    if [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$c1" ]; then
        ok "2 devices on $N CPUs: each worker pinned to a core of its own ($p)"
    else not_ok "2 devices on $N CPUs: pins '$p'" "$(cat two.out two/worker-*.log)"; fi
else
    n=$((n + 1)); echo "ok $n # SKIP one CPU: no two cores to pin to"
fi

run off 2 EIN_PIN=0
if [ -z "$(pins off)" ] && [ -f off/worker-0.log ]; then ok "EIN_PIN=0: not pinned"
else not_ok "EIN_PIN=0: pins '$(pins off)'" "$(cat off.out)"; fi

run one 1
if [ -z "$(pins one)" ] && [ -f one/worker-0.log ]; then ok "one device: not pinned"
else not_ok "one device: pins '$(pins one)'" "$(cat one.out)"; fi

M=$((N + 1))
run over "$M"
run force "$M" EIN_PIN=1
p=$(pins force)
first=$(echo "$p" | sed -n 's/^0:\([0-9]*\) .*/\1/p')
if [ -z "$(pins over)" ] && echo "$p" | grep -q "^0:$first .*$N:$first \$"; then
    ok "$M devices on $N CPUs: not pinned; EIN_PIN=1 wraps round ($p)"
else not_ok "$M devices on $N CPUs: default '$(pins over)', EIN_PIN=1 '$p'" "$(cat over.out force.out)"; fi

if command -v taskset > /dev/null 2>&1 && cpu=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//; s/[,-].*//') &&
    [ -n "$cpu" ]; then
    rm -rf narrow && mkdir narrow
    taskset -c "$cpu" "$EINRUN" --cpu 2 --seed 3 --log-dir narrow --output y=narrow.npy ffn.ein \
        > narrow.out 2>&1
    p=$(pins narrow)
    if [ -z "$p" ] && [ -f narrow/worker-1.log ]; then ok "taskset -c $cpu: 2 devices on 1 CPU, not pinned"
    else not_ok "taskset -c $cpu: pins '$p'" "$(cat narrow.out)"; fi
else
    n=$((n + 1)); echo "ok $n # SKIP no taskset"
fi

# The same program on 2 devices, pinned (the default where N >= 2, else
# EIN_PIN=1) and not: the same bytes.
if [ "$N" -ge 2 ]; then ref=two.npy; else run force2 2 EIN_PIN=1; ref=force2.npy; fi
if [ -s off.npy ] && cmp -s off.npy "$ref"; then ok "the same bytes pinned and not"
else not_ok "results differ pinned and not" "$(cat off.out)"; fi
