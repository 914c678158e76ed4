#!/usr/bin/env python3
"""tools/llama_torch.py — the LLaMA block of examples/llama_block.ein in plain
PyTorch (bf16, SDPA), on one GPU: the baseline tools/gpu-check compares
einrun with. Prints the median iteration time in ms, eager (PyTorch's own
SDPA backend choice) and, with --compile, torch.compile's (a line saying
why not when it cannot compile here).

    python3 tools/llama_torch.py [--tokens 8192] [--iters 20] [--compile]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def rope(x, head_dim, theta):
    # interleaved pairs (2i, 2i+1) of each head, as kernels/kn_cpu.h states
    t, hidden = x.shape
    pos = torch.arange(t, device=x.device, dtype=torch.float32)
    inv = theta ** (-torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim)
    ang = torch.outer(pos, inv)                       # [t, head_dim/2]
    cos, sin = ang.cos(), ang.sin()
    xh = x.float().view(t, hidden // head_dim, head_dim // 2, 2)
    a, b = xh[..., 0], xh[..., 1]
    out = torch.stack((a * cos[:, None] - b * sin[:, None], a * sin[:, None] + b * cos[:, None]), -1)
    return out.view(t, hidden).to(x.dtype)


def block(x, w, hq=32, hkv=8, hd=128, eps=1e-5, theta=500000.0):
    t = x.shape[0]
    xn = F.rms_norm(x, (x.shape[1],), w["attn_norm"], eps)
    q = rope(xn @ w["wq"], hd, theta).view(t, hq, hd).transpose(0, 1)
    k = rope(xn @ w["wk"], hd, theta).view(t, hkv, hd).transpose(0, 1)
    v = (xn @ w["wv"]).view(t, hkv, hd).transpose(0, 1)
    k = k.repeat_interleave(hq // hkv, 0)
    v = v.repeat_interleave(hq // hkv, 0)
    att = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    h = x + att.transpose(0, 1).reshape(t, hq * hd) @ w["wo"]
    hn = F.rms_norm(h, (h.shape[1],), w["ffn_norm"], eps)
    return h + (F.silu(hn @ w["w1"]) * (hn @ w["w3"])) @ w["w2"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile(block)")
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    dm, dq, dkv, dff = 4096, 4096, 1024, 14336
    g = torch.Generator(device=dev).manual_seed(1)
    r = lambda *s: (torch.rand(*s, device=dev, generator=g) * 2 - 1).to(dt) * 0.02
    w = {"attn_norm": torch.ones(dm, device=dev, dtype=dt), "ffn_norm": torch.ones(dm, device=dev, dtype=dt),
         "wq": r(dm, dq), "wk": r(dm, dkv), "wv": r(dm, dkv), "wo": r(dq, dm),
         "w1": r(dm, dff), "w3": r(dm, dff), "w2": r(dff, dm)}
    x = r(a.tokens, dm)

    def timed(f, what):
        for _ in range(3):
            f(x, w)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.iters):
            t0 = time.perf_counter()
            f(x, w)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"pytorch{what} llama block 1x{a.tokens} bf16: median "
              f"{1e3 * times[len(times) // 2]:.3f} ms, min {1e3 * times[0]:.3f} ms", flush=True)

    timed(block, "")
    if a.compile:
        try:
            timed(torch.compile(block), " compile")
        except Exception as e:  # a machine without a working inductor: say so
            print(f"pytorch compile: not run: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()
