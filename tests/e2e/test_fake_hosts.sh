#!/bin/sh
# tests/e2e/test_fake_hosts.sh — a run on several hosts, without root:
# einrun --fake-hosts 2 splits 4 CPU devices into two pseudo-hosts, each
# with its own agent (einnode); blocks between them move over UCX on the
# loopback. The FFN and a LLaMA block (eingen llama) must give what the
# single-host run gives, with every buffer poisoned between iterations
# (EIN_POISON), and leave nothing behind. Skipped (with the reason) where
# einrun was built without UCX.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
EINGEN="$B/eingen"
NPYTOOL="$B/tests/e2e/npytool"
ROGUE="$B/tests/e2e/zmq_rogue"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch fh

if ! grep -q '^#define HAVE_UCX 1' "$B/config.h" 2>/dev/null; then
    echo "1..0 # SKIP built without UCX (libucx-dev)"
    exit 0
fi

# In a sanitizer build, LeakSanitizer's exit-time tracer crashes now and
# then in a worker that has run UCX's threads ("Tracer caught signal 11",
# seen in CI), failing a right run: leaks are checked by the other tests.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS

shm_before=$(ls /dev/shm | grep '^ein-' | sort)

# leftovers_fh: agents or workers of this scratch directory still running,
# run directories, shared memory of an agent that is gone.
leftovers_fh() {
    l=""
    # (one grep over every command line: a process per /proc entry is slow)
    for f in $(grep -lsaE "einworker|einnode" $(grep -lsaF -- "$S" /proc/[0-9]*/cmdline) \
               /dev/null); do
        f=${f#/proc/}; l="$l process ${f%/cmdline};"
    done
    for f in "$S"/einrun.*; do [ -e "$f" ] && l="$l $f;"; done

    # New shared memory whose owner (the pid in its name: an agent's) is
    # gone; other runs on the machine may come and go meanwhile.
    # A run of another test ends at the same time: its guard removes its
    # files right after its owner is gone, so look twice, 1 s apart.
    cand=""
    for f in $(ls /dev/shm | grep '^ein-' | sort); do
        o=${f#ein-}; o=${o%%-*}
        echo "$shm_before" | grep -qx "$f" || [ -d "/proc/$o" ] || cand="$cand $f"
    done
    [ -n "$cand" ] && sleep 1
    for f in $cand; do [ -e "/dev/shm/$f" ] && l="$l /dev/shm/$f;"; done
    echo "$l"
}

# same NAME HOSTS PLAN OUT TOL [einrun args]: the run on HOSTS fake hosts
# equals the one-host run.
same() {
    name=$1; hosts=$2; plan=$3; out=$4; tol=$5; shift 5
    rm -f one.npy two.npy
    if ! "$EINRUN" -q --cpu 4 --output "$out=one.npy" "$@" "$plan" > one.txt 2>&1; then
        not_ok "$name" "the one-host run failed:" "$(cat one.txt)"; return
    fi
    t0=$(date +%s%N)
    EIN_POISON=1 "$EINRUN" -q --cpu 4 --fake-hosts "$hosts" --iterations 3 --output "$out=two.npy" \
        "$@" "$plan" > two.txt 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    left=$(leftovers_fh)
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat two.txt)"
    elif ! "$NPYTOOL" compare one.npy two.npy "$tol" > cmp.txt 2>&1; then
        not_ok "$name" "differs from the one-host run:" "$(cat cmp.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}

echo "1..11"
write_ffn ffn.ein
# The default (time) plan of this small FFN moves nothing at P = 4; the
# comm plan moves 2 blocks, which cross hosts over 4 hosts (one device
# each). The LLaMA block below moves blocks with the default plan.
same "FFN at P = 4 over 2 fake hosts equals one host" 2 ffn.ein y 1e-5 --seed 3 --objective comm
same "FFN at P = 4 over 4 fake hosts equals one host" 4 ffn.ein y 1e-5 --seed 3 --objective comm
# Blocks between hosts staged through host buffers as a GPU's are
# (worker/wk_staged.h; EIN_XPORT_STAGED=1 makes CPU devices take that path)
# in 100-byte messages (EIN_XPORT_CHUNK): a plan that moves 27 blocks (the
# random selector's), every one between pseudo-hosts.
EIN_XPORT_STAGED=1 EIN_XPORT_CHUNK=100
export EIN_XPORT_STAGED EIN_XPORT_CHUNK
same "FFN over 4 fake hosts, blocks staged in 100-byte chunks, equals one host" 4 ffn.ein y \
    1e-5 --seed 3 --selector random --plan-seed 3
unset EIN_XPORT_STAGED EIN_XPORT_CHUNK
"$EINGEN" llama --seqs 2 --tokens 16 --scale 0.0625 --dtype f32 > llama.ein 2> gen.txt ||
    { cat gen.txt; exit 1; }
same "LLaMA block at P = 4 over 2 fake hosts equals one host" 2 llama.ein \
    "$(sed -n 's/^save \([A-Za-z0-9_]*\).*/\1/p' llama.ein | tail -1)" 1e-4 --seed 5

# Bad use is refused before planning, naming what is wrong (exit 2, as
# --help says of bad usage; no crash).
"$EINRUN" -q --cpu 2 --fake-hosts 3 ffn.ein > bad.txt 2>&1
rc1=$?
"$EINRUN" -q --cpu 2 --fake-hosts 2 --trace t.json ffn.ein > bad2.txt 2>&1
rc2=$?
if [ "$rc1" -eq 2 ] && grep -q "fake hosts: 3 for 2 devices" bad.txt &&
   [ "$rc2" -eq 2 ] && grep -q "several hosts takes no .*trace" bad2.txt &&
   ! grep -q "generating" bad.txt bad2.txt; then
    ok "more fake hosts than devices, or --trace, is refused"
else
    not_ok "more fake hosts than devices, or --trace, is refused" "exit $rc1, $rc2" \
        "$(cat bad.txt bad2.txt)"
fi

# A hosts file (einrun --hosts) that is malformed, or whose devices do not
# add up to the program's, or whose first host is not this machine, is
# refused naming the file and line, before planning (exit 2).
printf '# test\n127.0.0.1 2\n127.0.0.2 two ssh\n' > bad-hosts
printf '127.0.0.1 1\n127.0.0.2 1 ip netns exec x\n' > few-hosts
printf 'dims n=8\ninput x[n]\ny = relu(x)\nsave y\n' > tiny.ein
"$EINRUN" -q --cpu 4 --hosts bad-hosts tiny.ein > bad.txt 2>&1
rc1=$?
"$EINRUN" -q --cpu 4 --hosts few-hosts tiny.ein > bad2.txt 2>&1
rc2=$?
printf '192.0.2.77 2\n127.0.0.2 2 ip netns exec x\n' > far-hosts
"$EINRUN" -q --cpu 4 --hosts far-hosts tiny.ein > bad3.txt 2>&1
rc3=$?
if [ "$rc1" -eq 2 ] && grep -q "bad-hosts:3: expected ADDRESS DEVICES \[LAUNCH...\]" bad.txt &&
   [ "$rc2" -eq 2 ] && grep -q "hosts file few-hosts: 2 hosts with 2 devices in all, for a program on 4 devices" bad2.txt &&
   [ "$rc3" -eq 2 ] && grep -q "192.0.2.77" bad3.txt &&
   ! grep -q "generating" bad.txt bad2.txt bad3.txt; then
    ok "a malformed hosts file, one whose devices do not add up, or whose first host is not this machine, is refused before planning"
else
    not_ok "a malformed hosts file, one whose devices do not add up, or whose first host is not this machine, is refused before planning" \
        "exit $rc1, $rc2, $rc3" "$(cat bad.txt bad2.txt bad3.txt)"
fi

# wait_for FILE PATTERN: until a line of FILE matches (at most 10 s).
wait_for() {
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}

# Control is CURVE-authenticated: a peer without the run's keys that
# claims to be an agent is dropped and reported; the run goes on. A peer
# that keeps trying (ZeroMQ reconnects every 100 ms; here three in a row)
# is reported once and counted: the log stays bounded, with one summary.
rm -f one.npy two.npy
"$EINRUN" -q --cpu 4 --output y=one.npy --seed 3 ffn.ein > one.txt 2>&1
EIN_FAULT=0:slow:3 "$EINRUN" -v --cpu 4 --fake-hosts 2 --output y=two.npy --seed 3 ffn.ein \
    > curve.txt 2>&1 &
pid=$!
wait_for curve.txt "coordinator at tcp://"
ep=$(sed -n 's/.*coordinator at \(tcp:\/\/[0-9.:]*\),.*/\1/p' curve.txt | head -1)
if [ -n "$ep" ]; then "$ROGUE" "$ep" & "$ROGUE" "$ep"; "$ROGUE" "$ep"; fi
wait $pid
rc=$?
ndrop=$(grep -c "dropped" curve.txt)
total=$(sed -n 's/.*dropped \([0-9]*\) unauthenticated connections in all.*/\1/p' curve.txt)
if [ "$rc" -ne 0 ]; then not_ok "an unauthenticated peer is dropped" "exit $rc" "$(cat curve.txt)"
elif ! grep -q "dropped a peer that connected to tcp://.*CURVE handshake" curve.txt; then
    not_ok "an unauthenticated peer is dropped" "not reported:" "$(cat curve.txt)"
elif [ "$ndrop" -ne 2 ] || [ -z "$total" ] || [ "$total" -lt 3 ]; then
    not_ok "an unauthenticated peer is dropped" "not one line and a summary of 3 or more:" \
        "$(grep dropped curve.txt | head -20)"
elif ! "$NPYTOOL" compare one.npy two.npy 1e-5 > cmp.txt 2>&1; then
    not_ok "an unauthenticated peer is dropped" "wrong result:" "$(cat cmp.txt)"
else ok "an unauthenticated peer is dropped and reported; the run is right"
fi

# check_fault NAME PATTERN RC MS LIMIT: exit status 1 within LIMIT ms,
# PATTERN in the report, nothing left on either pseudo-host.
check_fault() {
    name=$1; pat=$2; rc=$3; ms=$4; limit=$5
    left=$(leftovers_fh)
    if [ "$rc" -ne 1 ]; then not_ok "$name" "exit status $rc, expected 1" "$(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then not_ok "$name" "message does not match '$pat':" "$(cat out.txt)"
    elif [ "$ms" -gt "$limit" ]; then not_ok "$name" "took $ms ms, more than $limit"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}

# A host that never connects (its launch command hangs, as ssh does on an
# unreachable host) is reported by name, with the coordinator's address
# and interface, within the connect timeout (+ 2 s); the launcher (a
# script whose child sleeps) and the other host are cleaned up.
printf '#!/bin/sh\nsleep 617\n' > hang.sh
chmod +x hang.sh
printf '127.0.0.1 2\n127.0.0.2 2 %s/hang.sh\n' "$S" > hang-hosts
"$EINRUN" -v --cpu 4 --hosts hang-hosts --connect-timeout 3 tiny.ein > out.txt 2>&1 &
pid=$!
# (timed from the coordinator's start: the agents are started right after)
i=0
while ! grep -q "coordinator at" out.txt && [ -d "/proc/$pid" ] && [ $i -lt 600 ]; do
    sleep 0.02; i=$((i + 1))
done
t0=$(date +%s%N)
i=0
while ! grep -q "did not connect" out.txt && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait $pid
rc=$?
sleepers=$(pgrep -f "sleep 617" | tr '\n' ' ')
name="a host that never connects is reported by name within the connect timeout"
if [ -n "$sleepers" ]; then
    not_ok "$name" "its launcher's child is left: $sleepers"; kill $sleepers 2>/dev/null
elif ! grep -q "coordinator at tcp://127.0.0.1:[0-9]*, interface lo, 2 hosts" out.txt; then
    not_ok "$name" "-v does not print the coordinator's address and interface:" "$(cat out.txt)"
else
    check_fault "$name" "host 1 (127.0.0.2; devices 2-3) did not connect within 3.0 s .*$S/hang.sh.*coordinator at tcp://127.0.0.1:[0-9]* (interface lo)" \
        $rc $ms 5000
fi

# Under AddressSanitizer the SIGSEGV must kill the worker as it would in a
# normal build, not be caught and reported by ASan (as in test_faults.sh).
saved_asan=${ASAN_OPTIONS-}
t0=$(date +%s%N)
ASAN_OPTIONS="${saved_asan:+$saved_asan:}handle_segv=0" EIN_FAULT=3:crash:2 \
    "$EINRUN" -q --cpu 4 --fake-hosts 2 ffn.ein > out.txt 2>&1
rc=$?
check_fault "a remote worker killed is reported naming host, device, operator" \
    "device 3 (pid [0-9]*) failed in instruction 2 (.*operator '.*'): on host 1, einworker pid [0-9]* was killed by signal 11" \
    $rc $(( ($(date +%s%N) - t0) / 1000000 )) 15000

# kill -9 of the agent of host 1 in the middle of a run (device 0 is slow).
EIN_FAULT=0:slow:3 "$EINRUN" -q --cpu 4 --fake-hosts 2 ffn.ein > out.txt 2>&1 &
pid=$!
agent=""
i=0
while [ -z "$agent" ] && [ $i -lt 100 ]; do
    agent=$(pgrep -P $pid -f "einnode .*--host 1 " | head -1); i=$((i + 1)); sleep 0.1
done
sleep 1
t0=$(date +%s%N)
[ -n "$agent" ] && kill -9 "$agent"
wait $pid
rc=$?
check_fault "a remote agent killed is reported naming the host and its devices" \
    "host 1 (agent einnode pid $agent, devices 2-3) was killed by signal 9" \
    $rc $(( ($(date +%s%N) - t0) / 1000000 )) 5000

# kill -9 of the coordinator mid-run: both pseudo-hosts clean themselves
# (the agents die with their guard's kill or watching einrun; their
# workers with them; each agent's guard removes its files) within 5 s.
EIN_FAULT=0:slow:3 "$EINRUN" -q --cpu 4 --fake-hosts 2 ffn.ein > out.txt 2>&1 &
pid=$!
agents=""
i=0
while [ "$(echo $agents | wc -w)" -lt 2 ] && [ $i -lt 100 ]; do
    agents=$(pgrep -P $pid -f "einnode "); i=$((i + 1)); sleep 0.1
done
sleep 1
kill -9 $pid
wait $pid 2>/dev/null
i=0
while [ $i -lt 50 ]; do
    alive=""
    for a in $agents; do [ -d "/proc/$a" ] && alive="$alive $a"; done
    left="$alive$(leftovers_fh)"
    [ -z "$left" ] && break
    i=$((i + 1)); sleep 0.1
done
if [ -z "$agents" ]; then not_ok "the coordinator killed leaves both hosts clean" "no agent seen"
elif [ -n "$left" ]; then not_ok "the coordinator killed leaves both hosts clean" "after 5 s:$left"
else ok "the coordinator killed leaves both hosts clean ($((i * 100)) ms)"
fi
