#!/bin/sh
# tests/e2e/test_gpu_check.sh — tools/gpu-check's verdicts without a GPU
# (TAP): without one, `run` ends with "NO GPU: nothing measured" and exit 3,
# never PASS; with a GPU the driver shows but nothing to run it with, FAIL;
# a step that no longer fits the budget is skipped and fails the run; the
# summary block's format and verdicts (PASS only when every check passed and
# some ran, on a machine with a GPU); `npytool compare`, which the checks
# use; the graph counts of einrun -v that the graphs-captured check reads,
# from the workers' DONE messages (CPU devices record their "graphs"), with
# an injected capture failure (EIN_FAULT=D:nocapture) named; a whole `run`
# on a mock GPU machine (fake nvidia-smi, a configured tree of stand-in
# programs that print what the real ones print), once all right (PASS with
# every number parsed) and once with two workers disagreeing (FAIL with
# the max error), with the cuDNN probe's checks and the issue-33 targets read
# from the stand-ins' output, issue 36's quant checks (a product off its
# reference fails them); GPU_CHECK_BUNDLE packing the logs into one .tar.gz.
# Skipped on a machine with a GPU (tools/gpu-check runs for real there).
set -u
B=${EIN_BUILDDIR:-.}
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GC="$SRC/tools/gpu-check"
NPY="$(cd "$B" && pwd)/tests/e2e/npytool"
EINRUN="$(cd "$B" && pwd)/einrun"
. "$SRC/tests/e2e/lib.sh"
scratch gpucheck

if [ -e /dev/nvidia0 ] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo "1..0 # SKIP a GPU is here (this test checks the verdicts without one)"
    exit 0
fi
echo "1..17"
unset OUT GPU_CHECK_OUT GPU_CHECK_BUDGET

# 1: no GPU, quick: the verdict, exit 3, the files in the output folder.
mkdir q && (cd q && GPU_CHECK_QUICK=1 GPU_CHECK_OUT="$S/q/out" "$GC" run > log 2>&1)
rc=$?
if [ $rc = 3 ] && grep -q '^VERDICT: NO GPU: nothing measured$' q/log && ! grep -q PASS q/log &&
    [ -s q/out/summary.txt ] && grep -q '^info	gpus_seen	0$' q/out/results.tsv; then
    ok "no GPU: 'NO GPU: nothing measured', exit 3, summary and results in GPU_CHECK_OUT"
else
    not_ok "no GPU: exit $rc" "$(cat q/log)"
fi

# 2: $OUT is the output folder when GPU_CHECK_OUT is not set.
mkdir o && (cd o && GPU_CHECK_QUICK=1 OUT="$S/o/dev-out" "$GC" run > log 2>&1)
if [ -s o/dev-out/summary.txt ]; then ok "\$OUT receives the logs"; else not_ok "\$OUT unused" "$(cat o/log)"; fi

# 14: GPU_CHECK_BUNDLE packs the output folder (the device tool brings
# back 8 files) and copies the summary beside it; the exit status stays.
mkdir -p bu/dev && (cd bu && GPU_CHECK_QUICK=1 GPU_CHECK_OUT="$S/bu/out" \
    GPU_CHECK_BUNDLE="$S/bu/dev/logs.tar.gz" "$GC" run > log 2>&1)
rc=$?
if [ $rc = 3 ] && tar -tzf bu/dev/logs.tar.gz 2>/dev/null | grep -q 'results.tsv$' &&
    cmp -s bu/dev/summary.txt bu/out/summary.txt; then
    ok "GPU_CHECK_BUNDLE: the logs in one .tar.gz, summary.txt beside it, exit 3 kept"
else
    not_ok "GPU_CHECK_BUNDLE: exit $rc" "$(cat bu/log; ls -l bu/dev)"
fi

# 3: a GPU the driver shows (a fake nvidia-smi), nothing prepared: FAIL.
mkdir -p f/bin
cat > f/bin/nvidia-smi <<'EOF'
#!/bin/sh
echo "0, NVIDIA H200, 570.00, 143771 MiB"
EOF
chmod +x f/bin/nvidia-smi
(cd f && PATH="$S/f/bin:$PATH" GPU_CHECK_QUICK=1 GPU_CHECK_OUT="$S/f/out" "$GC" run > log 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q '^VERDICT: FAIL' f/log && grep -q 'FAIL  setup .*no tarball' f/log &&
    grep -q '^machine: *NVIDIA H200' f/log; then
    ok "a GPU but no .gpu: FAIL naming the missing tarball"
else
    not_ok "a GPU but no .gpu: exit $rc" "$(cat f/log)"
fi

# 4: the running budget: no room for the first step, so it is skipped and
# the run fails (a fake tarball and nvcc get it that far).
mkdir -p t/.gpu t/cuda/bin
: > t/.gpu/einsummable-c-0.1.0.tar.gz
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.0"\n' > t/cuda/bin/nvcc
chmod +x t/cuda/bin/nvcc
(cd t && PATH="$S/f/bin:$PATH" CUDA_HOME="$S/t/cuda" GPU_CHECK_BUDGET=12 GPU_CHECK_OUT="$S/t/out" \
    "$GC" run > log 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q '^  unpack  *0 / 60  *skipped' t/log && grep -q 'FAIL  build' t/log &&
    grep -q 'budget of 12 s is spent' t/out/unpack.log; then
    ok "a step past the budget is skipped, logged and fails the run"
else
    not_ok "budget: exit $rc" "$(cat t/log)"
fi

# 5-7: the summary's verdicts from results files.
tab=$(printf '\t')
results() {
    {
        echo "info${tab}gpus_seen${tab}$1"
        echo "info${tab}machine${tab}NVIDIA H200, 570.00, 143771 MiB"
        echo "step${tab}build${tab}61${tab}300${tab}0"
        echo "step${tab}kernels${tab}20${tab}150${tab}0"
        echo "check${tab}kernels${tab}PASS${tab}test_kn_cuda: 11 tests passed"
        echo "check${tab}gpu-vs-cpu${tab}$2${tab}1 elements"
        echo "metric${tab}GEMM bf16 8192x8192x8192${tab}700.0 TFLOP/s vs cublasGemmEx 710.0 (98.6%)"
    } > "$3"
}
results 1 PASS pass.tsv
"$GC" summary pass.tsv > pass.log
rc=$?
if [ $rc = 0 ] && grep -q '^VERDICT: PASS (2 checks)$' pass.log &&
    grep -q '^==* gpu-check summary ==*$' pass.log && grep -q '^checks:$' pass.log &&
    grep -q '^  PASS  kernels  *test_kn_cuda: 11 tests passed$' pass.log &&
    grep -q '^numbers:$' pass.log && grep -q '^  GEMM bf16 8192x8192x8192  *700.0 TFLOP/s vs cublasGemmEx' pass.log &&
    grep -q '^  build  *61 / 300  *0$' pass.log && grep -q '^  total  *81$' pass.log &&
    [ "$(grep -c '^VERDICT' pass.log)" = 1 ]; then
    ok "summary: every check passed on a GPU: PASS, exit 0, one block with checks, numbers, steps"
else
    not_ok "summary PASS: exit $rc" "$(cat pass.log)"
fi
results 1 FAIL fail.tsv
"$GC" summary fail.tsv > fail.log
rc=$?
if [ $rc = 1 ] && grep -q '^VERDICT: FAIL (1 of 2 checks did not pass)$' fail.log &&
    grep -q '^  FAIL  gpu-vs-cpu' fail.log; then
    ok "summary: one failing check: FAIL, exit 1"
else
    not_ok "summary FAIL: exit $rc" "$(cat fail.log)"
fi
results 0 PASS nogpu.tsv
printf 'info\tgpus_seen\t1\n' > none.tsv
"$GC" summary nogpu.tsv > nogpu.log
rc1=$?
"$GC" summary none.tsv > none.log
rc2=$?
if [ $rc1 = 3 ] && grep -q '^VERDICT: NO GPU: nothing measured$' nogpu.log &&
    [ $rc2 = 1 ] && grep -q '^VERDICT: FAIL (no check ran)$' none.log; then
    ok "summary: passing checks without a GPU are no pass; a GPU and no check is a FAIL"
else
    not_ok "summary: exit $rc1 / $rc2" "$(cat nogpu.log none.log)"
fi

# 8-9: npytool compare.
"$NPY" write a.npy bf16 1 3 7 && "$NPY" write b.npy bf16 2 3 7 && "$NPY" write c.npy bf16 1 7 3 || exit 1
"$NPY" compare a.npy a.npy > c1.log; r1=$?
"$NPY" compare a.npy b.npy 0.05 > c2.log; r2=$?
"$NPY" compare a.npy b.npy 10 > c3.log; r3=$?
if [ $r1 = 0 ] && grep -q 'bytes identical.*: ok$' c1.log && [ $r2 = 1 ] && grep -q 'MISMATCH$' c2.log &&
    [ $r3 = 0 ]; then
    ok "npytool compare: identical bytes, a mismatch, a tolerance"
else
    not_ok "npytool compare: $r1 $r2 $r3" "$(cat c1.log c2.log c3.log)"
fi
"$NPY" compare a.npy c.npy 1 > c4.log 2>&1; r4=$?
"$NPY" compare a.npy a.npy -1 > c5.log 2>&1; r5=$?
if [ $r4 = 2 ] && grep -q 'differ in shape' c4.log && [ $r5 = 2 ]; then
    ok "npytool compare: shapes differ, bad tolerance: exit 2"
else
    not_ok "npytool compare errors: $r4 $r5" "$(cat c4.log c5.log)"
fi

# 10-11: graph counts in einrun -v (CPU devices record their "graphs").
write_ffn ffn.ein
"$EINRUN" --cpu 2 --graphs on --iterations 3 -v -q ffn.ein > g1.log 2>&1; r1=$?
"$EINRUN" --cpu 2 --graphs off --iterations 2 -v -q ffn.ein > g2.log 2>&1; r2=$?
if [ $r1 = 0 ] && [ $r2 = 0 ] &&
    grep -q '^  device 0 graphs: [1-9][0-9]* captured, [1-9][0-9]* launches, 0 not captured, [0-9]* too short$' g1.log &&
    grep -q '^  device 1 graphs: [1-9][0-9]* captured, [1-9][0-9]* launches, 0 not captured, [0-9]* too short$' g1.log &&
    ! grep -q 'graphs:' g2.log; then
    ok "einrun -v: each device's graphs captured and launched (none with --graphs off)"
else
    not_ok "einrun -v graph counts: $r1 $r2" "$(cat g1.log g2.log)"
fi
EIN_FAULT=1:nocapture "$EINRUN" --cpu 2 --graphs on --iterations 3 -v -q ffn.ein > g3.log 2>&1; r3=$?
if [ $r3 = 0 ] &&
    grep -q '^  device 0 graphs: [1-9][0-9]* captured, [1-9][0-9]* launches, 0 not captured, [0-9]* too short$' g3.log &&
    grep -q '^  device 1 graphs: 0 captured, 0 launches, [1-9][0-9]* not captured, [0-9]* too short: instructions [0-9]*\.\.[0-9]*: injected capture failure' g3.log; then
    ok "einrun -v: a stretch that failed to capture is counted, with its error"
else
    not_ok "einrun -v capture failure: $r3" "$(cat g3.log)"
fi

# 12-13: a whole run on a mock GPU machine, reusing a "configured" tree of
# stand-ins (the same inputs checksum as a warm machine would have).
mock() { # DIR SEED_FOR_0,0
    local m=$1
    mb="$m/_build-gpucheck/src/_build"
    mkdir -p "$m/.gpu/debs" "$mb/tests/kernels" "$mb/tests/e2e" "$mb/tools"
    echo tarball > "$m/.gpu/einsummable-c-0.1.0.tar.gz"
    echo deb > "$m/.gpu/debs/libzmq5_1_amd64.deb"
    cat "$m/.gpu/einsummable-c-0.1.0.tar.gz" "$m/.gpu/debs/libzmq5_1_amd64.deb" | cksum \
        > "$m/_build-gpucheck/inputs.cksum"
    : > "$mb/config.status"
    printf '%s:\n\t@:\n.PHONY: %s\n' "libeinsummable.la einrun einworker einworker-cuda einnode eingen tests/e2e/npytool tests/kernels/test_kn_cuda tools/bench-kernels-cuda tools/bench-copy-cuda" \
        "libeinsummable.la einrun einworker einworker-cuda einnode eingen tests/e2e/npytool tests/kernels/test_kn_cuda tools/bench-kernels-cuda tools/bench-copy-cuda" > "$mb/Makefile"
    ln -s "$NPY" "$mb/tests/e2e/npytool"
    # the unpacked source's scripts that gpu-check runs itself (decode-bf16's program)
    mkdir -p "$m/_build-gpucheck/src/tools" "$m/_build-gpucheck/src/tests/e2e"
    cp "$SRC/tools/bench-generate.py" "$m/_build-gpucheck/src/tools/"
    cp "$SRC/tests/e2e/hf_model.py" "$m/_build-gpucheck/src/tests/e2e/"
    # MOCK_TORCH: a PyTorch that "has CUDA" and a stand-in model check
    # printing what tools/llama_model_check.py prints
    local pyp=""
    if [ -n "${MOCK_TORCH:-}" ]; then
        mkdir -p "$m/fakepy/torch"
        printf 'class cuda:\n    @staticmethod\n    def is_available():\n        return True\n' \
            > "$m/fakepy/torch/__init__.py"
        pyp="$m/fakepy"
        cat > "$m/_build-gpucheck/src/tools/llama_model_check.py" <<'EOF2'
import sys
if sys.argv[1] == "torch":
    print("reference (torch): prefill 1x8192 900.0 ms, 128 decode steps 2560.0 ms, 50.0 tokens/s")
else:
    print("einsummable: prefill 1x8192 1800.0 ms, 128 decode steps 1280.0 ms, 100.0 tokens/s")
    print("logits: 129 rows, max scaled error 0.012 (tol 0.05), greedy tokens agree 127 of 128: ok")
EOF2
    fi
    printf '#!/bin/sh\nprintf "1..4\\nok 1 - a\\nok 2 - b\\nok 3 - test_decode_splitk\\nok 4 - test_quant\\n"\n' > "$mb/tests/kernels/test_kn_cuda"
    printf '#!/bin/sh\necho "gpu 0 NVIDIA H200"\n' > "$mb/einworker-cuda"
    printf '#!/bin/sh\necho "# LLaMA"\n' > "$mb/eingen"
    cat > "$mb/tools/bench-kernels-cuda" <<'EOF2'
#!/bin/sh
if [ "$1" = -Q ]; then
echo "quant copy rate: 3200.0 GB/s (cudaMemcpyAsync D2D, read + write)"
echo "quant gemv bf16 1x4096x4096: 20.00 us, 1677.7 GB/s of weights, 52.4% of the copy rate"
echo "quant correct q8_0 1x4096x4096: worst error 0.0123 of the tolerance (1e-3 sum|x w| + 8e-3 |y|, bf16 out): ok"
echo "quant gemv q8_0 1x4096x4096: 10.00 us, 1782.6 GB/s of weights, 55.7% of the copy rate"
echo "quant correct q4_0 1x4096x4096: worst error 0.0345 of the tolerance (1e-3 sum|x w| + 8e-3 |y|, bf16 out): ${MOCK_QUANT_BAD:-ok}"
echo "quant gemv q4_0 1x4096x4096: 6.00 us, 1677.7 GB/s of weights, 52.4% of the copy rate"
echo "quant correct f8e4m3 1x4096x4096: worst error 0.0100 of the tolerance (1e-3 sum|x w| + 8e-3 |y|, bf16 out): ok"
echo "quant gemv f8e4m3 1x4096x4096: 10.00 us, 1730.0 GB/s of weights, 54.1% of the copy rate"
echo "quant speedup 1x4096x4096 over bf16: q8_0 2.00x, q4_0 3.33x, f8e4m3 2.00x"
echo "quant prefill 4096x4096x4096: f8e4m3 400.0 TFLOP/s, bf16 500.0 TFLOP/s: 0.80 of bf16 (f8e4m3: fp8 tensor cores through cuBLASLt)"
exit 0
fi
if [ "$1" = -P ] && [ -n "${MOCK_CUDNN_REJECT:-}" ]; then
echo "cudnn-probe: NVIDIA H200, sm_90, cuDNN 91900"
echo "variant V2 (canonical): 14 ops: graph finalized (12.0 ms); engines 0 of 40 finalize []; error: cuDNN heuristics found no engine for this graph"
echo "correct O bf16 T 128: not run: cuda attention: EIN_ATTENTION=cudnn: cuDNN heuristics found no engine for this graph"
echo "attention causal bf16 (cuDNN SDPA): not run: cuda attention: EIN_ATTENTION=cudnn: cuDNN heuristics found no engine for this graph"
echo "attention causal bf16 (our kernel): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 3.000 ms, 183.3 TFLOP/s"
exit 0
fi
if [ "$1" = -P ]; then
echo "cudnn-probe: NVIDIA H200, sm_90, cuDNN 91900"
echo "variant V0 (before issue 33, no LOG/ADD, P f32): 12 ops: graph finalized (12.0 ms); engines 0 of 40 finalize []; error: cuDNN heuristics found no engine for this graph"
echo "variant V2 (canonical): 14 ops: graph finalized (12.0 ms); engines 2 of 40 finalize [7 9]; heuristics 2 configs; plan cfg 0 workspace 0 bytes, built in 210.5 ms"
echo "correct O bf16 T 128: max abs err 0.00391, scaled err 0.0042 (tol 0.03): ok"
echo "correct Stats (lse) bf16 T 128: max abs err 0.0001, scaled err 2e-05 (tol 0.001): ok"
echo "attention causal bf16 (cuDNN SDPA): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 1.000 ms, 550.0 TFLOP/s"
echo "attention causal bf16 (our kernel): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 3.000 ms, 183.3 TFLOP/s"
exit 0
fi
echo "gemm f16 8192x8192x8192: cublasGemmEx 660.0 TFLOP/s, kn_cuda_gemm 650.0 TFLOP/s (98.5%)"
echo "gemm bf16 8192x8192x8192: cublasGemmEx 661.0 TFLOP/s, kn_cuda_gemm 651.0 TFLOP/s (98.5%)"
echo "attention causal bf16 (our kernel): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 3.000 ms, 183.3 TFLOP/s"
echo "attention causal bf16 (fa2 kernel): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 2.000 ms, 275.0 TFLOP/s, max |fa2 - wmma| 0.0039"
echo "decode attention bf16 (split-K): 32 q heads, 8 kv heads, 8192 keys, head dim 128: 0.0200 ms, 1678 GB/s; warp kernel 0.1000 ms, 336 GB/s; max |split-K - warp| 0.0039"
if [ -n "${MOCK_CUDNN_REJECT:-}" ]; then
echo "attention causal bf16 (cuDNN SDPA): not run: cuda attention: EIN_ATTENTION=cudnn: cuDNN heuristics found no engine for this graph"
else
echo "attention causal bf16 (cuDNN SDPA): 32 q heads, 8 kv heads, 8192 tokens, head dim 128: 1.000 ms, 550.0 TFLOP/s"
fi
EOF2
    cat > "$mb/tools/bench-copy-cuda" <<'EOF2'
#!/bin/sh
echo "peer copy (CUDA IPC, other process, same GPU): 1500.00 GB/s (median of 20, 1024 MiB, checked)"
echo "cudaMemcpy device to device in one process:    1600.00 GB/s"
EOF2
    cat > "$mb/einrun" <<EOF2
#!/bin/sh
# stand-in: writes out.npy (seed 1; seed $2 for --gpus 0,0) and prints what einrun -v prints
case "\$*" in *--show-topology*) echo "name mock"; exit 0 ;; esac
seed=1; case "\$*" in *"--gpus 0,0 "*) seed=$2 ;; esac
case "\$*" in *--cpu*) ;; *) echo "einrun: topology: 1 NVIDIA H200 (mock probe)" >&2 ;; esac
it=5; prev=; for a in "\$@"; do [ "\$prev" = --iterations ] && it=\$a; prev=\$a; done
"$NPY" write out.npy bf16 \$seed 4 8 || exit 1
case "\$*" in *"--graphs on"*) echo "  device 0 graphs: 3 captured, 6 launches, 0 not captured, 2 too short" >&2 ;; esac
while [ \$# -gt 0 ]; do
    if [ "\$1" = --log-dir ]; then echo "1.0 device 0: attention: 2 calls through cuDNN SDPA, 0 through our kernel" > "\$2/worker-0.log"; fi
    shift
done
echo "\$it iterations (after 1 warm-up): min 10.000 ms, median 11.000 ms"
echo "  device 0: 9.000 ms kernels, 1.000 ms copies, 0.000 ms waiting (last iteration; kernels, copies: GPU time (CUDA events); waiting: host time waiting for peers)"
EOF2
    chmod +x "$mb/einrun" "$mb/eingen" "$mb/einworker-cuda" "$mb/tools/bench-kernels-cuda" \
        "$mb/tools/bench-copy-cuda" "$mb/tests/kernels/test_kn_cuda"
    # decode-bf16 writes its program with tools/bench-generate.py: a python3
    # with NumPy first on PATH (a pyenv shim may have none)
    mkdir -p "$m/pybin"
    for py in /usr/bin/python3 "$(command -v python3)"; do
        if [ -x "$py" ] && "$py" -c 'import numpy' 2>/dev/null; then
            ln -sf "$py" "$m/pybin/python3"
            break
        fi
    done
    (cd "$m" && PATH="$m/pybin:$S/f/bin:$PATH" CUDA_HOME="$S/t/cuda" GPU_CHECK_OUT="$m/out" \
        PYTHONPATH="$pyp" "$GC" run > log 2>&1)
}
mock "$S/m1" 1
rc=$?
l="$S/m1/log"
if [ $rc = 0 ] && grep -q '^VERDICT: PASS (18 checks)$' "$l" &&
    grep -q '^  PASS  cudnn-graph  *canonical SDPA graph: 14 ops: graph finalized (12.0 ms); engines 2 of 40 finalize \[7 9\]' "$l" &&
    grep -q '^  PASS  cudnn-correct  *2 comparisons with our kernel agree' "$l" &&
    grep -q '^  PASS  gpus-default  *einrun --gpus 0 examples/llama_block.ein ran on the GPU' "$l" &&
    grep -q '^  PASS  gpus-0000-vs-0  *LLaMA 1x8K, --gpus 0,0,0,0 vs --gpus 0: 32 elements, bytes identical.*median 11.000 ms' "$l" &&
    grep -q '^  MET  *attention-cudnn  *550.0 TFLOP/s (>= 450)' "$l" &&
    grep -q '^  NOT MET  *attention-ours  *183.3 TFLOP/s (>= 250)' "$l" &&
    grep -q '^  NOT MEASURED  *llama-vs-torch' "$l" &&
    grep -q '^TARGETS: 2 of 6 met (2 not measured)$' "$l" &&
    grep -q '^  NOT MEASURED  model-8b  *no PyTorch with CUDA here$' "$l" &&
    grep -q '^  PASS  decode-splitk  *test_decode_splitk: the split-K decode kernel equals the CPU kernels' "$l" &&
    grep -q '^  PASS  quant  *test_quant equals the CPU kernels' "$l" &&
    grep -q '^  PASS  quant-gpu-vs-cpu  *LLaMA block, quantized weights, --gpus 0 vs --cpu 1: int8 x 8 tokens ok: 32 elements, bytes identical.*; q4 x 64 tokens ok' "$l" &&
    grep -q '^  GEMV 1x4096x4096 q4_0  *6.00 us, 1677.7 GB/s of weights, 52.4% of the copy rate$' "$l" &&
    grep -q '^  GEMV 1x4096x4096 vs bf16  *q8_0 2.00x, q4_0 3.33x, f8e4m3 2.00x$' "$l" &&
    grep -q '^  GEMV 1x4096x4096 f8e4m3  *10.00 us, 1730.0 GB/s of weights' "$l" &&
    grep -q '^  prefill GEMM 4096x4096x4096  *f8e4m3 400.0 TFLOP/s, bf16 500.0 TFLOP/s: 0.80 of bf16' "$l" &&
    grep -q '^  copy rate (quant)  *3200.0 GB/s' "$l" &&
    grep -q '^  PASS  decode-bf16  *8B-shaped decode step, bf16 weights, GQA 32/8, one GPU: 100.0 tokens/s (10.00 ms); HBM bound 213.2 tokens/s at 3200 GB/s of traffic: 47%$' "$l" &&
    grep -q '^  NOT MET  *decode-bf16  *46.9% of the HBM bound (>= 85%)' "$l" &&
    grep -q '^  decode 8B-shaped (bf16, batch 1)  *100.0 tokens/s' "$l" &&
    grep -q '^  decode attention bf16  *32 q heads, 8 kv heads, 8192 keys, head dim 128: 0.0200 ms, 1678 GB/s; warp kernel 0.1000 ms' "$l" &&
    grep -q '^dtype bf16$' "$S/m1/_build-gpucheck/runs/decode/decode.ein" &&
    grep -q ' d_kv=1024 .* kv=8 ' "$S/m1/_build-gpucheck/runs/decode/decode.ein" &&
    grep -q '^  cuDNN V0 (before issue 33, no LOG/ADD, P f32)  *12 ops' "$l" &&
    grep -q '^  PASS  attention-fa2  *agrees with the wmma kernel (max |diff| 0.0039 <= 0.02), 275.0 TFLOP/s$' "$l" &&
    grep -q '^  MET  *attention-fa2  *275.0 TFLOP/s (>= 250)' "$l" &&
    grep -q '^  attention bf16 (fa2 kernel) *275.0 TFLOP/s (2.000 ms), 8K causal GQA 32/8 d 128; max |fa2 - wmma| 0.0039$' "$l" &&
    grep -q '^  PASS  fake-hosts-gpu    2 pseudo-hosts on GPU 0 vs --gpus 0,0 (? copies): 32 elements, bytes identical' "$l" &&
    grep -q '^  PASS  graphs-identical  --graphs on vs off: 32 elements, bytes identical' "$l" &&
    grep -q '^  PASS  graphs-captured   small block, --gpus 0: 3 captured, 6 launches, 0 not captured, 2 too short$' "$l" &&
    grep -q '^  GEMM bf16 8192x8192x8192  *651.0 TFLOP/s vs cublasGemmEx 661.0 (98.5%)$' "$l" &&
    grep -q '^  attention bf16 (cuDNN SDPA) *550.0 TFLOP/s (1.000 ms)' "$l" &&
    grep -q '^  attention choice  *attention: 2 calls through cuDNN SDPA' "$l" &&
    grep -q '^  IPC copy 1 GiB  *1500.00 GB/s vs cudaMemcpy D2D 1600.00 GB/s$' "$l" &&
    grep -q '^  LLaMA 1x8K graphs off  *median 11.000 ms (min 10.000 ms)$' "$l" &&
    grep -q '^  graphs LLaMA 1x8K  *3 captured, 6 launches, 0 not captured, 2 too short' "$l" &&
    grep -q '^  unpack  *0 / 60  *reused$' "$l" && [ -s "$S/m1/out/einrun-g00-on.log" ]; then
    ok "mock GPU run: every check passes, every number is in the summary"
else
    not_ok "mock GPU run: exit $rc" "$(cat "$l")"
fi
mock "$S/m2" 2
rc=$?
l="$S/m2/log"
if [ $rc = 1 ] && grep -q '^VERDICT: FAIL (1 of 18 checks did not pass)$' "$l" &&
    grep -q '^  FAIL  gpus-0-vs-00  *exit 0 / 0: 32 elements, bytes differ, max abs err [0-9.]*, scaled [0-9.]* (tol 0.05): MISMATCH$' "$l"; then
    ok "mock GPU run: --gpus 0,0 disagreeing is a FAIL with the max error"
else
    not_ok "mock GPU run, disagreement: exit $rc" "$(cat "$l")"
fi
MOCK_CUDNN_REJECT=1 mock "$S/m3" 1
rc=$?
l="$S/m3/log"
if [ $rc = 1 ] && grep -q '^VERDICT: FAIL (2 of 18 checks did not pass)$' "$l" &&
    grep -q '^  FAIL  cudnn-graph  *canonical SDPA graph: 14 ops: graph finalized (12.0 ms); engines 0 of 40 finalize \[\]; error: cuDNN heuristics found no engine' "$l" &&
    grep -q '^  FAIL  cudnn-correct  *0 agree, 0 mismatch, 1 not run: O bf16 T 128: not run: ' "$l" &&
    grep -q '^  NOT MEASURED  *attention-cudnn  *attention causal bf16 (cuDNN SDPA): not run: ' "$l"; then
    ok "mock GPU run: cuDNN rejecting the canonical graph fails cudnn-graph and cudnn-correct, the target is not measured"
else
    not_ok "mock GPU run, cuDNN rejects: exit $rc" "$(cat "$l")"
fi
MOCK_TORCH=1 mock "$S/m4" 1
rc=$?
l="$S/m4/log"
if [ $rc = 0 ] && grep -q '^VERDICT: PASS (19 checks)$' "$l" &&
    grep -q '^  PASS  model-8b  *32 blocks bf16, prefill 1x8K + 128 decode steps on one GPU vs PyTorch: logits: 129 rows, max scaled error 0.012 (tol 0.05), greedy tokens agree 127 of 128: ok$' "$l" &&
    grep -q '^  MET  *model-8b  *logits: 129 rows' "$l" &&
    grep -q '^  model 8B ours  *prefill 1x8192 1800.0 ms, 128 decode steps 1280.0 ms, 100.0 tokens/s$' "$l" &&
    grep -q '^  model 8B PyTorch  *prefill 1x8192 900.0 ms, 128 decode steps 2560.0 ms, 50.0 tokens/s$' "$l" &&
    grep -q '^TARGETS: 3 of 6 met (1 not measured)$' "$l"; then
    ok "mock GPU run with PyTorch: the whole-model check, its target and both times"
else
    not_ok "mock GPU run with PyTorch: exit $rc" "$(cat "$l")"
fi
# 17: issue 36's quant check fails on a quantized product that disagrees
# with its reference, naming it.
MOCK_QUANT_BAD=MISMATCH mock "$S/m5" 1
rc=$?
l="$S/m5/log"
if [ $rc = 1 ] && grep -q '^VERDICT: FAIL (1 of 18 checks did not pass)$' "$l" &&
    grep -q '^  FAIL  quant  *quant correct q4_0 1x4096x4096: worst error 0.0345 of the tolerance .*: MISMATCH$' "$l"; then
    ok "mock GPU run: a quantized product off its reference fails the quant check, naming it"
else
    not_ok "mock GPU run, quant mismatch: exit $rc" "$(cat "$l")"
fi
