# tests/e2e/lib.sh — shared by the shell end-to-end tests (sourced, not run,
# after setting $SRC, the source tree). Its functions use $S, the test's
# scratch directory (scratch NAME makes it).

. "$SRC/tests/tap.sh" # ok, not_ok, check

# scratch NAME: $S, a new directory (${TMPDIR:-/tmp}/ein-NAME.XXXXXX) that
# is also TMPDIR, removed when the script exits, and the current directory.
scratch() {
    S=$(mktemp -d "${TMPDIR:-/tmp}/ein-$1.XXXXXX") || exit 1
    export TMPDIR="$S"
    trap 'rm -rf "$S"' EXIT
    cd "$S" || exit 1
}

# require_numpy: the TAP skip of the whole script when $PY has no NumPy.
require_numpy() {
    if ! "$PY" -c 'import numpy' 2>/dev/null; then
        echo "1..0 # SKIP $PY has no numpy (Debian: python3-numpy)"
        exit 0
    fi
}

# sanitized_python_env: in a sanitizer build ($EIN_SAN_CFLAGS names
# -fsanitize=address; tests/python/local.am exports it), a Python process
# can load the ASan-built libeinsummable only when the ASan runtime is its
# first library: export LD_PRELOAD (ASan, and UBSan where there is one) and
# ASAN_OPTIONS with detect_leaks=0 (Python's own allocations are not ours
# to report). Call it in the subshell that runs Python. Returns 1, having
# changed nothing, when no libasan.so can be found; 0 otherwise.
sanitized_python_env() {
    case "${EIN_SAN_CFLAGS:-}" in
    *sanitize=address*)
        _asan=$(${EIN_CC:-cc} -print-file-name=libasan.so 2>/dev/null)
        [ -n "$_asan" ] && [ -f "$_asan" ] || return 1
        _ubsan=$(${EIN_CC:-cc} -print-file-name=libubsan.so 2>/dev/null)
        [ -f "$_ubsan" ] || _ubsan=""
        LD_PRELOAD="$_asan${_ubsan:+ $_ubsan}"
        export LD_PRELOAD
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
        export ASAN_OPTIONS
        ;;
    esac
    return 0
}

# leftovers PID: what a run of einrun PID left behind: worker processes of
# this scratch directory, its shared memory, run directories, temporary
# output files and kept old outputs. Prints nothing when clean.
leftovers() {
    l=""
    for p in /proc/[0-9]*; do
        c=$( (tr '\0' ' ' < "$p/cmdline") 2>/dev/null) || continue
        case "$c" in *einworker*"$S"*) l="$l process ${p#/proc/};" ;; esac
    done
    for f in /dev/shm/ein-"$1"-*; do [ -e "$f" ] && l="$l $f;"; done
    for f in "$S"/einrun.* "$S"/*.einrun-tmp-* "$S"/*.einrun-old-*; do
        { [ -e "$f" ] || [ -L "$f" ]; } && l="$l $f;"
    done
    echo "$l"
}

# The FFN of the paper's §2 at small odd sizes.
write_ffn() {
    cat > "$1" <<'EIN'
dims tokens=37 d_model=24 d_ff=50
input x[tokens, d_model]
input w1[d_model, d_ff]
input w2[d_ff, d_model]
act    = matmul(x, w1)
hidden = relu(act)
y      = matmul(hidden, w2)
save y
EIN
}

# Lines of a run's output, leaving out the sanitizers' own warnings (an ASan
# build may print one about stack bounds after a fork; it is not einrun's)
# and the line that names the inputs a demo run generates (no --input).
out_lines() {
    grep -v -e '^==[0-9]*==WARNING: ASan' -e '^False positive error reports may follow' \
        -e '^For details see https://github.com/google/sanitizers' \
        -e '^einrun: generating .* from --seed [0-9]* (no input given)$' "$1" | grep -c .
}

# Network namespaces (the tests of several "hosts"; they need root). Each
# function reports ip's own message on stderr and fails with it, so that a
# caller can skip naming the reason.
# ns_add NS: a namespace with its loopback up.
ns_add() {
    ip netns add "$1" && ip -n "$1" link set lo up
}
# ns_veth NSA NSB LINK ADDR_A ADDR_B: a veth pair joining the two, named
# LINK in both, ADDR_A/24 and ADDR_B/24, up (the ends are created as
# xLINKPID and yLINKPID in the root namespace, then moved and renamed).
ns_veth() {
    ip link add "x$3$$" type veth peer name "y$3$$" &&
    ip link set "x$3$$" netns "$1" && ip link set "y$3$$" netns "$2" &&
    ip -n "$1" link set "x$3$$" name "$3" && ip -n "$2" link set "y$3$$" name "$3" &&
    ip -n "$1" addr add "$4/24" dev "$3" && ip -n "$2" addr add "$5/24" dev "$3" &&
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$3" up
}
# ns_limit NS DEV RATE: at most RATE (tc's units: 1gbit) out of DEV in NS
# (a token bucket; on both ends, both directions of the link).
ns_limit() {
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$3" burst 128kb latency 100ms
}
# ns_del NS...: every process left in the namespaces killed, then the
# namespaces deleted (with the veth ends in them). Quiet; for cleanup.
ns_del() {
    for ns in "$@"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    done
    sleep 0.2
    for ns in "$@"; do ip netns del "$ns" 2>/dev/null; done
    return 0
}

# ns_require [CMD...]: a namespace test's requirements (UCX, root, ip and
# each CMD given, e.g. tc); prints the TAP skip naming the first one
# missing and exits.
ns_require() {
    if ! grep -q '^#define HAVE_UCX 1' "$B/config.h" 2>/dev/null; then
        echo "1..0 # SKIP built without UCX (libucx-dev)"; exit 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "1..0 # SKIP needs root to create network namespaces"; exit 0
    fi
    for c in ip "$@"; do
        if ! command -v "$c" > /dev/null 2>&1; then
            echo "1..0 # SKIP no $c command (iproute2)"; exit 0
        fi
    done
}

# write_two_hosts MEMORY: in the current directory, `host1` (one CPU device
# of the host topology with MEMORY) and `topo`: two of them joined by a
# 1 Gbit/s NIC (117.7 MB/s, 50 us), as a veth limited by ns_limit 1gbit is.
write_two_hosts() {
    cat > host1 <<TOPO
name host1
gpus 1
hbm 20 GB/s
peak 80 GFLOP/s
port 20 GB/s
shared membus 80 GB/s
rest via membus
latency 30 us
memory $1
calibration host
TOPO
    cat > topo <<TOPO
name 2x-host1-1gbit
nodes 2
node $(pwd)/host1
nic 117.7 MB/s
latency-inter 50 us
TOPO
}
