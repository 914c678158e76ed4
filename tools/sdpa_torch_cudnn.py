#!/usr/bin/env python3
"""tools/sdpa_torch_cudnn.py — PyTorch's own cuDNN attention on the shape of
our probe (8K causal, GQA 32/8 as 32 heads after repeat, d 128, bf16), run
so that cuDNN's frontend and backend logs show the graph cuDNN accepts on
this machine (tools/gpu-check runs it, with CUDNN_FRONTEND_LOG_INFO=1,
CUDNN_FRONTEND_LOG_FILE and CUDNN_LOGLEVEL_DBG=3, when our canonical graph
is rejected, to diff against ours). Prints one line: ran (ms) or why not.

    python3 tools/sdpa_torch_cudnn.py [--tokens 8192]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    a = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev, dt, t = "cuda", torch.bfloat16, a.tokens
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.rand(1, 32, t, 128, device=dev, generator=g).to(dt) - 0.5
    k = torch.rand(1, 32, t, 128, device=dev, generator=g).to(dt) - 0.5
    v = torch.rand(1, 32, t, 128, device=dev, generator=g).to(dt) - 0.5
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}", flush=True)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        fl = 4.0 * 32 * 128 * t * (t + 1) / 2
        print(f"pytorch cudnn sdpa 1x{t} causal bf16: {ms:.3f} ms, {fl / ms * 1e-9:.1f} TFLOP/s")
    except Exception as e:
        print(f"pytorch cudnn sdpa: not run: {type(e).__name__}: {str(e).splitlines()[0][:300]}")


if __name__ == "__main__":
    main()
