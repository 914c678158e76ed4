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
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-fh.XXXXXX") || exit 1
export TMPDIR="$S"
trap 'rm -rf "$S"' EXIT
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"

if ! grep -q '^#define HAVE_UCX 1' "$B/config.h" 2>/dev/null; then
    echo "1..0 # SKIP built without UCX (libucx-dev)"
    exit 0
fi

shm_before=$(ls /dev/shm | grep '^ein-' | sort)

# leftovers_fh: agents or workers of this scratch directory still running,
# run directories, shared memory that was not there before.
leftovers_fh() {
    l=""
    for p in /proc/[0-9]*; do
        c=$( (tr '\0' ' ' < "$p/cmdline") 2>/dev/null) || continue
        case "$c" in *einworker*"$S"*|*einnode*"$S"*) l="$l process ${p#/proc/};" ;; esac
    done
    for f in "$S"/einrun.*; do [ -e "$f" ] && l="$l $f;"; done

    for f in $(ls /dev/shm | grep '^ein-' | sort); do
        echo "$shm_before" | grep -qx "$f" || l="$l /dev/shm/$f;"
    done
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

echo "1..4"
write_ffn ffn.ein
# The FFN's plan aggregates inside a host at P = 4 over 2 hosts; over 4
# hosts every block that moves crosses hosts.
same "FFN at P = 4 over 2 fake hosts equals one host" 2 ffn.ein y 1e-5 --seed 3
same "FFN at P = 4 over 4 fake hosts equals one host" 4 ffn.ein y 1e-5 --seed 3
"$EINGEN" llama --seqs 2 --tokens 16 --scale 0.0625 --dtype f32 > llama.ein 2> gen.txt ||
    { cat gen.txt; exit 1; }
same "LLaMA block at P = 4 over 2 fake hosts equals one host" 2 llama.ein \
    "$(sed -n 's/^save \([A-Za-z0-9_]*\).*/\1/p' llama.ein | tail -1)" 1e-4 --seed 5

# Bad use is refused, naming what is wrong.
"$EINRUN" -q --cpu 2 --fake-hosts 3 ffn.ein > bad.txt 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "fake hosts: 3 for 2 devices" bad.txt; then
    ok "more fake hosts than devices is refused"
else
    not_ok "more fake hosts than devices is refused" "exit $rc" "$(cat bad.txt)"
fi
