#!/bin/sh
# tests/e2e/test_backend.sh — the backend einrun takes (TAP). --gpus runs
# the CUDA backend on a CUDA build that sees GPUs and CPU devices otherwise
# (saying why, in one line); --backend cpu forces CPU devices, --backend
# cuda without a GPU is an error; a backend with no row of the registry
# (common/ir/ein_backend.c) is refused by name by einworker and einnode, and
# einnode's --gpus goes only with a backend of numbered devices; the
# worker options (common/process/ein_worker_args.def) are refused by flag when
# malformed and documented by einworker/einnode --help; einrun --help
# lists the backend rows.
# $EIN_GPU_VISIBLE stands in for the GPU machine; a stand-in worker
# answers the GPU probe and records the arguments it was started with. No
# GPU is needed.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch backend
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

echo "1..24"
# No GPU visible: CPU devices, one line saying so, and the run succeeds.
EIN_GPU_VISIBLE=0 run "no GPU: CPU devices" 0 \
    "^einrun: no GPU visible; running 2 CPU devices for --gpus 0-1$" -- --gpus 0-1 ffn.ein
lines=$(grep -c "CPU device" err.txt) # not $n: that counts the tests (tests/tap.sh)
if [ "$lines" -eq 1 ]; then ok "no GPU: said once"; else not_ok "no GPU: said once" "$lines lines" "$(cat err.txt)"; fi
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
    # each on its own GPU: --gpu 1 for device 1; device 0's --gpu 0 is the
    # default, which the worker options' encoder leaves out
    workers_had "GPUs: workers run --backend cuda" "--backend cuda"
    if grep -q -- "--device 1 .*--gpu 1\( \|\$\)" args.txt &&
            ! grep -q -- "--device 0 .*--gpu [1-9]" args.txt; then
        ok "GPUs: device 1 on GPU 1, device 0 on GPU 0"
    else not_ok "GPUs: device 1 on GPU 1, device 0 on GPU 0" "$(cat args.txt)"; fi
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
    for i in 1 2 3 4 5 6; do ok "# SKIP CUDA build only"; done
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
# einworker's and einnode's options are the rows of common/process/ein_worker_args.def:
# malformed numbers are refused by flag, and --help documents every row
# (einnode: those of RUN scope, which it passes on to its workers).
cmd "einworker --device x" "^einworker: --device 'x': expected an integer$" -- \
    "$B/einworker" --device x --ndevices 1
cmd "einnode --iterations 2x" "^einnode: --iterations '2x': expected an integer$" -- \
    "$B/einnode" $node --iterations 2x
"$B/einworker" --help > wh.txt 2>&1
"$B/einnode" --help > nh.txt 2>&1
miss=""
rows=$(sed -n 's/^EIN_WARG([a-z_]*, [A-Z]*, "\([a-z-]*\)", \([A-Z]*\),.*/\1:\2/p' \
    "$SRC/common/process/ein_worker_args.def")
for r in $rows; do
    grep -q -- "^  --${r%:*}\\b" wh.txt || miss="$miss einworker:${r%:*}"
    [ "${r#*:}" = RUN ] && ! grep -q -- "^  --${r%:*}\\b" nh.txt && miss="$miss einnode:${r%:*}"
done
if [ -n "$rows" ] && [ -z "$miss" ]; then ok "einworker and einnode --help document every row ($(echo $rows | wc -w))"
else not_ok "einworker and einnode --help document every row" "missing:$miss" "rows: $rows"; fi
# einrun --help prints the backend registry's rows, each present or not here.
"$EINRUN" --help > rh.txt 2>&1
if grep -q "^  cpu  .* worker einworker;" rh.txt && grep -q "^  cuda  .* worker einworker-cuda;" rh.txt &&
   [ "$(grep -c 'by default. Here: \(present\|absent\) (' rh.txt)" -eq 2 ]; then
    ok "einrun --help lists the backends, each present or absent here"
else not_ok "einrun --help lists the backends" "$(sed -n '/^Backends/,/^Data/p' rh.txt)"; fi
