#!/bin/sh
# tests/e2e/test_topology.sh — the topology einrun synthesises exchanges
# for: --show-topology for CPU devices, --topology, and topologies detected
# from a saved GPU probe (--gpu-probe) or from the probe of a stand-in
# worker (--backend cuda --worker SCRIPT); bad probes end with exit 2 and a
# message naming FILE:LINE (TAP). No GPU is needed.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch topo

write_ffn ffn.ein
# probe N NAME: what einworker-cuda --probe prints for N GPUs named NAME,
# every pair peer-accessible.
probe() {
    echo "einprobe 1"
    g=0; while [ $g -lt "$1" ]; do echo "gpu $g $2"; g=$((g + 1)); done
    a=0; while [ $a -lt "$1" ]; do
        b=0; while [ $b -lt "$1" ]; do
            [ $a -ne $b ] && echo "peer $a $b 1 0"; b=$((b + 1))
        done; a=$((a + 1))
    done
}
probe 8 "NVIDIA H200" > h200.probe
sed '4s/.*/gpu 9 NVIDIA H200/' h200.probe > bad.probe
printf '#!/bin/sh\n[ "$1" = --probe ] || exit 9\ncat "%s/h200.probe"\n' "$S" > probe-ok.sh
printf '#!/bin/sh\necho "einworker-cuda --probe: no CUDA device visible" >&2\nexit 1\n' > probe-fail.sh
cp "$(command -v sleep)" ein-sleep
printf '#!/bin/sh\n"%s/ein-sleep" 30\n' "$S" > probe-hang.sh
chmod +x probe-ok.sh probe-fail.sh probe-hang.sh

# expect NAME STATUS PATTERN -- einrun args: the exit status, PATTERN in
# stdout + stderr, nothing left behind.
expect() {
    name=$1; want=$2; pat=$3; shift 4
    "$EINRUN" "$@" > out.txt 2> err.txt &
    pid=$!
    wait $pid
    rc=$?
    left=$(leftovers $pid)
    if [ "$rc" -ne "$want" ]; then
        not_ok "$name" "exit status $rc, expected $want" "$(cat out.txt err.txt)"
    elif ! cat out.txt err.txt | grep -q -- "$pat"; then
        not_ok "$name" "output does not match '$pat':" "$(cat out.txt err.txt)"
    elif [ -n "$left" ]; then
        not_ok "$name" "left behind:$left"
    else
        ok "$name"
    fi
}

# has NAME TEXT: out.txt holds the line TEXT.
has() {
    if grep -qx -- "$2" out.txt; then ok "$1"; else not_ok "$1" "no line '$2' in:" "$(cat out.txt)"; fi
}

echo "1..28"
expect "help"                  0 "--gpu-probe FILE"                 -- --help
expect "H200 probe"            0 "^name hgx-h200$"                  -- --gpus 0-7 --gpu-probe h200.probe --show-topology
has "H200: 8 GPUs"             "gpus 8"
has "H200: NVLink port"        "port 450 GB/s"
has "H200: switch"             "rest direct"
if grep -qx "einrun: topology: 8 x NVIDIA H200, all pairs peer-accessible: hgx-h200" err.txt; then
    ok "says what it detected"
else
    not_ok "says what it detected" "$(cat err.txt)"
fi
# What --show-topology prints is a topology file that reads back the same.
grep -v '^#' out.txt > h200.topo
expect "printed topology reads back" 0 "^name hgx-h200$"    -- --gpus 0-7 --topology ./h200.topo --show-topology
if [ "$(grep -v '^#' out.txt)" = "$(cat h200.topo)" ]; then ok "same text again"; else not_ok "same text again" "$(cat out.txt)"; fi
expect "4 of 8 H200"           0 "^gpus 4$"                         -- --gpus 0-3 --gpu-probe h200.probe --show-topology
has "4 of 8: generated"        "name detected"
expect "workers on one GPU"    0 "^shared hbm-gpu0 2.4 TB/s$"      -- --gpus 0,0,0,0 --gpu-probe h200.probe --show-topology
expect "malformed probe"       2 "bad.probe:4:1: expected gpu 2 next" -- --gpus 0-7 --gpu-probe bad.probe --show-topology
if grep -q -- "--topology" err.txt; then ok "malformed probe: suggests --topology"; else not_ok "suggests --topology" "$(cat err.txt)"; fi
expect "missing probe file"    2 "nosuch.probe: cannot open"       -- --gpus 0-1 --gpu-probe nosuch.probe --show-topology
expect "GPU not in the probe"  2 "GPU 9 is not in the probe, which saw 8 GPUs" -- --gpus 0,9 --gpu-probe h200.probe --show-topology
expect "probe with --cpu"      2 "use --gpus, not --cpu"            -- --cpu 2 --gpu-probe h200.probe --show-topology
expect "probe and --topology"  2 "not both"                         -- --gpus 0-1 --gpu-probe h200.probe --topology host --show-topology
expect "CPU devices: host"     0 "^name host$"                      -- --cpu 3 --show-topology
has "host sized to 3"          "gpus 3"
expect "--gpus on CPU: host"   0 "^gpus 5$"                         -- --gpus 0-4 --show-topology
expect "probe run by einrun"   0 "^name hgx-h200$"                  -- --gpus 0-7 --backend cuda --worker ./probe-ok.sh --show-topology
expect "probe fails"           2 "probe-fail.sh --probe exited with status 1: einworker-cuda --probe: no CUDA device visible; give --topology" \
                                                                    -- --gpus 0-1 --backend cuda --worker ./probe-fail.sh --show-topology
# A hung probe is killed with its children (the script and its sleep).
start=$(date +%s)
export EIN_PROBE_TIMEOUT_S=1
expect "probe hangs" 2 "did not finish within 1 s" -- --gpus 0-1 --backend cuda --worker ./probe-hang.sh --show-topology
unset EIN_PROBE_TIMEOUT_S
took=$(( $(date +%s) - start ))
sleep 0.2
alive=""
for p in /proc/[0-9]*; do
    c=$( (tr '\0' ' ' < "$p/cmdline") 2>/dev/null) || continue
    case "$c" in *"$S/ein-sleep"*) alive="$alive ${p#/proc/}" ;; esac
done
# The probe sleeps 30 s: finishing well before that means it was killed
# (not waited out). The margin is wide because a loaded 2-core machine
# took 6-13 s for 1 s timeouts and the einrun around them.
if [ "$took" -le 25 ] && [ -z "$alive" ]; then ok "hung probe killed in ${took}s"; else not_ok "hung probe killed in ${took}s" "left:$alive"; fi
expect "a run on a detected topology" 0 "saved y \[37, 24\] f32"    -- --gpus 0,0,1,1 --gpu-probe h200.probe ffn.ein
if grep -q "einrun: topology: 4 workers on 2 x NVIDIA H200" err.txt; then ok "run: says what it detected"; else not_ok "run: says what it detected" "$(cat err.txt)"; fi
"$B/einworker" --probe > out.txt 2> err.txt
rc=$?
if [ $rc -eq 2 ] && grep -q "this einworker has no CUDA backend" err.txt; then
    ok "CPU einworker refuses --probe"
else
    not_ok "CPU einworker refuses --probe" "exit $rc" "$(cat err.txt)"
fi
# The real probe: on a GPU machine its output must read back; without a
# GPU it fails with a message and prints nothing on stdout.
if [ -x "$B/einworker-cuda" ]; then
    "$B/einworker-cuda" --probe > real.probe 2> err.txt
    rc=$?
    if [ $rc -eq 0 ]; then
        expect "einworker-cuda --probe reads back" 0 "^name " -- --gpus 0 --gpu-probe real.probe --show-topology
    elif [ ! -s real.probe ] && grep -q "^einworker-cuda --probe: " err.txt; then
        ok "einworker-cuda --probe without a usable GPU: exit $rc, $(head -n 1 err.txt)"
    else
        not_ok "einworker-cuda --probe" "exit $rc" "$(cat real.probe err.txt)"
    fi
else
    ok "einworker-cuda --probe # SKIP built without CUDA"
fi
[ "$n" -eq 28 ] || echo "# planned 28 tests but ran $n"
exit 0
