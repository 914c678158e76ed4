#!/bin/sh
# tests/e2e/test_netns_hosts.sh — a run on two "hosts" that share nothing
# on the network: two network namespaces joined by a veth pair, one agent
# (einnode) in each, started from a hosts file (einrun --hosts, the second
# host's launch command `ip netns exec NS`). Needs root (CI runs as root);
# skipped with the reason where it cannot create namespaces.
#
# The coordinator (einrun) runs in the first namespace, as it would on the
# first host of a cluster: the second host reaches it only over the veth,
# so control (ZeroMQ + CURVE) and data (UCX over TCP) between the hosts
# both cross the link that the last check takes down.
#
# Checks: the FFN and a LLaMA block at P = 4 over the two hosts equal the
# one-host run (buffers poisoned between iterations), and so does each
# with --transport tcp (worker/wk_tcp.c: ZeroMQ over TCP, no UCX), which
# also equals the UCX run; kill -9 of a remote
# worker and of the remote agent, and the remote agent stopped (SIGSTOP:
# a host that stops answering), are reported (with times); the
# coordinator killed leaves both hosts clean (processes, shared memory,
# run directories); `ip link set down` of the veth mid-iteration is
# reported within 5 s naming the host, a device and the operator; and the
# FFN again with the second host's agent started over ssh (a key-only
# sshd in the second namespace, keys made here; skipped without sshd).
set -u
B=${EIN_BUILDDIR:-.}
B=$(cd "$B" && pwd)
EINRUN="$B/einrun"
EINGEN="$B/eingen"
NPYTOOL="$B/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-ns.XXXXXX") || exit 1
export TMPDIR="$S"
NA=ein-a-$$
NB=ein-b-$$
started=""
made_run_sshd=""

# Whatever happens: our processes, the namespaces (with the veth), the
# scratch directory.
cleanup() {
    for p in $started; do kill -9 "$p" 2>/dev/null; done
    ns_del "$NA" "$NB"
    [ -n "$made_run_sshd" ] && rmdir /run/sshd 2>/dev/null
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"

skip() { echo "1..0 # SKIP $1"; exit 0; }
ns_require
ns_add "$NA" 2> ns.txt || skip "cannot create a network namespace: $(cat ns.txt)"
if ! ns_add "$NB" 2> ns.txt || ! ns_veth "$NA" "$NB" ein0 10.77.0.1 10.77.0.2 2> ns.txt; then
    skip "cannot join two network namespaces with a veth pair: $(cat ns.txt)"
fi

# In a sanitizer build, LeakSanitizer's exit-time tracer crashes now and
# then in a worker that has run UCX's threads (as in test_fake_hosts.sh).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
# UCX between the namespaces over TCP on the veth only (both ends are
# named ein0): not shared memory, which the two "hosts" could still use.
UCX_TLS=tcp
UCX_NET_DEVICES=ein0
export UCX_TLS UCX_NET_DEVICES

cat > hosts <<EOF
# address   devices  launch
10.77.0.1   2                            # the coordinator's host
10.77.0.2   2        ip netns exec $NB   # the other "host"
EOF
shm_before=$(ls /dev/shm | grep '^ein-' | sort)

# Processes in either namespace, run directories, new shared memory of
# owners that are gone (looked at twice, 1 s apart, as test_fake_hosts).
leftovers_ns() {
    l=""
    for ns in $NA $NB; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            # (the sshd of the last check, and its sessions, are not the run's)
            [ "$(cat /proc/$p/comm 2>/dev/null)" = sshd ] || l="$l $ns: process $p;"
        done
    done
    for f in "$S"/einrun.*; do [ -e "$f" ] && l="$l $f;"; done
    cand=""
    for f in $(ls /dev/shm | grep '^ein-' | sort); do
        o=${f#ein-}; o=${o%%-*}
        echo "$shm_before" | grep -qx "$f" || [ -d "/proc/$o" ] || cand="$cand $f"
    done
    [ -n "$cand" ] && sleep 1
    for f in $cand; do [ -e "/dev/shm/$f" ] && l="$l /dev/shm/$f;"; done
    echo "$l"
}
# until_clean: wait up to 5 s for leftovers_ns to be empty; its ms in $clean_ms.
until_clean() {
    i=0
    while [ $i -lt 50 ]; do
        left=$(leftovers_ns)
        [ -z "$left" ] && break
        i=$((i + 1)); sleep 0.1
    done
    clean_ms=$((i * 100))
}
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# wait_for FILE PATTERN: until a line of FILE matches (at most 10 s).
wait_for() {
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
# report_ms PATTERN PID T0: ms from T0 until PATTERN is in out.txt (or
# process PID has ended; at most 7.5 s).
report_ms() {
    i=0
    while ! grep -q -- "$1" out.txt && [ -d "/proc/$2" ] && [ $i -lt 150 ]; do
        sleep 0.05; i=$((i + 1))
    done
    ms_since "$3"
}
# in_a CMD...: run CMD in the coordinator's namespace (in the foreground:
# a background run is `ip netns exec` itself, so that $! is einrun's pid).
in_a() { ip netns exec "$NA" "$@"; }

# For the last two checks, the second host's agent started over ssh: sshd
# (key-only, on the veth address of the second namespace) with keys made
# here; the launch line passes the UCX settings and TMPDIR (AcceptEnv), as
# a cluster's environment would set them. Without sshd, the link check
# launches with ip netns exec and the ssh check is skipped.
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
have_ssh=""
sshd_started=""
start_sshd() {
[ -x "$SSHD" ] && command -v ssh > /dev/null 2>&1 && command -v ssh-keygen > /dev/null 2>&1 ||
    return
K="$S/ssh"
mkdir -m 700 "$K"
{ ssh-keygen -q -t ed25519 -N '' -f "$K/host" && ssh-keygen -q -t ed25519 -N '' -f "$K/id"; } ||
    return
cat > "$K/sshd_config" <<EOF
Port 2222
ListenAddress 10.77.0.2
HostKey $K/host
AuthorizedKeysFile $K/id.pub
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile $K/sshd.pid
AcceptEnv UCX_* ASAN_OPTIONS UBSAN_OPTIONS TMPDIR EIN_*
EOF
[ -d /run/sshd ] || { mkdir -p /run/sshd && made_run_sshd=1; }
ip netns exec "$NB" "$SSHD" -D -e -f "$K/sshd_config" 2> "$K/sshd.log" &
started="$!"
sshd_started=1
}
# ssh_ready: sshd listens (5 s at most); then have_ssh=1 and hosts-ssh.
ssh_ready() {
[ -n "$sshd_started" ] || return
SSH="ssh -F /dev/null -i $K/id -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=no"
SSH="$SSH -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o SendEnv=UCX_*"
SSH="$SSH -o SendEnv=ASAN_OPTIONS -o SendEnv=UBSAN_OPTIONS -o SendEnv=TMPDIR -o SendEnv=EIN_*"
i=0
while ! grep -q "Server listening on 10.77.0.2" "$K/sshd.log" && [ $i -lt 50 ]; do
    sleep 0.1; i=$((i + 1))
done
[ $i -lt 50 ] || { echo "# sshd did not start: $(cat "$K/sshd.log")"; return; }
cat > hosts-ssh <<EOF
10.77.0.1   2
10.77.0.2   2   $SSH root@10.77.0.2
EOF
have_ssh=1
}
start_sshd   # now: it starts while the first checks run

echo "1..10"

# same NAME PLAN OUT TOL [einrun args]: the run over the two namespaces
# equals the one-host run.
same() {
    name=$1; plan=$2; out=$3; tol=$4; shift 4
    rm -f one.npy two.npy
    # (compiled once, without memory reuse as for several hosts; every
    # later run loads the saved program: compiling is the slow part of a
    # run in a sanitizer build; the compile flags are the saved program's,
    # and einrun refuses them given again)
    if ! "$EINRUN" -q --cpu 4 --no-reuse --output "$out=one.npy" --save-program "$plan.einprog" \
         "$@" "$plan" > one.txt 2>&1; then
        not_ok "$name" "the one-host run failed:" "$(cat one.txt)"; return
    fi
    t0=$(date +%s%N)
    EIN_POISON=1 in_a "$EINRUN" -q --cpu 4 --hosts hosts --iterations 3 \
        --output "$out=two.npy" "$plan.einprog" > two.txt 2>&1
    rc=$?
    ms=$(ms_since "$t0")
    until_clean
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat two.txt)"
    elif ! grep -q "coordinator at tcp://10.77.0.1:" two.txt; then
        not_ok "$name" "the coordinator's address is not reported:" "$(cat two.txt)"
    elif ! "$NPYTOOL" compare one.npy two.npy "$tol" > cmp.txt 2>&1; then
        not_ok "$name" "differs from the one-host run:" "$(cat cmp.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}

# same_tcp NAME PLAN OUT TOL: the saved program of the last `same` over
# the two namespaces with --transport tcp equals the one-host run and the
# UCX run (both of `same`); its blocks cross the veth (the workers listen
# on the hosts' veth addresses, the route to the coordinator).
same_tcp() {
    name=$1; plan=$2; out=$3; tol=$4
    rm -f tcp.npy
    t0=$(date +%s%N)
    EIN_POISON=1 in_a "$EINRUN" -q --cpu 4 --hosts hosts --iterations 3 --transport tcp \
        --output "$out=tcp.npy" "$plan.einprog" > tcp.txt 2>&1
    rc=$?
    ms=$(ms_since "$t0")
    until_clean
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat tcp.txt)"
    elif ! [ -f two.npy ]; then not_ok "$name" "no UCX run to compare with"
    elif ! "$NPYTOOL" compare one.npy tcp.npy "$tol" > cmp.txt 2>&1; then
        not_ok "$name" "differs from the one-host run:" "$(cat cmp.txt)"
    elif ! "$NPYTOOL" compare two.npy tcp.npy "$tol" > cmp.txt 2>&1; then
        not_ok "$name" "differs from the UCX run:" "$(cat cmp.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}

write_ffn ffn.ein
same "FFN at P = 4 over two namespaces equals one host" ffn.ein y 1e-5 --seed 3 --objective comm
same_tcp "FFN at P = 4 over two namespaces, transport tcp, equals one host and UCX" ffn.ein y 1e-5
cp one.npy ffn-one.npy 2>/dev/null
"$EINGEN" llama --seqs 2 --tokens 16 --scale 0.0625 --dtype f32 > llama.ein 2> gen.txt ||
    { cat gen.txt; exit 1; }
lout=$(sed -n 's/^save \([A-Za-z0-9_]*\).*/\1/p' llama.ein | tail -1)
same "LLaMA block at P = 4 over two namespaces equals one host" llama.ein "$lout" 1e-4 --seed 5
same_tcp "LLaMA block at P = 4 over two namespaces, transport tcp, equals one host and UCX" \
    llama.ein "$lout" 1e-4

# check_fault NAME PATTERN RC MS LIMIT: exit status 1 within LIMIT ms,
# PATTERN in the report, both hosts clean.
check_fault() {
    name=$1; pat=$2; rc=$3; ms=$4; limit=$5
    until_clean
    if [ "$rc" -ne 1 ]; then not_ok "$name" "exit status $rc, expected 1" "$(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then not_ok "$name" "message does not match '$pat':" "$(cat out.txt)"
    elif [ "$ms" -gt "$limit" ]; then not_ok "$name" "took $ms ms, more than $limit" "$(cat out.txt)"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    else ok "$name ($ms ms)"
    fi
}

# A worker of the remote host crashes (as kill -9 would end it; SIGSEGV so
# that the instruction is known): its agent reports it.
saved_asan=${ASAN_OPTIONS-}
t0=$(date +%s%N)
ASAN_OPTIONS="${saved_asan:+$saved_asan:}handle_segv=0" EIN_FAULT=3:crash:2 \
    in_a "$EINRUN" -q --cpu 4 --hosts hosts ffn.ein.einprog > out.txt 2>&1
rc=$?
check_fault "a remote worker killed is reported naming host, device, operator" \
    "device 3 (pid [0-9]*) failed in instruction 2 (.*operator '.*'): on host 1, einworker pid [0-9]* was killed by signal 11" \
    $rc "$(ms_since "$t0")" 15000

# remote_agent: the pid of the agent in the second namespace (10 s at
# most): the einnode whose parent is not an einnode (its guard is one).
remote_agent() {
    agent=""
    i=0
    while [ -z "$agent" ] && [ $i -lt 100 ]; do
        for p in $(ip netns pids "$NB" 2>/dev/null); do
            pp=$(sed 's/.*) [A-Z] \([0-9]*\).*/\1/' /proc/$p/stat 2>/dev/null)
            [ "$(cat /proc/$p/comm 2>/dev/null)" = einnode ] &&
                [ "$(cat /proc/$pp/comm 2>/dev/null)" != einnode ] && agent=$p
        done
        [ -z "$agent" ] && { i=$((i + 1)); sleep 0.1; }
    done
}

# kill -9 of the remote agent mid-run (device 2, its own, is slow: the
# devices of the first host wait for it, and stop at once).
EIN_FAULT=2:slow:3 ip netns exec "$NA" "$EINRUN" -q --cpu 4 --hosts hosts ffn.ein.einprog > out.txt 2>&1 &
pid=$!
started="$pid"
remote_agent
sleep 0.5
t0=$(date +%s%N)
[ -n "$agent" ] && kill -9 "$agent"
pat="host 1 (10.77.0.2; devices 2-3): its agent ended; its launcher (ip, pid [0-9]*) "
ms=$(report_ms "$pat" $pid "$t0")
wait $pid
rc=$?
check_fault "the remote agent killed is reported naming the host and its devices" \
    "$pat" $rc "$ms" 5000

# A host that stops answering (its agent stopped with SIGSTOP: nothing it
# relays arrives any more, its workers wait) is reported after the silence
# the heartbeats allow (about 3 s), naming the host and where each of its
# devices was; then both hosts are clean.
EIN_FAULT=2:slow:3 ip netns exec "$NA" "$EINRUN" -q --cpu 4 --hosts hosts ffn.ein.einprog > out.txt 2>&1 &
pid=$!
started="$pid"
remote_agent
sleep 0.5
t0=$(date +%s%N)
[ -n "$agent" ] && kill -STOP "$agent"
pat="host 1 (10.77.0.2) stopped answering, or the link to it is down: nothing from device [23] for [0-9.]* s (limit [0-9.]* s); last seen: device 2 "
ms=$(report_ms "$pat" $pid "$t0")
wait $pid
rc=$?
check_fault "a host that stops answering is reported within 5 s naming host and devices" \
    "$pat" $rc "$ms" 5000

# kill -9 of the coordinator mid-run: both hosts clean themselves.
EIN_FAULT=0:slow:3 ip netns exec "$NA" "$EINRUN" -q --cpu 4 --hosts hosts ffn.ein.einprog > out.txt 2>&1 &
pid=$!
started="$pid"
remote_agent
sleep 0.5
[ "$(cat /proc/$pid/comm 2>/dev/null)" = einrun ] || echo "# $pid is not einrun"
kill -9 $pid
wait $pid 2>/dev/null
until_clean
if [ -z "$agent" ]; then not_ok "the coordinator killed leaves both hosts clean" "no remote agent seen"
elif [ -n "$left" ]; then not_ok "the coordinator killed leaves both hosts clean" "after 5 s:$left"
else ok "the coordinator killed leaves both hosts clean ($clean_ms ms)"
fi

ssh_ready
# The link goes down mid-iteration: reported within 5 s (the time from
# `ip link set down` to the report), naming the host, a device and the
# operator it was in; then both hosts are clean: over ssh, the remote
# agent cannot be told (the link is down) and stops by itself when its
# heartbeats with the coordinator go unanswered (einnode --keys-stdin).
hf=hosts
[ -n "$have_ssh" ] && hf=hosts-ssh
EIN_FAULT=2:slow:3 ip netns exec "$NA" "$EINRUN" -q --cpu 4 --hosts $hf ffn.ein.einprog > out.txt 2>&1 &
pid=$!
started="$pid"
remote_agent
sleep 1.5
t0=$(date +%s%N)
ip -n "$NB" link set ein0 down
pat="host 1 (10.77.0.2) stopped answering, or the link to it is down: nothing from device [23] for [0-9.]* s (limit [0-9.]* s); last seen: .*device [23] in instruction [0-9]* (.*operator '.*')"
ms=$(report_ms "$pat" $pid "$t0")
wait $pid
rc=$?
started=""
ip -n "$NB" link set ein0 up
check_fault "the link down mid-iteration is reported naming host, device, operator${have_ssh:+ (over ssh)}" \
    "$pat" $rc "$ms" 5000


name="FFN at P = 4 with the second host's agent started over ssh equals one host"
if [ -z "$have_ssh" ]; then
    ok "$name # SKIP no sshd or ssh (Debian openssh-server, openssh-client), or it did not start"
    exit 0
fi
rm -f two.npy
t0=$(date +%s%N)
EIN_POISON=1 in_a "$EINRUN" -q --cpu 4 --hosts hosts-ssh --iterations 3 --output y=two.npy \
    --seed 3 ffn.ein.einprog > two.txt 2>&1
rc=$?
ms=$(ms_since "$t0")
until_clean
if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat two.txt "$K/sshd.log")"
elif ! "$NPYTOOL" compare ffn-one.npy two.npy 1e-5 > cmp.txt 2>&1; then
    not_ok "$name" "differs from the one-host run (the first check's):" "$(cat cmp.txt)"
elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
else ok "$name ($ms ms)"
fi
