#!/bin/sh
# tests/e2e/test_backend.sh — the backend einrun takes (TAP). --gpus runs
# the CUDA backend on a CUDA build that sees GPUs and CPU devices otherwise
# (saying why, in one line); --backend cpu forces CPU devices, --backend
# cuda without a GPU is an error; a backend with no row of the registry
# (common/ir/ein_backend.c) is refused by name by einworker and einnode, and
# einnode's --gpus goes only with a backend of numbered devices.
# $EIN_GPU_VISIBLE stands in for the GPU machine; a stand-in worker
# answers the GPU probe and records the arguments it was started with. No
# GPU is needed.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-backend.XXXXXX") || exit 1
export TMPDIR="$S"
trap 'rm -rf "$S"' EXIT
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"
unset CUDA_VISIBLE_DEVICES EIN_GPU_VISIBLE

write_ffn ffn.ein
{ echo "einprobe 1"; echo "gpu 0 NVIDIA H100 80GB HBM3"; echo "gpu 1 NVIDIA H100 80GB HBM3"
  echo "peer 0 1 1 0"; echo "peer 1 0 1 0"; } > h100.probe
# A worker that answers --probe and otherwise writes its arguments and fails.
printf '#!/bin/sh\nif [ "$1" = --probe ]; then cat "%s/h100.probe"; exit 0; fi\necho "$*" >> "%s/args.txt"\nexit 7\n' \
    "$S" "$S" > rec.sh
chmod +x rec.sh
cuda=0
[ -x "$B/einworker-cuda" ] && cuda=1

# run NAME STATUS PATTERN -- einrun args: exit status and PATTERN in stderr.
run() {
    name=$1; want=$2; pat=$3; shift 4
    rm -f args.txt y.npy
    "$EINRUN" "$@" > out.txt 2> err.txt
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        not_ok "$name" "exit status $rc, expected $want" "$(cat out.txt err.txt)"
    elif [ -n "$pat" ] && ! grep -q -- "$pat" err.txt; then
        not_ok "$name" "stderr does not match '$pat':" "$(cat err.txt)"
    else
        ok "$name"
    fi
}
# workers_had NAME TEXT: every recorded worker command line holds TEXT.
workers_had() {
    if [ ! -s args.txt ]; then not_ok "$1" "no worker started"
    elif grep -v -q -- "$2" args.txt; then not_ok "$1" "a worker without '$2':" "$(cat args.txt)"
    else ok "$1"; fi
}
workers_lacked() {
    if [ ! -s args.txt ]; then not_ok "$1" "no worker started"
    elif grep -q -- "$2" args.txt; then not_ok "$1" "a worker with '$2':" "$(cat args.txt)"
    else ok "$1"; fi
}

echo "1..19"
# No GPU visible: CPU devices, one line saying so, and the run succeeds.
EIN_GPU_VISIBLE=0 run "no GPU: CPU devices" 0 \
    "^einrun: no GPU visible; running 2 CPU devices for --gpus 0-1$" -- --gpus 0-1 ffn.ein
n=$(grep -c "CPU device" err.txt)
if [ "$n" -eq 1 ]; then ok "no GPU: said once"; else not_ok "no GPU: said once" "$n lines" "$(cat err.txt)"; fi
CUDA_VISIBLE_DEVICES= EIN_GPU_VISIBLE= run "CUDA_VISIBLE_DEVICES empty: CPU devices" 0 \
    "^einrun: no GPU visible; running 1 CPU device for --gpus 0$" -- --gpus 0 ffn.ein
CUDA_VISIBLE_DEVICES=-1 run "CUDA_VISIBLE_DEVICES=-1: CPU devices" 0 \
    "^einrun: no GPU visible; running 1 CPU device for --gpus 0$" -- ffn.ein
EIN_GPU_VISIBLE=0 run "--backend cuda, no GPU" 2 "^einrun: --backend cuda: " -- --gpus 0 --backend cuda ffn.ein
EIN_GPU_VISIBLE=yes run "bad EIN_GPU_VISIBLE" 2 "EIN_GPU_VISIBLE 'yes': expected 0 or 1" -- --gpus 0 ffn.ein
# --cpu and --backend cpu: CPU devices, silently, GPUs or not.
EIN_GPU_VISIBLE=1 run "--cpu with GPUs" 0 "" -- --cpu 2 --worker "$B/einworker" ffn.ein
if grep -q "CPU device\|topology: " err.txt; then not_ok "--cpu: no notice" "$(cat err.txt)"; else ok "--cpu: no notice"; fi
if [ "$cuda" -eq 1 ]; then
    # GPUs visible on a CUDA build: --gpus runs the CUDA backend with no
    # other flag (the topology from the probe, workers told --backend cuda).
    EIN_GPU_VISIBLE=1 run "GPUs: the CUDA backend" 1 "topology: " -- --gpus 0-1 --worker "$S/rec.sh" ffn.ein
    workers_had "GPUs: workers run --backend cuda" "--backend cuda --gpu [01]"
    if grep -q "CPU device" err.txt; then not_ok "GPUs: no CPU notice" "$(cat err.txt)"; else ok "GPUs: no CPU notice"; fi
    EIN_GPU_VISIBLE=1 run "GPUs, --backend cpu" 1 "" -- --gpus 0-1 --backend cpu --topology host --worker "$S/rec.sh" ffn.ein
    workers_lacked "GPUs, --backend cpu: CPU workers" "--backend cuda"
    EIN_GPU_VISIBLE=1 run "GPUs: --show-topology probes them" 0 "" -- --gpus 0-1 --worker "$S/rec.sh" --show-topology
    if grep -q "^gpus 2$" out.txt && grep -q "detected from" out.txt; then ok "GPUs: detected topology"
    else not_ok "GPUs: detected topology" "$(cat out.txt err.txt)"; fi
else
    EIN_GPU_VISIBLE=1 run "GPUs, built without CUDA" 0 \
        "^einrun: built without CUDA; running 2 CPU devices for --gpus 0-1$" -- --gpus 0-1 ffn.ein
    EIN_GPU_VISIBLE=1 run "--backend cuda, built without CUDA" 2 "built without CUDA" -- --gpus 0 --backend cuda ffn.ein
    for i in 1 2 3 4 5; do ok "# SKIP CUDA build only"; done
fi
# cmd NAME PATTERN -- command: exit status 2 and PATTERN in its stderr.
cmd() {
    name=$1; pat=$2; shift 3
    "$@" > out.txt 2> err.txt
    rc=$?
    if [ "$rc" -ne 2 ]; then not_ok "$name" "exit status $rc, expected 2" "$(cat out.txt err.txt)"
    elif ! grep -q -- "$pat" err.txt; then not_ok "$name" "stderr does not match '$pat':" "$(cat err.txt)"
    else ok "$name"; fi
}
node="--coordinator tcp://127.0.0.1:9 --host 1 --devices 0 --ndevices 1 --worker $B/einworker"
cmd "einworker --backend tpu" "^einworker: --backend 'tpu': expected cpu or cuda$" -- \
    "$B/einworker" --backend tpu --device 0 --ndevices 1
cmd "einnode --backend tpu" "^einnode: --backend 'tpu': expected cpu or cuda$" -- \
    "$B/einnode" $node --backend tpu
cmd "einnode --gpus without a backend" "^einnode: --gpus: backend cpu has no numbered devices" -- \
    "$B/einnode" $node --gpus 0
cmd "einnode --backend cuda without --gpus" "^einnode: --backend cuda: give --gpus" -- \
    "$B/einnode" $node --backend cuda
