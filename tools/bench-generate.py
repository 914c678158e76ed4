#!/usr/bin/env python3
"""tools/bench-generate.py — decode tokens per second of a random LLaMA
(issue 25) against this machine's memory-bandwidth bound. Never run by
make check (it writes a ~440 MB checkpoint and takes minutes).

    PYTHONPATH=python EIN_BUILDDIR=$PWD /usr/bin/python3 tools/bench-generate.py \\
        [--d 768] [--layers 12] [--vocab 32000] [--ff 2048] [--heads 12] \\
        [--devices 2] [--batch 1] [--prompt 8] [--new 32] [--torch] [--rounds 3]
        [--strategy megatron] [--profile N] [--dtype f32|bf16|f16]

Prints the copy bandwidth (one thread per device copying its share of 256
MiB at once, best of 5: bytes copied per second), the bytes one decode
step must read (every weight but the embedding table once, plus the
key/value cache up to the middle of the decode), the bound (those bytes
read at the copy's memory traffic, twice the bytes copied: a copy reads
and writes each byte) and the measured decode steps per second with its
ratio to the bound. On a machine shared with other work every number
moves: run it twice.

--torch (batch 1): the same model and greedy decode in plain PyTorch on the
CPU (Debian's python3-torch: not a dependency of the package or of CI), a
key/value cache per layer and torch.set_num_threads(devices), measured in
the same run, interleaved with einsummable's (--rounds rounds of each);
prints each round's decode steps per second and the ratio einsummable /
PyTorch.

--profile N: after the generation, N more decode steps called one by one
as es.llama does (set ids and pos, run the decode entry, read the logits),
each with the run's statistics; prints the medians of each part seen from
Python (set, run, get), of the run's own wall time (START to the last
DONE) and, per device, the worker's total, kernel, copy and wait (for
peers) times, and the run's overhead (run minus the slowest device's
total: the START and DONE messages and Python's calls); then the
workers' CPU time per step (from /proc), which other processes on a
shared machine do not inflate as they do the wall times. EIN_SPIN_US (see
einworker --help) sets the workers' spin before they block.

--dtype bf16|f16: the checkpoint's tensors in that dtype (default f32);
es.llama then computes in it (weights, activations and caches: it takes
the checkpoint's dtype), and the bound counts its bytes.

--strategy S: es.llama.load's strategy (compileGraph's: megatron), instead
of the plan the planner chooses. EIN_READY=zmq (einworker --help) sends a
READY between workers of this host through ZeroMQ, as before issue 25's
channel, to compare."""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import hf_model  # noqa: E402  (its safetensors writer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ff", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--torch", action="store_true", help="compare with plain PyTorch (batch 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--strategy", default=None, metavar="S",
                    help="es.llama.load's strategy (megatron; default: the planner's plan)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then N decode steps with each run's statistics")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"],
                    help="the checkpoint's dtype (every tensor), which es.llama's program "
                         "then computes in")
    ap.add_argument("--quantization", default=None, choices=["int8", "q4", "fp8"],
                    help="es.llama.load's quantization= (issue 36): the projections as q8_0 "
                         "or q4_0 blocks, or f8e4m3 (fp8 e4m3, an f32 scale per 128); also "
                         "prints the logits' error against f32")
    ap.add_argument("--write-ein", default=None, metavar="PATH",
                    help="write the decode step as a .ein program (for einplan -v) and stop")
    ap.add_argument("--kv-heads", type=int, default=None, metavar="N",
                    help="key/value heads of the --write-ein program (grouped-query "
                         "attention; default --heads)")
    a = ap.parse_args()
    if a.kv_heads is None:
        a.kv_heads = a.heads
    elif not a.write_ein:
        ap.error("--kv-heads is for --write-ein only (the checkpoint has --heads kv heads)")
    if a.kv_heads < 1 or a.heads % a.kv_heads:
        ap.error("--kv-heads %d must divide --heads %d" % (a.kv_heads, a.heads))
    if a.torch and a.dtype != "f32":
        ap.error("--torch compares f32 only")
    if a.write_ein:
        with open(a.write_ein, "w") as f:
            f.write(_decode_ein(a))
        return
    import einsummable as es
    dm, L, V, FF, H = a.d, a.layers, a.vocab, a.ff, a.heads
    D = dm // H
    d = tempfile.mkdtemp(prefix="bench-gen-")
    import atexit
    import shutil
    atexit.register(shutil.rmtree, d, True)    # the checkpoint goes even when a run fails
    cfg, t, rng = bench_model(a)
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f)
    params = sum(x.size for _, x in t)
    if a.dtype == "f32":
        hf_model.write(d + "/model.safetensors", t)
    else:
        _write_16(d + "/model.safetensors", t, a.dtype)
    weights = dict(t) if a.torch else None
    del t
    # copy bandwidth of `devices` threads at once (NumPy releases the GIL),
    # each copying its share of 256 MiB: bytes copied per second
    import threading
    P = a.devices
    srcs = [np.ones((64 << 20) // P, np.float32) for _ in range(P)]
    dsts = [np.empty_like(x) for x in srcs]

    def copy_all():
        th = [threading.Thread(target=np.copyto, args=(dsts[i], srcs[i])) for i in range(P)]
        for x in th:
            x.start()
        for x in th:
            x.join()
    best = min(_timed(copy_all) for _ in range(5))
    copy_bw = sum(x.nbytes for x in srcs) / best  # bytes copied per second
    # a decode step reads every weight but the embedding table (one row) once,
    # and the cache up to the position (at the middle of the decode, on average)
    esz = 4 if a.dtype == "f32" else 2
    wbytes = esz * (params - V * dm)
    if a.quantization:   # the projections in blocks (bytes per block / elements)
        proj = L * (4 * dm * dm + 3 * FF * dm)
        per = {"int8": 34 / 32, "q4": 18 / 32, "fp8": 132 / 128}[a.quantization]
        wbytes += proj * (per - esz)
    avg_pos = a.prompt + a.new / 2
    cbytes = esz * 2 * L * a.batch * avg_pos * H * D
    # a copy moves each byte twice (read, write); a decode step only reads
    read_bw = 2 * copy_bw
    bound = read_bw / (wbytes + cbytes)           # steps per second
    prompts = [list(rng.integers(0, V, a.prompt)) for _ in range(a.batch)]
    rounds = []
    acc = None
    if a.quantization:
        # the logits against the same checkpoint unquantized: relative error
        # (Frobenius, over every prompt position) and top-1 agreement
        with es.llama.load([d + "/model.safetensors"], d + "/config.json", device=[0]) as m:
            ref = m.logits(prompts)
        with es.llama.load([d + "/model.safetensors"], d + "/config.json", device=[0],
                           quantization=a.quantization) as m:
            got_l = m.logits(prompts)
        num = sum(float(np.sum((g - r) ** 2)) for g, r in zip(got_l, ref))
        den = sum(float(np.sum(r ** 2)) for r in ref)
        top = [np.mean(np.argmax(g, -1) == np.argmax(r, -1)) for g, r in zip(got_l, ref)]
        acc = (np.sqrt(num / den), float(np.mean(top)))
    with es.llama.load([d + "/model.safetensors"], d + "/config.json",
                       device=list(range(a.devices)), strategy=a.strategy,
                       quantization=a.quantization) as m:
        m.generate(prompts, max_new_tokens=2)     # compile, bind, warm up
        for r in range(a.rounds if a.torch else 1):
            got = m.generate(prompts, max_new_tokens=a.new)
            st = m.last_stats
            ours = st["decode_steps"] / st["decode_seconds"]
            if a.torch:
                theirs, tids = _torch_decode(weights, cfg, prompts[0], a.new, a.devices)
                rounds.append((ours, theirs))
                print("round %d: einsummable %.2f steps/s, PyTorch %.2f steps/s: ratio %.2f%s"
                      % (r + 1, ours, theirs, ours / theirs,
                         "" if tids == got[0] else " (the ids differ)"))
        prof = _profile(m, a.profile, a.prompt, V, a.devices, a.dtype) if a.profile > 0 else None
    steps_s = st["decode_steps"] / st["decode_seconds"]
    print("model: %.1fM parameters (d %d, %d layers, vocab %d, ff %d, %d heads), %s, %d devices, "
          "batch %d, plan %s%s" % (params / 1e6, dm, L, V, FF, H, a.dtype, a.devices, a.batch,
                                   a.strategy or "the planner's",
                                   ", projections %s" % a.quantization if a.quantization else ""))
    if acc:
        print("logits vs unquantized (%d prompt positions): relative error %.4f, top-1 "
              "agreement %.1f%%" % (a.prompt * a.batch, acc[0], 100 * acc[1]))
    print("copy bandwidth: %.2f GB/s copied (%d threads copying 256 MiB, best of 5): %.2f GB/s "
          "of memory traffic" % (copy_bw / 1e9, P, read_bw / 1e9))
    print("bytes per decode step: weights %.1f MB + cache %.1f MB" % (wbytes / 1e6, cbytes / 1e6))
    print("bound: %.1f steps/s; measured %.1f steps/s (%.1f ms/step, %d steps): %.0f%% of the bound"
          % (bound, steps_s, 1e3 / steps_s, st["decode_steps"], 100 * steps_s / bound))
    print("decode tokens/s: %.1f" % (steps_s * a.batch))
    if rounds:
        rs = sorted(o / t for o, t in rounds)
        print("einsummable / PyTorch (%d threads), median of %d interleaved rounds: %.2f"
              % (a.devices, len(rs), rs[len(rs) // 2]))
    if prof:
        print(prof)
    os.remove(d + "/model.safetensors")


def bench_model(a):
    """The bench model's config (a dict, as config.json) and its tensors
    [(HF name, float32 array)] for the sizes in a (d, layers, vocab, ff,
    heads, prompt, new), random with seed 1, and the generator (which
    then draws the prompts). tools/bench-llamacpp.py writes the same
    tensors as a GGUF."""
    dm, L, V, FF, H = a.d, a.layers, a.vocab, a.ff, a.heads
    D = dm // H
    rng = np.random.default_rng(1)
    cfg = {"model_type": "llama", "hidden_size": dm, "intermediate_size": FF,
           "num_attention_heads": H,
           "num_key_value_heads": H, "head_dim": D, "num_hidden_layers": L, "vocab_size": V,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "max_position_embeddings": a.prompt + a.new}
    t = hf_model.random_llama(rng, dm, L, V, FF, H)
    return cfg, t, rng


def _decode_ein(a):
    """es.llama's decode step (batch a.batch, one token per sequence) as a
    .ein program with the dim names llama.py gives its tensors, so that
    einplan can show its plans (`einplan --devices 2 --simulate -v`).
    Weights are [in, out] here (matmul), the transposes of the
    checkpoint's: the same splits and bytes. --dtype: every weight, cache
    and activation in that dtype (`dtype` line), f32 accumulation in the
    kernels; --kv-heads: grouped-query attention."""
    dm, L, V, FF, H, KV = a.d, a.layers, a.vocab, a.ff, a.heads, a.kv_heads
    D, B, S = dm // H, a.batch, a.prompt + a.new
    t = ["# es.llama's decode step (tools/bench-generate.py --write-ein): d %d, %d layers, "
         "vocab %d, ff %d, %d heads (%d kv), batch %d, cache %d, %s"
         % (dm, L, V, FF, H, KV, B, S, a.dtype),
         "dims tokens=%d d_model=%d d_q=%d d_kv=%d d_ff=%d vocab=%d kv=%d b=%d len=%d hd=%d"
         % (B, dm, H * D, KV * D, FF, V, KV, B, S, D),
         "dtype %s" % a.dtype,
         "input ids[tokens] i32", "input pos[tokens] i32", "input embed[vocab, d_model]",
         "xe = embedding(embed, ids)"]
    x = "xe"
    for l in range(L):
        t += ["input an%d[d_model]" % l, "input wq%d[d_model, d_q]" % l,
              "input wk%d[d_model, d_kv]" % l, "input wv%d[d_model, d_kv]" % l,
              "input wo%d[d_q, d_model]" % l, "input fn%d[d_model]" % l,
              "input w1%d[d_model, d_ff]" % l, "input w3%d[d_model, d_ff]" % l,
              "input w2%d[d_ff, d_model]" % l,
              "state kc%d[kv, b, len, hd]" % l, "state vc%d[kv, b, len, hd]" % l]
        r = lambda n: "%s_%d" % (n, l)
        t += ["%s = rmsnorm(%s, an%d, 1e-5)" % (r("h"), x, l),
              "%s = matmul(%s, wq%d)" % (r("qx"), r("h"), l),
              "%s = matmul(%s, wk%d)" % (r("kx"), r("h"), l),
              "%s = matmul(%s, wv%d)" % (r("v"), r("h"), l),
              "%s = rope_at(%s, pos, %d, style=half)" % (r("q"), r("qx"), D),
              "%s = rope_at(%s, pos, %d, style=half)" % (r("k"), r("kx"), D),
              "%s = split_heads(%s, %d)" % (r("kh"), r("k"), D),
              "%s = split_heads(%s, %d)" % (r("vh"), r("v"), D),
              "%s = split_heads(%s, %d)" % (r("qh"), r("q"), D),
              "%s = cache_write(kc%d, %s, pos)" % (r("kw"), l, r("kh")),
              "%s = cache_write(vc%d, %s, pos)" % (r("vw"), l, r("vh")),
              "%s = decode_attention(%s, %s, %s, pos)" % (r("a"), r("qh"), r("kw"), r("vw")),
              "%s = merge_heads(%s)" % (r("am"), r("a")),
              "%s = matmul(%s, wo%d)" % (r("o"), r("am"), l),
              "%s = add(%s, %s)" % (r("x"), x, r("o")),
              "%s = rmsnorm(%s, fn%d, 1e-5)" % (r("f"), r("x"), l),
              "%s = matmul(%s, w1%d)" % (r("g1"), r("f"), l),
              "%s = matmul(%s, w3%d)" % (r("g3"), r("f"), l),
              "%s = silu(%s)" % (r("sg"), r("g1")),
              "%s = mul(%s, %s)" % (r("g"), r("sg"), r("g3")),
              "%s = matmul(%s, w2%d)" % (r("d"), r("g"), l),
              "%s = add(%s, %s)" % (r("y"), r("x"), r("d"))]
        x = r("y")
    t += ["input final_norm[d_model]", "input lm_head[d_model, vocab]",
          "xf = rmsnorm(%s, final_norm, 1e-5)" % x, "logits = matmul(xf, lm_head)",
          "save logits"]
    return "\n".join(t) + "\n"


def _write_16(path, tensors, dtype):
    """tensors [(name, float32 array)] as a .safetensors file of BF16
    (rounded to nearest even) or F16 tensors."""
    header, blobs, off = {}, [], 0
    for name, x in tensors:
        if dtype == "bf16":
            u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        else:
            b = np.ascontiguousarray(x, np.float32).astype(np.float16).tobytes()
        header[name] = {"dtype": dtype.upper(), "shape": list(x.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


def _profile(m, n, prompt, V, P, dtype="f32"):
    """n decode steps as es.llama's step() makes them, timed part by part,
    with each run's statistics: a report of the medians."""
    import ctypes
    from einsummable import _lib as L
    from einsummable import llama as LL
    prog = m._program(1)
    st = L.ein_run_stats()
    ids = np.array([1], np.int32)
    out = np.empty((1, V), np.float32 if dtype == "f32" else np.uint16)   # the logits' dtype
    rows = []
    cpu0 = _workers_cpu()
    w0 = time.perf_counter()
    for i in range(n):
        pos = np.array([prompt + i % 16], np.int32)
        t0 = time.perf_counter()
        with prog._lock:
            LL._set_inputs(prog, {"ids": ids, "pos": pos})
            t1 = time.perf_counter()
            prog._call("generate", L.lib.ein_session_run_entry, b"decode", 1, ctypes.byref(st))
            t2 = time.perf_counter()
            prog._call("generate", L.lib.ein_session_get_output, b"logits",
                       out.ctypes.data_as(ctypes.c_void_p), out.nbytes, None)
        t3 = time.perf_counter()
        dev = [(st.dev[d].total, st.dev[d].kernel, st.dev[d].copy, st.dev[d].wait)
               for d in range(P)]
        rows.append([t1 - t0, t2 - t1, t3 - t2, st.wall_s, t2 - t1 - max(x[0] for x in dev)]
                    + [x for dv in dev for x in dv])
    wall = time.perf_counter() - w0
    cpu1 = _workers_cpu()
    med = np.median(np.array(rows) * 1e3, 0)
    lines = ["profile of %d decode steps (medians, ms): set inputs %.3f, run %.3f, get logits "
             "%.3f; the run's wall %.3f; overhead (run - slowest device) %.3f"
             % (n, med[0], med[1], med[2], med[3], med[4])]
    if cpu0 is not None and cpu1 is not None:
        lines.append("  the workers' CPU time per step (all of them, from /proc): %.3f ms; "
                     "wall time per step %.3f ms" % (1e3 * (cpu1 - cpu0) / n, 1e3 * wall / n))
    for d in range(P):
        lines.append("  device %d: total %.3f, kernel %.3f, copy %.3f, wait %.3f"
                     % ((d,) + tuple(med[5 + 4 * d:9 + 4 * d])))
    return "\n".join(lines)


def _workers_cpu():
    """User + system CPU seconds of this process's einworker descendants
    (Linux /proc; None elsewhere): a step's CPU time, which other
    processes on a shared machine do not inflate as they do its wall time."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        par, cpu, comm = {}, {}, {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            r = st.rfind(")")
            f = st[r + 2:].split()
            pid = int(d)
            comm[pid] = st[st.find("(") + 1:r]
            par[pid] = int(f[1])
            cpu[pid] = (int(f[11]) + int(f[12])) / tick
    except (OSError, ValueError, AttributeError):
        return None
    me, tot = os.getpid(), 0.0
    for pid in cpu:
        p, seen = par.get(pid), 0
        while p and p != me and seen < 64:
            p, seen = par.get(p), seen + 1
        if p == me and comm[pid].startswith("einworker"):
            tot += cpu[pid]
    return tot


def _torch_decode(w, cfg, prompt, n_new, threads):
    """Greedy decode of one prompt in plain PyTorch (f32, CPU, a key/value
    cache per layer): decode steps per second and the new ids."""
    import torch
    torch.set_num_threads(threads)
    T = {k: torch.from_numpy(v) for k, v in w.items()}
    dm, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    D, eps, S = cfg["head_dim"], cfg["rms_norm_eps"], len(prompt) + n_new
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    kc = [torch.zeros(H, S, D) for _ in range(L)]
    vc = [torch.zeros(H, S, D) for _ in range(L)]

    def norm(x, g):
        return g * x * torch.rsqrt(x.pow(2).mean() + eps)

    def rope(v, p):
        a = torch.cat([p * inv, p * inv])
        rh = torch.cat([-v[:, D // 2:], v[:, :D // 2]], dim=1)
        return v * torch.cos(a) + rh * torch.sin(a)

    def step(tok, p):
        x = T["model.embed_tokens.weight"][tok]
        for l in range(L):
            pre = "model.layers.%d." % l
            h = norm(x, T[pre + "input_layernorm.weight"])
            q = rope((T[pre + "self_attn.q_proj.weight"] @ h).view(H, D), p)
            kc[l][:, p] = rope((T[pre + "self_attn.k_proj.weight"] @ h).view(H, D), p)
            vc[l][:, p] = (T[pre + "self_attn.v_proj.weight"] @ h).view(H, D)
            s = torch.einsum("hd,hsd->hs", q, kc[l][:, :p + 1]) / D ** 0.5
            o = torch.einsum("hs,hsd->hd", torch.softmax(s, -1), vc[l][:, :p + 1])
            x = x + T[pre + "self_attn.o_proj.weight"] @ o.reshape(-1)
            f = norm(x, T[pre + "post_attention_layernorm.weight"])
            g = T[pre + "mlp.gate_proj.weight"] @ f
            x = x + T[pre + "mlp.down_proj.weight"] @ (
                torch.nn.functional.silu(g) * (T[pre + "mlp.up_proj.weight"] @ f))
        return T["lm_head.weight"] @ norm(x, T["model.norm.weight"])

    with torch.inference_mode():
        for p, tok in enumerate(prompt):
            lg = step(int(tok), p)
        out = []
        t0 = time.perf_counter()
        for i in range(n_new):
            out.append(int(torch.argmax(lg)))
            lg = step(out[-1], len(prompt) + i)
        dt = time.perf_counter() - t0
    return n_new / dt, out


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
