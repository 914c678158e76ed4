#!/bin/sh
# tools/netns-predict.sh — predicted against measured iteration time of a
# transfer-bound plan between two "hosts" joined by a 1 Gbit/s link.
#
# Two network namespaces joined by a veth pair, each end limited to
# 1 Gbit/s with `tc` (a token bucket), one CPU device and one agent
# (einnode) in each (einrun --hosts). The topology says the same: two
# hosts of one device each, `nic 125 MB/s` (1 Gbit/s). The plan: a matmul
# whose contraction is split over the two devices (einrun's random
# selector, seed 2 on this workload), so half of the 16 MB output crosses
# the link to be summed. It prints the plan simulator's prediction
# (einplan --simulate on that topology) and the median of the measured
# iterations (einrun --iterations), and their ratio; exit status 1 when
# they differ by more than 30% (or something fails), else 0.
#
# Needs root (namespaces, tc) and a build with UCX. Not part of make check
# (a timing on a loaded machine): run it by hand from the build directory:
#   sudo sh tools/netns-predict.sh [--iterations N] [--seed S]
set -u
B=$(pwd)
ITER=5
SEED=2
while [ $# -gt 0 ]; do
    case $1 in
    --iterations) ITER=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    *) echo "usage: $0 [--iterations N] [--seed S]" >&2; exit 2 ;;
    esac
done
for p in einrun einplan einnode einworker; do
    [ -x "$B/$p" ] || { echo "netns-predict: no $B/$p: run it from the build directory" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "netns-predict: needs root (network namespaces, tc)" >&2; exit 2; }
grep -q '^#define HAVE_UCX 1' "$B/config.h" 2>/dev/null ||
    { echo "netns-predict: built without UCX" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -r "$SRC/tests/e2e/lib.sh" ] ||
    { echo "netns-predict: no $SRC/tests/e2e/lib.sh (the source tree)" >&2; exit 2; }
. "$SRC/tests/e2e/lib.sh"    # ns_add, ns_veth, ns_limit, ns_del
S=$(mktemp -d /tmp/ein-np.XXXXXX) || exit 1
NA=ein-pa-$$
NB=ein-pb-$$
cleanup() {
    ns_del "$NA" "$NB"
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
cd "$S" || exit 1
export TMPDIR="$S"
# 1 Gbit/s out of each end: both directions of the link.
if ! ns_add "$NA" || ! ns_add "$NB" || ! ns_veth "$NA" "$NB" ein0 10.78.0.1 10.78.0.2 ||
   ! ns_limit "$NA" ein0 1gbit || ! ns_limit "$NB" ein0 1gbit; then
    echo "netns-predict: cannot join two network namespaces by a 1 Gbit/s veth" >&2
    exit 1
fi
export UCX_TLS=tcp UCX_NET_DEVICES=ein0

write_two_hosts '2 GB'
cat > agg.ein <<'EOF'
dims t=1024 k=64 m=4096
dtype f32
input x[t, k]
input w[k, m]
y = matmul(x, w)
save y
EOF
printf '10.78.0.1 1\n10.78.0.2 1 ip netns exec %s\n' "$NB" > hosts

"$B/einplan" --devices 2 --selector random --seed "$SEED" --simulate --topology "$S/topo" \
    agg.ein > pred.txt 2>&1 || { cat pred.txt; exit 1; }
pred=$(sed -n 's/^predicted iteration on [^:]*: \([0-9.]*\) ms.*/\1/p' pred.txt)
comm=$(sed -n 's/^critical path: .* \([0-9.]*\) ms communication.*/\1/p' pred.txt)
ip netns exec "$NA" "$B/einrun" --cpu 2 --hosts hosts --topology "$S/topo" --selector random \
    --plan-seed "$SEED" --warmup 1 --iterations "$ITER" agg.ein > run.txt 2>&1 ||
    { cat run.txt; exit 1; }
meas=$(sed -n 's/.*iterations (after [0-9]* warm-up): min [0-9.]* ms, median \([0-9.]*\) ms.*/\1/p' run.txt)
if [ -z "$pred" ] || [ -z "$meas" ]; then
    echo "netns-predict: no prediction or measurement:"; cat pred.txt run.txt; exit 1
fi
awk -v p="$pred" -v m="$meas" -v c="$comm" -v it="$ITER" 'BEGIN {
    printf "transfer-bound plan over a 1 Gbit/s veth (tc), 2 hosts x 1 CPU device:\n"
    printf "  predicted %.1f ms per iteration (%.1f ms of it communication on the critical path)\n", p, c
    printf "  measured  %.1f ms (median of %d iterations)\n", m, it
    r = m / p
    printf "  measured / predicted = %.2f (%s 30%%)\n", r, (r >= 0.7 && r <= 1.3) ? "within" : "NOT within"
    exit (r >= 0.7 && r <= 1.3) ? 0 : 1 }'
