#!/usr/bin/env python3
"""tools/bench-llamacpp.py — decode tokens per second of the bench model of
tools/bench-generate.py (the same random weights, seed 1) in llama.cpp and
in einsummable, interleaved in one run (issue 36). Never run by make check
(it writes checkpoints of up to ~540 MB and takes minutes).

    npm install --omit=optional --no-save --prefix tools/llamacpp   # once: node-llama-cpp's prebuilt llama.cpp
    PYTHONPATH=python EIN_BUILDDIR=$PWD /usr/bin/python3 tools/bench-llamacpp.py \\
        [--formats f32,bf16,f16,q8_0,q4_0] [--rounds 3] [--threads 1,2] \\
        [--prompt 8] [--new 32] [--d 768 --layers 12 --vocab 32000 --ff 2048 --heads 12]

llama.cpp runs through the npm packages node-llama-cpp and
@node-llama-cpp/linux-x64 (prebuilt CPU libraries of llama.cpp; versions
pinned in tools/llamacpp/package-lock.json) driven by
tools/llamacpp/serve.mjs, on a GGUF this script writes (its own writer
of the GGUF v3 layout: f32, f16, bf16, Q8_0 and Q4_0 tensors, the last two
quantised by ggml's reference rules; the 1-D norm weights stay f32 as
llama.cpp's converter keeps them). The query and key weights are
permuted as llama.cpp's converter does (its LLaMA rotates adjacent pairs,
Hugging Face's halves), which gives the same logits.

First it checks that the two engines run the same model: the logits of
every prompt position in llama.cpp on the f32 GGUF against
es.llama's on the f32 safetensors (1 device), max |difference| / max
|logit| per position, the worst printed; above --tolerance (1e-4) it
stops. Then, per format, --rounds rounds of: llama.cpp on T threads and
ours (tools/bench-generate.py --devices T, a fresh process: it writes the
checkpoint, compiles and decodes --new tokens) for each T of --threads;
prints each measurement, the medians and the ratios ours / llama.cpp.
Ours runs f32, bf16 and f16 with --dtype, q8_0 and q4_0 with
--quantization int8 and q4; when bench-generate.py refuses a format,
"ours: not available". The decode rate is (new - 1) steps after the
first new token for llama.cpp and bench-generate.py's decode steps per
second for ours, both greedy from the same prompt of --prompt ids; on a
shared machine the CPU time per step (llama.cpp's process, all its
threads; ours: bench-generate.py --profile 16's workers') is the steadier
figure, also printed. llama.cpp runs without flash attention and with a
key/value cache of our cache's dtype (f32 for the quantised formats)."""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "llamacpp")

# ggml_type numbers (ggml.h)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
# general.file_type (llama.h's LLAMA_FTYPE_*)
FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
GTYPE = {"f32": GGML_F32, "f16": GGML_F16, "q4_0": GGML_Q4_0, "q8_0": GGML_Q8_0,
         "bf16": GGML_BF16}
# llama.cpp's key/value cache per format: our cache's dtype (f32 for the
# quantised weights, whose activations are f32)
KV = {"f32": "F32", "bf16": "BF16", "f16": "F16", "q8_0": "F32", "q4_0": "F32"}
# what tools/bench-generate.py is asked for each format
OURS = {"f32": ["--dtype", "f32"], "bf16": ["--dtype", "bf16"], "f16": ["--dtype", "f16"],
        "q8_0": ["--quantization", "int8"], "q4_0": ["--quantization", "q4"]}


def _load_bench_generate():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_generate",
                                                  os.path.join(HERE, "bench-generate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- GGUF (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) ----

def quantize_q8_0(x):
    """x [rows, n] float32, n % 32 == 0, as ggml's block_q8_0 rows
    (quantize_row_q8_0_ref): per 32 elements d = max|x| / 127 (stored as
    f16), q = roundf(x * (1 / d)) as int8; bytes [rows, n / 32 * 34]."""
    x = np.ascontiguousarray(x, np.float32)
    r, n = x.shape
    b = x.reshape(r, n // 32, 32)
    d = (np.abs(b).max(-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = b * inv[..., None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf
    out = np.empty((r, n // 32, 34), np.uint8)
    out[..., :2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(r, -1)


def quantize_q4_0(x):
    """x [rows, n] float32, n % 32 == 0, as ggml's block_q4_0 rows
    (quantize_row_q4_0_ref): per 32 elements m the element of largest
    magnitude (the first), d = m / -8 (stored as f16), q = min(15,
    (int)(x * (1 / d) + 8.5)); byte j holds element j in its low nibble
    and element j + 16 in its high one; bytes [rows, n / 32 * 18]."""
    x = np.ascontiguousarray(x, np.float32)
    r, n = x.shape
    b = x.reshape(r, n // 32, 32)
    i = np.abs(b).argmax(-1)                       # the first of equal magnitudes
    m = np.take_along_axis(b, i[..., None], -1)[..., 0]
    d = (m / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * inv[..., None] + np.float32(8.5)).astype(np.float32)
    q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)
    out = np.empty((r, n // 32, 18), np.uint8)
    out[..., :2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(r, -1)


def dequantize_q8_0(raw, n):
    b = raw.reshape(raw.shape[0], n // 32, 34)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    return (d * b[..., 2:].view(np.int8).astype(np.float32)).reshape(raw.shape[0], n)


def dequantize_q4_0(raw, n):
    b = raw.reshape(raw.shape[0], n // 32, 18)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    q = np.concatenate([b[..., 2:] & 15, b[..., 2:] >> 4], -1).astype(np.float32)
    return (d * (q - 8)).reshape(raw.shape[0], n)


def _bf16(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)   # nearest even


def tensor_bytes(x, fmt):
    """A 1-D or 2-D float32 array as the GGUF bytes of format fmt."""
    if fmt == "f32":
        return np.ascontiguousarray(x, np.float32).tobytes()
    if fmt == "f16":
        return np.ascontiguousarray(x, np.float32).astype(np.float16).tobytes()
    if fmt == "bf16":
        return _bf16(x).tobytes()
    if fmt == "q8_0":
        return quantize_q8_0(x).tobytes()
    if fmt == "q4_0":
        return quantize_q4_0(x).tobytes()
    raise ValueError("format %r" % fmt)


def _s(v):
    b = v.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, v):
    """One metadata pair; v: str, ("u32", n), ("f32", x)."""
    if isinstance(v, str):
        return _s(key) + struct.pack("<I", 8) + _s(v)
    kind, x = v
    if kind == "u32":
        return _s(key) + struct.pack("<II", 4, x)
    if kind == "f32":
        return _s(key) + struct.pack("<If", 6, x)
    if kind == "bool":
        return _s(key) + struct.pack("<IB", 7, int(x))
    if kind == "strings":
        return _s(key) + struct.pack("<IIQ", 9, 8, len(x)) + b"".join(_s(t) for t in x)
    if kind == "f32s":
        return _s(key) + struct.pack("<IIQ", 9, 6, len(x)) + np.asarray(x, "<f4").tobytes()
    if kind == "i32s":
        return _s(key) + struct.pack("<IIQ", 9, 5, len(x)) + np.asarray(x, "<i4").tobytes()
    raise ValueError(kind)


def _vocab(V):
    """A SentencePiece-style vocabulary of V ids (node-llama-cpp needs a
    tokenizer): <unk>, <s>, </s>, the 256 byte tokens, then placeholders."""
    if V < 259:
        raise ValueError("the GGUF vocabulary needs at least 259 ids (got %d)" % V)
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    toks += ["\u2581t%d" % i for i in range(len(toks), V)]
    types = [2, 3, 3] + [6] * 256 + [1] * (V - 259)   # unknown, control, byte, normal
    return [_kv("tokenizer.ggml.model", "llama"), _kv("tokenizer.ggml.tokens", ("strings", toks)),
            _kv("tokenizer.ggml.scores", ("f32s", [-float(i) for i in range(V)])),
            _kv("tokenizer.ggml.token_type", ("i32s", types)),
            _kv("tokenizer.ggml.unknown_token_id", ("u32", 0)),
            _kv("tokenizer.ggml.bos_token_id", ("u32", 1)),
            _kv("tokenizer.ggml.eos_token_id", ("u32", 2)),
            _kv("tokenizer.ggml.add_bos_token", ("bool", False))]


def _permute_rope(w, heads):
    """Hugging Face's q/k rows (rotate halves) in llama.cpp's order (rotate
    adjacent pairs), as convert_hf_to_gguf.py's LlamaModel.permute."""
    o = w.shape[0]
    return (w.reshape(heads, 2, o // heads // 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def write_gguf(path, cfg, tensors, fmt, align=32):
    """The bench model (cfg as config.json, tensors [(HF name, float32
    array [out, in])]) as a GGUF v3 file of llama architecture whose 2-D
    weights are of format fmt (f32, f16, bf16, q8_0, q4_0) and 1-D ones
    f32. The tokenizer is a placeholder of llama.vocab_size ids (the
    benchmark feeds ids)."""
    H, L = cfg["num_attention_heads"], cfg["num_hidden_layers"]
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    per = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
           "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}
    for l in range(L):
        for k, v in per.items():
            names["model.layers.%d.%s.weight" % (l, k)] = "blk.%d.%s.weight" % (l, v)
    kv = [_kv("general.architecture", "llama"), _kv("general.name", "einsummable bench model"),
          _kv("general.alignment", ("u32", align)), _kv("general.file_type", ("u32", FTYPE[fmt])),
          _kv("llama.context_length", ("u32", cfg["max_position_embeddings"])),
          _kv("llama.embedding_length", ("u32", cfg["hidden_size"])),
          _kv("llama.block_count", ("u32", L)),
          _kv("llama.feed_forward_length", ("u32", cfg["intermediate_size"])),
          _kv("llama.rope.dimension_count", ("u32", cfg["head_dim"])),
          _kv("llama.attention.head_count", ("u32", H)),
          _kv("llama.attention.head_count_kv", ("u32", cfg["num_key_value_heads"])),
          _kv("llama.attention.layer_norm_rms_epsilon", ("f32", cfg["rms_norm_eps"])),
          _kv("llama.rope.freq_base", ("f32", cfg["rope_theta"])),
          _kv("llama.vocab_size", ("u32", cfg["vocab_size"]))] + _vocab(cfg["vocab_size"])
    infos, blobs, off = [], [], 0
    for name, x in tensors:
        if name not in names:
            raise ValueError("no GGUF name for %s" % name)
        if name.endswith(("q_proj.weight",)):
            x = _permute_rope(x, H)
        elif name.endswith("k_proj.weight"):
            x = _permute_rope(x, cfg["num_key_value_heads"])
        f = fmt if x.ndim == 2 else "f32"
        b = tensor_bytes(x, f)
        ne = list(reversed(x.shape))               # ggml: ne[0] the contiguous one
        infos.append(_s(names[name]) + struct.pack("<I", len(ne))
                     + b"".join(struct.pack("<Q", n) for n in ne)
                     + struct.pack("<IQ", GTYPE[f], off))
        pad = -len(b) % align
        blobs.append(b + b"\0" * pad)
        off += len(b) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(kv) + b"".join(infos)
    head += b"\0" * (-len(head) % align)
    with open(path, "wb") as fh:
        fh.write(head)
        for b in blobs:
            fh.write(b)


# ---- llama.cpp through node ----

class LlamaCpp:
    def __init__(self):
        mods = os.path.join(NODE_DIR, "node_modules")
        for p in ("node-llama-cpp", "@node-llama-cpp/linux-x64"):
            if not os.path.isdir(os.path.join(mods, p)):
                sys.exit("bench-llamacpp: %s is not installed; install it with\n"
                         "    npm install --omit=optional --no-save --prefix %s\n(node and npm from Debian or NodeSource)"
                         % (p, os.path.relpath(NODE_DIR)))
        if shutil.which("node") is None:
            sys.exit("bench-llamacpp: node is not on PATH")
        self.p = subprocess.Popen(["node", os.path.join(NODE_DIR, "serve.mjs")], cwd=NODE_DIR,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, **q):
        self.p.stdin.write(json.dumps(q) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            sys.exit("bench-llamacpp: llama.cpp's node process ended (rc %s)" % self.p.wait())
        r = json.loads(line)
        if "error" in r:
            sys.exit("bench-llamacpp: llama.cpp: %s" % r["error"])
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def ours_logits(d, tensors, cfg, prompt):
    """es.llama's logits of every prompt position, f32, 1 device."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
    import hf_model
    import einsummable as es
    hf_model.write(d + "/model.safetensors", tensors)
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f)
    with es.llama.load([d + "/model.safetensors"], d + "/config.json", device=[0]) as m:
        out = np.asarray(m.logits([prompt])[0], np.float64)
    os.remove(d + "/model.safetensors")
    return out


def ours_decode(a, fmt, P):
    """tools/bench-generate.py's decode tokens/s and share of the copy
    bound for the format on P devices, or None (and the reason) when it
    refuses the format."""
    cmd = [sys.executable, os.path.join(HERE, "bench-generate.py"), "--devices", str(P),
           "--prompt", str(a.prompt), "--new", str(a.new), "--d", str(a.d), "--layers",
           str(a.layers), "--vocab", str(a.vocab), "--ff", str(a.ff), "--heads", str(a.heads)]
    r = subprocess.run(cmd + OURS[fmt] + ["--profile", "16"], capture_output=True, text=True)
    m = re.search(r"decode tokens/s: ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        err = (r.stderr.strip().splitlines() or ["rc %d" % r.returncode])[-1]
        if r.returncode == 2 and ("unrecognized arguments" in r.stderr
                                  or "invalid choice" in r.stderr):
            return None, err                      # argparse refusing the format
        if "--quantization" in OURS[fmt] and "quantization" in r.stderr.lower():
            return None, err                      # bench-generate refusing the format
        sys.exit("bench-llamacpp: tools/bench-generate.py %s failed:\n%s%s"
                 % (" ".join(OURS[fmt]), r.stdout, r.stderr))
    b = re.search(r"\(([0-9.]+) ms/step, \d+ steps\): ([0-9]+)% of the bound", r.stdout)
    c = re.search(r"workers' CPU time per step .*?: ([0-9.]+) ms", r.stdout)
    return float(m.group(1)), ((int(b.group(2)) if b else None), float(c.group(1)) if c else None)


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--formats", default="f32,bf16,f16,q8_0,q4_0",
                    help="comma-separated weight formats to compare, of f32, bf16, f16, q8_0 "
                         "and q4_0 (default: all five)")
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts: llama.cpp's threads = our devices, "
                         "each measured (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds per format and thread count; the medians are "
                         "reported (default 3)")
    ap.add_argument("--prompt", type=int, default=8,
                    help="prompt length in tokens, random ids (default 8)")
    ap.add_argument("--new", type=int, default=32,
                    help="tokens generated per measurement, greedy (default 32)")
    ap.add_argument("--d", type=int, default=768,
                    help="the bench model's hidden size (default 768)")
    ap.add_argument("--layers", type=int, default=12,
                    help="the bench model's decoder layers (default 12)")
    ap.add_argument("--vocab", type=int, default=32000,
                    help="the bench model's vocabulary size in tokens (default 32000)")
    ap.add_argument("--ff", type=int, default=2048,
                    help="the bench model's MLP intermediate size (default 2048)")
    ap.add_argument("--heads", type=int, default=12,
                    help="the bench model's attention heads (default 12; head dim = d / heads)")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="the largest relative logit difference accepted between the two "
                         "engines on the f32 model: max |difference| / max |logit| per "
                         "position (default 1e-4)")
    ap.add_argument("--no-ours", action="store_true",
                    help="measure llama.cpp only (skip einsummable's runs)")
    a = ap.parse_args()
    fmts = a.formats.split(",")
    for f in fmts:
        if f not in GTYPE:
            ap.error("unknown format %r (f32, bf16, f16, q8_0, q4_0)" % f)
    threads = [int(t) for t in a.threads.split(",")]
    if a.new < 2 or a.rounds < 1 or any(t < 1 for t in threads):
        ap.error("--new must be at least 2, --rounds and --threads at least 1")
    bg = _load_bench_generate()
    cfg, tensors, rng = bg.bench_model(a)
    prompt = [int(x) for x in rng.integers(0, a.vocab, a.prompt)]   # bench-generate's prompt
    d = tempfile.mkdtemp(prefix="bench-llamacpp-")
    lc = LlamaCpp()
    try:
        gg = d + "/model.gguf"
        write_gguf(gg, cfg, tensors, "f32")
        lc.ask(cmd="load", path=gg)
        theirs = np.asarray(lc.ask(cmd="logits", tokens=prompt, kv="F32")["logits"], np.float64)
        if not a.no_ours:
            ours = ours_logits(d, tensors, cfg, prompt)
            rel = (np.abs(theirs - ours).max(1) / np.abs(ours).max(1)).max()
            print("logits, llama.cpp (f32 GGUF) against ours (f32, 1 device), %d positions: "
                  "max relative difference %.2e; the same argmax at %d of %d"
                  % (len(prompt), rel, int((theirs.argmax(1) == ours.argmax(1)).sum()),
                     len(prompt)))
            if not rel <= a.tolerance:
                sys.exit("bench-llamacpp: the logits differ by more than --tolerance %g: "
                         "not the same model" % a.tolerance)
        res = {}
        for fmt in fmts:
            if fmt != "f32":
                write_gguf(gg, cfg, tensors, fmt)
                lc.ask(cmd="load", path=gg)
            print("%s: GGUF %.1f MB" % (fmt, os.path.getsize(gg) / 1e6), flush=True)
            na = None
            for r in range(a.rounds):
                for t in threads:
                    q = lc.ask(cmd="decode", tokens=prompt, new=a.new, threads=t, kv=KV[fmt])
                    tl = (a.new - 1) / q["seconds"]
                    cl = 1e3 * q["cpu_seconds"] / (a.new - 1)
                    res.setdefault((fmt, "llama.cpp", t), []).append(tl)
                    res.setdefault((fmt, "llama.cpp cpu", t), []).append(cl)
                    line = "  round %d, %d: llama.cpp %.1f tokens/s, CPU %.1f ms/step" % (
                        r + 1, t, tl, cl)
                    if not a.no_ours and na is None:
                        to, info = ours_decode(a, fmt, t)
                        if to is None:
                            na = info
                            line += "; ours: not available (%s)" % na
                        else:
                            share, co = info
                            res.setdefault((fmt, "ours", t), []).append(to)
                            if co is not None:
                                res.setdefault((fmt, "ours cpu", t), []).append(co)
                            line += "; ours %.1f tokens/s%s%s" % (
                                to, "" if share is None else " (%d%% of the copy bound)" % share,
                                "" if co is None else ", workers' CPU %.1f ms/step" % co)
                    print(line, flush=True)
        print("\nmedians (tokens/s; %d rounds, interleaved)" % a.rounds)
        print("| format | " + " | ".join("llama.cpp %dT | ours P=%d | ours / llama.cpp" % (t, t)
                                         for t in threads) + " |")
        print("| --- |" + " --- | --- | --- |" * len(threads))
        for fmt in fmts:
            cells = []
            for t in threads:
                lm = float(np.median(res[(fmt, "llama.cpp", t)]))
                om = res.get((fmt, "ours", t))
                om = float(np.median(om)) if om else None
                cells += ["%.1f" % lm, "not run" if a.no_ours else "not available"
                          if om is None else "%.1f" % om,
                          "" if om is None else "%.2f" % (om / lm)]
            print("| %s | %s |" % (fmt, " | ".join(cells)))
        print("\nCPU time per decode step, medians (ms; llama.cpp: its process, all threads, "
              "spinning included; ours: the workers')")
        for fmt in fmts:
            print("  %s: %s" % (fmt, "; ".join(
                "%d: llama.cpp %.1f, ours %s" % (
                    t, float(np.median(res[(fmt, "llama.cpp cpu", t)])),
                    "%.1f" % float(np.median(res[(fmt, "ours cpu", t)]))
                    if res.get((fmt, "ours cpu", t)) else "-") for t in threads)))
    finally:
        lc.close()
        shutil.rmtree(d, True)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print("(%.0f s)" % (time.time() - t0))
