#!/bin/sh
# tests/e2e/test_netns_transfer.sh — a large block between hosts whose
# data link goes down mid-transfer is reported by its deadline from the
# topology model (worker/wk_xport.h), not by the heartbeats.
#
# Two network namespaces joined by TWO veth pairs, as a cluster separates
# its control network from its data network: control (ZeroMQ) crosses
# ctl0, data (UCX over TCP, UCX_NET_DEVICES=data0) crosses data0, which
# `tc` limits to 1 Gbit/s each way. The topology says so (two hosts of one
# CPU device, `nic 117.7 MB/s`, `latency-inter 50 us`), and the plan (a
# matmul whose contraction is split over the two hosts: a 64 MiB partial
# crosses data0) is transfer-bound. Checks: the run is right; then with
# data0 taken down once 8 MB of the block have crossed, the receiving
# device fails within its deadline, 4 x (50 us + 64 MiB / 117.7 MB/s) +
# 2 s = 4.3 s (+ 2 s for the report), naming both hosts, the device, the
# operator and the block; the heartbeats (which still arrive over ctl0)
# did not report it; both hosts are clean. Both checks again with
# --transport tcp, its workers listening on data0 (EIN_TCP_ADDRESS=data0).
# Needs root, ip and tc (CI runs
# as root); skipped with the reason elsewhere.
set -u
B=${EIN_BUILDDIR:-.}
B=$(cd "$B" && pwd)
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-nt.XXXXXX") || exit 1
export TMPDIR="$S"
NA=ein-ta-$$
NB=ein-tb-$$
started=""
cleanup() {
    for p in $started; do kill -9 "$p" 2>/dev/null; done
    ns_del "$NA" "$NB"
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"

skip() { echo "1..0 # SKIP $1"; exit 0; }
ns_require tc
ns_add "$NA" 2> ns.txt || skip "cannot create a network namespace: $(cat ns.txt)"
if ! ns_add "$NB" 2> ns.txt || ! ns_veth "$NA" "$NB" ctl0 10.81.0.1 10.81.0.2 2>> ns.txt ||
   ! ns_veth "$NA" "$NB" data0 10.82.0.1 10.82.0.2 2>> ns.txt; then
    skip "cannot join two network namespaces with veth pairs: $(cat ns.txt)"
fi
for ns in $NA $NB; do
    ns_limit "$ns" data0 1gbit 2> ns.txt || skip "tc cannot limit the veth (sch_tbf): $(cat ns.txt)"
done

ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
UCX_TLS=tcp
UCX_NET_DEVICES=data0
export UCX_TLS UCX_NET_DEVICES

write_two_hosts '4 GB'
cat > big.ein <<'EOF'
dims t=4096 k=64 m=4096
dtype f32
input x[t, k]
input w[k, m]
y = matmul(x, w)
save y
EOF
printf '10.81.0.1 1\n10.81.0.2 1 ip netns exec %s\n' "$NB" > hosts
RUN="$EINRUN -q --cpu 2 --hosts hosts --topology $S/topo --selector random --plan-seed 2"

echo "1..4"

# rx: bytes received on data0 by both namespaces so far.
rx() {
    a=$(ip netns exec "$NA" cat /sys/class/net/data0/statistics/rx_bytes 2>/dev/null || echo 0)
    b=$(ip netns exec "$NB" cat /sys/class/net/data0/statistics/rx_bytes 2>/dev/null || echo 0)
    echo $((a + b))
}
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# checks: the two checks, with einrun's extra arguments $XP and $LABEL in
# the names; data0 is up again afterwards.
checks() {
    rx0=$(rx)
    t0=$(date +%s%N)
    ip netns exec "$NA" $RUN $XP --iterations 2 big.ein > ok.txt 2>&1
    rc=$?
    ms=$(ms_since "$t0")
    moved=$(( $(rx) - rx0 ))
    name="a transfer-bound plan between two hosts runs (its blocks over the data link)$LABEL"
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat ok.txt)"
    elif [ "$moved" -lt 100000000 ]; then
        not_ok "$name" "only $moved bytes crossed data0: the plan moves no large block"
    else ok "$name ($ms ms, $((moved / 1000000)) MB over data0)"
    fi

    # The data link down mid-transfer of the 64 MiB block.
    ip netns exec "$NA" $RUN $XP --iterations 50 big.ein > out.txt 2>&1 &
    pid=$!
    started="$pid"
    rx0=$(rx)
    i=0
    while [ $(( $(rx) - rx0 )) -lt 8000000 ] && [ -d "/proc/$pid" ] && [ $i -lt 3000 ]; do
        sleep 0.01; i=$((i + 1))
    done
    t0=$(date +%s%N)
    ip -n "$NB" link set data0 down
    pat="did not end within"
    i=0
    while ! grep -q -- "$pat" out.txt && [ -d "/proc/$pid" ] && [ $i -lt 300 ]; do
        sleep 0.05; i=$((i + 1))
    done
    ms=$(ms_since "$t0")
    # (no deadline would leave the receiver waiting for UCX's ~100 s: stop it)
    [ -d "/proc/$pid" ] && { kill "$pid"; sleep 3; kill -9 "$pid" 2>/dev/null; }
    wait $pid
    rc=$?
    started=""
    limit=$(sed -n 's/.*did not end within \([0-9.]*\) s.*/\1/p' out.txt | head -1)
    limit_ms=$(awk -v l="${limit:-0}" 'BEGIN { printf "%d", l * 1000 + 2000 }')
    left=""
    i=0
    while [ $i -lt 50 ]; do
        left=""
        for ns in $NA $NB; do
            for p in $(ip netns pids "$ns" 2>/dev/null); do left="$left $ns: process $p;"; done
        done
        for f in "$S"/einrun.*; do [ -e "$f" ] && left="$left $f;"; done
        [ -z "$left" ] && break
        i=$((i + 1)); sleep 0.1
    done
    full="device [01] (pid [0-9]*, host [01] (10.81.0.[12])) failed in instruction [0-9]* (.*operator '.*'): .*the block of 67108864 bytes from device [01] (another host, its buffer [0-9]*) began to arrive but did not end within [0-9.]* s (the model's 0.570 s at 118 MB/s and 50 us between hosts, x 4 + 2.0 s).* \[device [01] is on host [01] (10.81.0.[12])\]"
    name="the data link down mid-transfer of a 64 MiB block is reported by its deadline$LABEL"
    if [ "$rc" -ne 1 ]; then not_ok "$name" "exit status $rc, expected 1" "$(cat out.txt)"
    elif grep -q "stopped answering, or the link to it is down" out.txt; then
        not_ok "$name" "reported by the heartbeats, not the transfer's deadline:" "$(cat out.txt)"
    elif ! grep -q -- "$full" out.txt; then
        not_ok "$name" "message does not match '$full':" "$(cat out.txt)"
    elif [ "$ms" -gt "$limit_ms" ]; then
        not_ok "$name" "took $ms ms, more than the deadline $limit s + 2 s" "$(cat out.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms after the link went down; deadline $limit s)"
    fi
    ip -n "$NB" link set data0 up
    ip -n "$NA" link set data0 up
    sleep 1
}

XP="" LABEL=""
checks
# The same with transport tcp (worker/wk_tcp.c), its workers listening on
# data0 (EIN_TCP_ADDRESS takes an interface name, as UCX_NET_DEVICES).
EIN_TCP_ADDRESS=data0
export EIN_TCP_ADDRESS
XP="--transport tcp" LABEL=", transport tcp on data0 (EIN_TCP_ADDRESS)"
checks
