#!/usr/bin/env python3
"""tools/llama_model_check.py — a whole LLaMA (random bf16 weights in the
Hugging Face safetensors layout) through es.llama against a reference
implementation of the same model in the same run (issue 33; gpu-check's
model-8b). Three modes, each a separate process so that the reference's
weights leave the GPU before ours load:

    llama_model_check.py torch DIR [dims]   PyTorch on the GPU (bf16, SDPA)
    llama_model_check.py numpy DIR [dims]   NumPy float64 (small dims; the
                                            tests' stand-in for PyTorch)
        write DIR/config.json and DIR/model.safetensors (random weights,
        BF16, transformers' names), prefill a random prompt of --prompt
        tokens, then --new greedy decode steps with a key/value cache, and
        save DIR/ref.npz: the prompt, the greedy tokens and the logits
        (float32) of the prompt's last position and of every decode step.
        Prints "reference (torch|numpy): prefill 1xP X ms, N decode steps
        Y ms, Z tokens/s".

    llama_model_check.py ours DIR [--backend cuda|cpu] [--devices N]
                                  [--chunk C] [--tol T]
        es.llama over DIR's checkpoint (bf16 throughout: it takes the
        checkpoint's dtype): the prompt prefilled in chunks of C tokens,
        then the decode steps fed the reference's tokens (teacher forcing,
        so a near tie decided the other way cannot derail the comparison).
        Every logits row against the reference: max |ours - ref| / max
        |ref| per row, the worst over the rows, at most T (default 0.05,
        bf16 through every layer); the greedy tokens that agree. Prints
        "einsummable: prefill ... ms, N decode steps ... ms, ... tokens/s"
        and "logits: R rows, max scaled error E (tol T), greedy tokens
        agree K of N: ok|MISMATCH"; exit 1 on a mismatch.

dims: --layers 32 --d 4096 --ff 14336 --heads 32 --kv-heads 8 --vocab
128256 --prompt 8192 --new 128 (LLaMA 3 8B's shape; rope_theta 500000)."""
import argparse
import json
import os
import sys
import time

import numpy as np


def dims(ap):
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--ff", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)


def config(a):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": a.d, "intermediate_size": a.ff, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads, "head_dim": a.d // a.heads,
            "num_hidden_layers": a.layers, "vocab_size": a.vocab, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "max_position_embeddings": a.prompt + a.new, "hidden_act": "silu",
            "rope_scaling": None}


def shapes(a):
    """[(name, shape, fan_in or 0 for a norm's ones)] in file order."""
    D = a.d // a.heads
    t = [("model.embed_tokens.weight", (a.vocab, a.d), 1)]
    for l in range(a.layers):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", (a.d,), 0),
              (p + "self_attn.q_proj.weight", (a.heads * D, a.d), a.d),
              (p + "self_attn.k_proj.weight", (a.kv_heads * D, a.d), a.d),
              (p + "self_attn.v_proj.weight", (a.kv_heads * D, a.d), a.d),
              (p + "self_attn.o_proj.weight", (a.d, a.heads * D), a.heads * D),
              (p + "post_attention_layernorm.weight", (a.d,), 0),
              (p + "mlp.gate_proj.weight", (a.ff, a.d), a.d),
              (p + "mlp.up_proj.weight", (a.ff, a.d), a.d),
              (p + "mlp.down_proj.weight", (a.d, a.ff), a.ff)]
    t += [("model.norm.weight", (a.d,), 0), ("lm_head.weight", (a.vocab, a.d), a.d)]
    return t


def write_checkpoint(d, a, blobs):
    """config.json and model.safetensors from [(name, shape, bytes of
    BF16)] (a generator: one tensor in memory at a time)."""
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(a), f, indent=1)
    header, off = {}, 0
    for name, shape, _ in shapes(a):
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for name, shape, b in blobs:
            assert len(b) == header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            f.write(b)


def bf16_round(x):
    """float32 -> (bf16 bits uint16, their values as float32), rounded to
    nearest even."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def ref_numpy(d, a):
    rng = np.random.default_rng(a.seed)
    w = {}

    def gen():
        for name, shape, fan in shapes(a):
            x = np.ones(shape, np.float32) if fan == 0 else \
                (rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)
            bits, val = bf16_round(x)
            w[name] = val.astype(np.float64)
            yield name, shape, bits.tobytes()
    write_checkpoint(d, a, gen())
    H, KV, D, L = a.heads, a.kv_heads, a.d // a.heads, a.layers
    inv = 1.0 / (500000.0 ** (np.arange(0, D, 2, dtype=np.float64) / D))
    kc = [np.zeros((KV, 0, D)) for _ in range(L)]
    vc = [np.zeros((KV, 0, D)) for _ in range(L)]

    def norm(x, g):
        return g * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5)

    def rope(v, pos):                         # v [h, t, D]
        ang = np.concatenate([np.outer(pos, inv)] * 2, -1)[None]
        rh = np.concatenate([-v[..., D // 2:], v[..., :D // 2]], -1)
        return v * np.cos(ang) + rh * np.sin(ang)

    def forward(ids, p0):
        t = len(ids)
        pos = np.arange(p0, p0 + t)
        x = w["model.embed_tokens.weight"][ids]
        for l in range(L):
            p = "model.layers.%d." % l
            h = norm(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, H, D).transpose(1, 0, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, KV, D).transpose(1, 0, 2)
            q, k = rope(q, pos), rope(k, pos)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, KV, D).transpose(1, 0, 2)
            kc[l] = np.concatenate([kc[l], k], 1)
            vc[l] = np.concatenate([vc[l], v], 1)
            K, V = np.repeat(kc[l], H // KV, 0), np.repeat(vc[l], H // KV, 0)
            s = q @ K.transpose(0, 2, 1) / np.sqrt(D)
            s = s + np.where(np.arange(K.shape[1])[None] > pos[:, None], -np.inf, 0.0)[None]
            e = np.exp(s - s.max(-1, keepdims=True))
            o = (e / e.sum(-1, keepdims=True)) @ V
            x = x + o.transpose(1, 0, 2).reshape(t, H * D) @ w[p + "self_attn.o_proj.weight"].T
            f = norm(x, w[p + "post_attention_layernorm.weight"])
            g = f @ w[p + "mlp.gate_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * (f @ w[p + "mlp.up_proj.weight"].T)) @ \
                w[p + "mlp.down_proj.weight"].T
        return norm(x[-1], w["model.norm.weight"]) @ w["lm_head.weight"].T

    prompt = rng.integers(0, a.vocab, a.prompt).astype(np.int32)
    t0 = time.perf_counter()
    rows = [forward(prompt, 0)]
    t1 = time.perf_counter()
    toks = []
    for i in range(a.new):
        toks.append(int(np.argmax(rows[-1])))
        rows.append(forward(np.array([toks[-1]]), a.prompt + i))
    t2 = time.perf_counter()
    return prompt, np.array(toks, np.int32), np.stack(rows).astype(np.float32), t1 - t0, t2 - t1


def ref_torch(d, a):
    import torch
    import torch.nn.functional as F
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(a.seed)
    w = {}

    def gen():
        for name, shape, fan in shapes(a):
            if fan == 0:
                x = torch.ones(shape, device=dev, dtype=bf)
            else:
                x = (torch.randn(shape, device=dev, generator=g) / fan ** 0.5).to(bf)
            w[name] = x
            yield name, shape, x.view(torch.int16).cpu().numpy().tobytes()
    write_checkpoint(d, a, gen())
    H, KV, D, L, P = a.heads, a.kv_heads, a.d // a.heads, a.layers, a.prompt
    S = a.prompt + a.new
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    kc = torch.zeros(L, KV, S, D, device=dev, dtype=bf)
    vc = torch.zeros(L, KV, S, D, device=dev, dtype=bf)

    def rope(v, pos):                         # v [h, t, D] bf16, as transformers
        ang = torch.cat([torch.outer(pos.float(), inv)] * 2, -1)
        cos, sin = ang.cos().to(bf), ang.sin().to(bf)
        rh = torch.cat([-v[..., D // 2:], v[..., :D // 2]], -1)
        return v * cos + rh * sin

    def forward(ids, p0):
        t = ids.shape[0]
        pos = torch.arange(p0, p0 + t, device=dev)
        x = w["model.embed_tokens.weight"][ids]
        for l in range(L):
            p = "model.layers.%d." % l
            h = F.rms_norm(x, (a.d,), w[p + "input_layernorm.weight"], 1e-5)
            q = rope((h @ w[p + "self_attn.q_proj.weight"].T).view(t, H, D).transpose(0, 1), pos)
            k = rope((h @ w[p + "self_attn.k_proj.weight"].T).view(t, KV, D).transpose(0, 1), pos)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(t, KV, D).transpose(0, 1)
            kc[l, :, p0:p0 + t] = k
            vc[l, :, p0:p0 + t] = v
            K = kc[l, :, :p0 + t].repeat_interleave(H // KV, 0)
            V = vc[l, :, :p0 + t].repeat_interleave(H // KV, 0)
            o = F.scaled_dot_product_attention(q[None], K[None], V[None], is_causal=t > 1)[0]
            x = x + o.transpose(0, 1).reshape(t, H * D) @ w[p + "self_attn.o_proj.weight"].T
            f = F.rms_norm(x, (a.d,), w[p + "post_attention_layernorm.weight"], 1e-5)
            x = x + (F.silu(f @ w[p + "mlp.gate_proj.weight"].T) *
                     (f @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        xl = F.rms_norm(x[-1:], (a.d,), w["model.norm.weight"], 1e-5)
        return (xl @ w["lm_head.weight"].T)[0].float()

    cg = torch.Generator().manual_seed(a.seed)
    prompt = torch.randint(0, a.vocab, (P,), generator=cg).to(torch.int32)
    with torch.no_grad():
        ids = prompt.to(dev).long()
        forward(ids[:16], 0)                  # warm-up (its cache rows are rewritten)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        rows = [forward(ids, 0)]
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        toks = []
        for i in range(a.new):
            toks.append(int(torch.argmax(rows[-1])))
            rows.append(forward(torch.tensor([toks[-1]], device=dev), P + i))
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    return (prompt.numpy(), np.array(toks, np.int32), torch.stack(rows).cpu().numpy(),
            t1 - t0, t2 - t1)


def reference(mode, a):
    os.makedirs(a.dir, exist_ok=True)
    prompt, toks, rows, tp, td = (ref_torch if mode == "torch" else ref_numpy)(a.dir, a)
    np.savez(os.path.join(a.dir, "ref.npz"), prompt=prompt, tokens=toks, logits=rows,
             times=np.array([tp, td]))
    print("reference (%s): prefill 1x%d %.1f ms, %d decode steps %.1f ms, %.1f tokens/s"
          % (mode, a.prompt, 1e3 * tp, a.new, 1e3 * td, a.new / td if td > 0 else 0.0),
          flush=True)


def ours(a):
    import einsummable as es
    r = np.load(os.path.join(a.dir, "ref.npz"))
    prompt, toks, ref = r["prompt"], r["tokens"], r["logits"]
    P, N, C = len(prompt), len(toks), a.chunk
    if P % C:
        sys.exit("llama_model_check: --chunk %d must divide the prompt's %d tokens" % (C, P))
    with es.llama.load([os.path.join(a.dir, "model.safetensors")],
                       os.path.join(a.dir, "config.json"), device=list(range(a.devices)),
                       backend=a.backend, max_len=P + N, prefill_chunk=C) as m:
        if m.dtype != "bf16":
            sys.exit("llama_model_check: es.llama computes in %s, not bf16" % m.dtype)
        m.step([0], [0])                      # compile, bind, warm up (row 0 is rewritten)
        t0 = time.perf_counter()
        for st in range(0, P, C):
            lg = m.prefill(prompt[None, st:st + C], [st])
        rows = [lg[0, -1]]
        t1 = time.perf_counter()
        for i in range(N):
            rows.append(m.step([int(toks[i])], [P + i])[0])
        t2 = time.perf_counter()
    got = np.stack(rows)
    err = float(np.max(np.max(np.abs(got - ref), 1) / np.max(np.abs(ref), 1)))
    if not np.all(np.isfinite(got)):
        err = float("inf")
    agree = int(np.sum(np.argmax(got[:N], 1) == toks))
    ok = err <= a.tol
    print("einsummable: prefill 1x%d %.1f ms, %d decode steps %.1f ms, %.1f tokens/s"
          % (P, 1e3 * (t1 - t0), N, 1e3 * (t2 - t1), N / (t2 - t1)), flush=True)
    print("logits: %d rows, max scaled error %.4g (tol %g), greedy tokens agree %d of %d: %s"
          % (len(rows), err, a.tol, agree, N, "ok" if ok else "MISMATCH"), flush=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["torch", "numpy", "ours"])
    ap.add_argument("dir")
    dims(ap)
    ap.add_argument("--backend", default=None, choices=["cuda", "cpu"])
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--tol", type=float, default=0.05)
    a = ap.parse_args()
    if a.d % a.heads or a.heads % a.kv_heads or (a.d // a.heads) % 2:
        ap.error("--d must be a multiple of --heads (an even head dim), --heads of --kv-heads")
    if a.mode == "ours":
        return ours(a)
    reference(a.mode, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
