#!/bin/sh
# tests/e2e/test_transport.sh — the transport between hosts is chosen by
# name (einrun --transport, worker/wk_xport.h), without root and without
# UCX: transport tcp (worker/wk_tcp.c, ZeroMQ over TCP) between pseudo-hosts
# on the loopback gives what the one-host run gives (every buffer poisoned
# between iterations), blocks sent whole and staged in 100-byte messages;
# an unknown name is refused naming it and the known ones; --transport on
# a one-host run is refused (it would mean nothing). test_netns_hosts.sh
# runs tcp between network namespaces against UCX.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
NPYTOOL="$B/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch tr

# leftovers: agents or workers of this scratch directory still running, or
# run directories.
leftovers() {
    l=""
    for f in $(grep -lsaE "einworker|einnode" $(grep -lsaF -- "$S" /proc/[0-9]*/cmdline) \
               /dev/null); do
        f=${f#/proc/}; l="$l process ${f%/cmdline};"
    done
    for f in "$S"/einrun.*; do [ -e "$f" ] && l="$l $f;"; done
    echo "$l"
}

echo "1..4"
write_ffn ffn.ein
if ! "$EINRUN" -q --cpu 4 --output y=one.npy --seed 3 ffn.ein > one.txt 2>&1; then
    echo "Bail out! the one-host run failed: $(cat one.txt)"; exit 1
fi

# tcp NAME [einrun args]: the FFN over 4 pseudo-hosts (one device each)
# with --transport tcp equals the one-host run.
tcp() {
    name=$1; shift
    rm -f two.npy
    t0=$(date +%s%N)
    EIN_POISON=1 "$EINRUN" -q --cpu 4 --fake-hosts 4 --transport tcp --iterations 3 \
        --output y=two.npy --seed 3 "$@" ffn.ein > two.txt 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    left=$(leftovers)
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat two.txt)"
    elif ! "$NPYTOOL" compare one.npy two.npy 1e-5 > cmp.txt 2>&1; then
        not_ok "$name" "differs from the one-host run:" "$(cat cmp.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}
# (the random selector's plan moves 27 blocks, every one between hosts)
tcp "FFN over 4 fake hosts, transport tcp, equals one host" --selector random --plan-seed 3
EIN_XPORT_STAGED=1 EIN_XPORT_CHUNK=100
export EIN_XPORT_STAGED EIN_XPORT_CHUNK
tcp "FFN over 4 fake hosts, transport tcp, staged in 100-byte messages, equals one host" \
    --selector random --plan-seed 3
unset EIN_XPORT_STAGED EIN_XPORT_CHUNK

name="an unknown transport is refused naming it and the known ones"
"$EINRUN" -q --cpu 2 --fake-hosts 2 --transport pigeon ffn.ein > bad.txt 2>&1
rc=$?
left=$(leftovers)
if [ "$rc" -eq 0 ]; then not_ok "$name" "exit status 0" "$(cat bad.txt)"
elif ! grep -q "unknown transport 'pigeon' (known: .*tcp" bad.txt; then
    not_ok "$name" "the message does not say so:" "$(cat bad.txt)"
elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
else ok "$name (exit $rc)"
fi

name="--transport on a one-host run is refused"
"$EINRUN" -q --cpu 2 --transport tcp ffn.ein > bad.txt 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "transport tcp: .*only in a run on several hosts" bad.txt; then
    ok "$name"
else not_ok "$name" "exit status $rc" "$(cat bad.txt)"
fi
