"""einsummable.llama — generation with a Hugging Face LLaMA checkpoint
(docs/generation.md).

    import einsummable as es
    model = es.llama.load(["model-00001-of-00002.safetensors", ...], "config.json",
                          device=[0, 1])
    ids = model.generate([[1, 15043, 29892], [1, 306]], max_new_tokens=32)
    logits = model.logits([[1, 15043, 29892]])     # [len, vocab] per prompt

Token ids in, token ids out: tokenisation stays with the caller (for
example `transformers.AutoTokenizer`, docs/generation.md).

How it runs: one program per batch size, compiled on first use and kept,
with two entry points over the same weights and the same key/value caches
(state tensors kept on the devices by the session, written in place by
cache_write): "prefill" feeds `prefill_chunk` tokens per sequence (ids
[batch*C] from positions pos [batch] on, attending causally to the cache
and to the chunk), "decode" one token per sequence (ids [batch] at
positions pos [batch]). A prompt is prefilled in chunks, then each
sequence decodes one token per run at its own position. The plan never
changes between steps.
"""

import ctypes
import json
import numbers
import os
import time

import numpy

from ._core import _bf16_from_f32, _f32_from_bf16, compileGraph, createGraph, tensorDesc
from ._dtypes import _BLOCK
from ._errors import EIN_EINVAL, EIN_EIO, EinError, EinIOError, EinValueError
from ._lib import lib as _lib
from . import _lib as _L

__all__ = ["load", "Llama", "read_config"]

_ST_DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
# es.llama.load(quantization=): the projections' dtype (issue 36)
_QUANT = {None: None, "int8": "q8_0", "q4": "q4_0", "fp8": "f8e4m3"}
_NP = {"f32": numpy.float32, "f16": numpy.float16}


def _fail(msg):
    raise EinValueError(EIN_EINVAL, msg)


def _whole(v, what, lo):
    """v as an int >= lo (a bool, float or string is refused)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < lo:
        _fail("%s %r; expected a whole number >= %d" % (what, v, lo))
    return int(v)


def read_config(config):
    """A transformers config (config.json's path or its dict) as the
    library's one reader resolves it (ein_model_config_json: every key
    implemented or refused by name, transformers' defaults for the
    model_type): a dict of model_type, hidden_size, intermediate_size,
    heads, kv_heads, head_dim, layers, vocab, max_position_embeddings,
    rms_norm_eps, rope_theta, rope_scaling, act, tied, qkv_bias, o_bias,
    mlp_bias, sliding_window, dtype, eos. The same reader as eingen --config."""
    err = _L.ein_error()
    if isinstance(config, dict):
        p = _lib.ein_model_config_json(None, json.dumps(config).encode(), ctypes.byref(err))
    else:
        p = _lib.ein_model_config_json(os.fspath(config).encode(), None, ctypes.byref(err))
    if not p:
        raise EinError(err.code if err.code < 0 else EIN_EINVAL,
                       err.msg.decode("utf-8", "replace"))
    try:
        return json.loads(ctypes.string_at(p).decode())
    finally:
        _lib.free(p)


def _st_header(path):
    """The JSON header of a .safetensors file ({name: {dtype, shape,
    data_offsets}}), or a clear error for any other file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or n > min(size - 8, 100 << 20):
                raise ValueError
            h = json.loads(f.read(n))
            if not isinstance(h, dict):
                raise ValueError
    except OSError as e:
        raise EinIOError(EIN_EIO, "llama: %s: %s" % (path, e.strerror or e)) from None
    except ValueError:
        _fail("llama: %s is not a .safetensors file (its first 8 bytes must give the length "
              "of a JSON header); give the model's .safetensors files or its "
              "model.safetensors.index.json" % path)
    h.pop("__metadata__", None)
    return h


def _weight_files(files):
    """The safetensors paths of `files`: a path, a list of paths, or a
    model.safetensors.index.json (its weight_map's shards, beside it)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    out = []
    for f in files:
        f = os.fspath(f)
        if f.endswith(".json"):
            try:
                with open(f) as fh:
                    idx = json.load(fh)
            except OSError as e:
                raise EinIOError(EIN_EIO, "llama: %s: %s" % (f, e.strerror or e)) from None
            except ValueError as e:
                _fail("llama: %s is not a JSON index of safetensors shards (%s)" % (f, e))
            wm = idx.get("weight_map") if isinstance(idx, dict) else None
            if not isinstance(wm, dict) or not wm:
                _fail("llama: %s has no weight_map; expected a model.safetensors.index.json" % f)
            d = os.path.dirname(f)
            out.extend(os.path.join(d, s) for s in sorted(set(wm.values())))
        else:
            out.append(f)
    if not out:
        _fail("llama.load: no safetensors file given")
    return out


class Llama:
    """A decoder of transformers' LlamaForCausalLM family (rotate-half RoPE
    with rope_scaling linear or llama3, RMSNorm, a gated MLP of silu or
    gelu, grouped-query attention, optional biases: LLaMA 1-3, Mistral
    with its sliding window, Qwen2) over safetensors files, on `device` (a
    list, as compileGraph's)."""

    def __init__(self, files, config, device=None, max_len=None, backend=None,
                 prefill_chunk=16, strategy=None, dtype=None, allow_unused=False,
                 quantization=None):
        self.files = _weight_files(files)
        c = read_config(config)
        if isinstance(config, dict):
            self.config = dict(config)
        else:
            with open(os.fspath(config)) as f:
                self.config = json.load(f)
        self.cfg = c
        self.dm, self.H, self.KV, self.D = c["hidden_size"], c["heads"], c["kv_heads"], c["head_dim"]
        self.FF, self.V, self.L = c["intermediate_size"], c["vocab"], c["layers"]
        self.eps, self.theta, self.tied = c["rms_norm_eps"], c["rope_theta"], c["tied"]
        self.act = c["act"]
        self.scaling = c["rope_scaling"]
        self.eos = set(c["eos"])
        if max_len is None:
            self.max_len = min(int(c["max_position_embeddings"]), 2048)
        else:
            self.max_len = _whole(max_len, "llama.load: max_len", 1)
        w = c["sliding_window"]
        # the config's sliding window (decode_attention's window=); 0 when
        # no sequence can fill it
        self.window = w if w and w < self.max_len else 0
        self.device = list(device) if device is not None else [0]
        self.chunk = _whole(prefill_chunk, "llama.load: prefill_chunk", 1)
        if self.chunk > self.max_len:
            _fail("llama.load: prefill_chunk %r; expected 1 to max_len (%d)"
                  % (prefill_chunk, self.max_len))
        self.backend = backend
        self.strategy = strategy
        self.allow_unused = bool(allow_unused)
        self._heads = {f: _st_header(f) for f in self.files}
        et = [h["model.embed_tokens.weight"]["dtype"] for h in self._heads.values()
              if "model.embed_tokens.weight" in h]
        if not et:
            _fail("llama: no tensor model.embed_tokens.weight in %s" % ", ".join(self.files))
        if et[0] not in _ST_DTYPES:
            _fail("llama: model.embed_tokens.weight is %s; expected F32, F16 or BF16" % et[0])
        self.file_dtype = _ST_DTYPES[et[0]]
        if dtype is None:
            dtype = self.file_dtype
        if dtype not in ("f32", "f16", "bf16"):
            _fail("llama.load: dtype %r; expected None (the checkpoint's), 'f32', 'f16' or "
                  "'bf16'" % (dtype,))
        self.dtype = dtype
        # issue 36: the projections' weights quantized at load (round to
        # nearest, ggml's Q8_0 / Q4_0 blocks, or fp8 e4m3 with an f32 scale
        # per 128); norms, embeddings and lm_head stay in `dtype`
        if quantization not in _QUANT:
            _fail("llama.load: quantization %r; expected None, 'int8' (q8_0), 'q4' (q4_0) or "
                  "'fp8' (f8e4m3)" % (quantization,))
        self.quantization = quantization
        self.qdtype = _QUANT[quantization] or dtype
        if quantization:
            blk = _BLOCK[self.qdtype]
            bad = [(t, n, k) for t, n, k in (
                ("q/k/v_proj and gate/up_proj", "hidden_size", self.dm),
                ("o_proj", "heads * head_dim", self.H * self.D),
                ("down_proj", "intermediate_size", self.FF)) if k % blk]
            if bad:
                _fail("llama.load: quantization=%r (%s) needs the projections' input dims to be "
                      "multiples of %d (its blocks); %s" % (quantization, self.qdtype, blk,
                      ", ".join("%s: %s is %d" % b for b in bad)))
        self._check_layers()
        self._progs = {}
        self.last_stats = None      # generate()'s step counts and times

    def _check_layers(self):
        """num_hidden_layers is the number of layers the checkpoint holds."""
        got = set()
        for h in self._heads.values():
            for k in h:
                if k.startswith("model.layers."):
                    n = k.split(".")[2]
                    if n.isdigit():
                        got.add(int(n))
        if got and (max(got) + 1 != self.L or len(got) != self.L):
            _fail("llama: the config's num_hidden_layers is %d but the checkpoint holds layers "
                  "%s (%d layers)" % (self.L, _ranges(sorted(got)), len(got)))

    # -- the program: a prefill chunk and a decode step over one set of weights and caches
    def _graph(self, B):
        H, KV, D, dm, FF, V, S = self.H, self.KV, self.D, self.dm, self.FF, self.V, self.max_len
        dt, c = self.dtype, self.cfg
        g = createGraph()
        m, w = {}, {}

        def inp(name, shape, tensor, dims, t=None):
            # dims: the labels a strategy ranks (planner/pl_strategy.h)
            if name not in w:
                m[name] = tensor
                w[name] = g.insertTensor(tensorDesc(shape, t or dt, dims), name=name)
            return w[name]

        def lin(a, name, shape, tensor, dims, bias):
            # x times a weight [out, in] (quantized: self.qdtype), plus its
            # bias [out] when the config has one
            y = g.einsum("ij,kj->ik", a, inp(name, shape, tensor + ".weight", dims, self.qdtype))
            if bias:
                y = g.add(y, inp("b" + name, [shape[0]], tensor + ".bias", dims[:1]))
            return y

        def rope(x, rpos):
            sc = self.scaling
            if sc["type"] == "none":
                return g.rope_at(x, rpos, D, self.theta, style="half")
            return g.rope_at(x, rpos, D, self.theta, style="half", scaling=sc)

        caches = {}
        DQ, DKV, DFF = ["d_q", "d_model"], ["d_kv", "d_model"], ["d_ff", "d_model"]
        qb, ob, mb = c["qkv_bias"], c["o_bias"], c["mlp_bias"]

        def part(C, sfx):
            # C tokens per sequence: ids [B*C], pos [B] (each sequence's first
            # position), rope positions [B*C] (pos[b] + t; pos itself when C is 1)
            ids = g.insertTensor(tensorDesc([B * C], "i32", ["tokens"]), name="ids" + sfx)
            pos = g.insertTensor(tensorDesc([B], "i32"), name="pos" + sfx)
            rpos = pos if C == 1 else g.insertTensor(tensorDesc([B * C], "i32", ["tokens"]),
                                                     name="rpos" + sfx)
            embed = inp("embed", [V, dm], "model.embed_tokens.weight", ["vocab", "d_model"])
            x = g.embedding(embed, ids)
            for l in range(self.L):
                p = "model.layers.%d." % l
                an = inp("an%d" % l, [dm], p + "input_layernorm.weight", ["d_model"])
                fn = inp("fn%d" % l, [dm], p + "post_attention_layernorm.weight", ["d_model"])
                if l not in caches:
                    caches[l] = (g.state(tensorDesc([KV, B, S, D], dt), name="kcache_%d" % l),
                                 g.state(tensorDesc([KV, B, S, D], dt), name="vcache_%d" % l))
                kc, vc = caches[l]
                h = g.rmsnorm(x, an, self.eps)
                q = rope(lin(h, "wq%d" % l, [H * D, dm], p + "self_attn.q_proj", DQ, qb), rpos)
                k = rope(lin(h, "wk%d" % l, [KV * D, dm], p + "self_attn.k_proj", DKV, qb), rpos)
                v = lin(h, "wv%d" % l, [KV * D, dm], p + "self_attn.v_proj", DKV, qb)
                kw = g.cache_write(kc, g.split_heads(k, D), pos)
                vw = g.cache_write(vc, g.split_heads(v, D), pos)
                a = g.decode_attention(g.split_heads(q, D), kw, vw, pos, window=self.window)
                x = g.add(x, lin(g.merge_heads(a), "wo%d" % l, [dm, H * D],
                                 p + "self_attn.o_proj", ["d_model", "d_q"], ob))
                f = g.rmsnorm(x, fn, self.eps)
                gate = g.unary(lin(f, "w1%d" % l, [FF, dm], p + "mlp.gate_proj", DFF, mb),
                               self.act, 0.0)
                up = lin(f, "w3%d" % l, [FF, dm], p + "mlp.up_proj", DFF, mb)
                x = g.add(x, lin(g.mul(gate, up), "w2%d" % l, [dm, FF], p + "mlp.down_proj",
                                 ["d_model", "d_ff"], mb))
            x = g.rmsnorm(x, inp("final_norm", [dm], "model.norm.weight", ["d_model"]), self.eps)
            head = embed if self.tied else inp("lm_head", [V, dm], "lm_head.weight",
                                                      ["vocab", "d_model"])
            g.save(g.einsum("ij,kj->ik", x, head, name="logits" + sfx))

        part(1, "")
        part(self.chunk, "_p")
        return g, m

    def _program(self, B):
        prog = self._progs.get(B)
        if prog is None:
            g, m = self._graph(B)
            # every tensor the program reads is in the checkpoint, and every
            # tensor of the checkpoint is read (allow_unused: extra ones may be)
            have = {}
            for path, h in self._heads.items():
                for k in h:
                    have.setdefault(k, path)
            missing = sorted(t for t in m.values() if t not in have)
            if missing:
                _fail("llama: no tensor %s in %s" % (", ".join(missing[:4]), ", ".join(self.files)))
            unused = sorted(set(have) - set(m.values()))
            if unused and not self.allow_unused:
                _fail("llama: the checkpoint's tensor%s %s %s not used by this config (%s%s); "
                      "pass allow_unused=True to run without %s" % (
                          "s" if len(unused) > 1 else "", ", ".join(unused[:4]),
                          "are" if len(unused) > 1 else "is",
                          "%d in all; " % len(unused) if len(unused) > 4 else "",
                          "a config key it lacks, e.g. attention_bias or mlp_bias, or "
                          "tie_word_embeddings"
                          if any(u.endswith(".bias") or u == "lm_head.weight" for u in unused)
                          else "a tensor no LLaMA-family decoder reads",
                          "them" if len(unused) > 1 else "it"))
            prog = compileGraph(g, device=self.device, backend=self.backend, no_reuse=True,
                                strategy=self.strategy)
            try:
                prog.add_entry("decode", ["logits"])
                prog.add_entry("prefill", ["logits_p"])
                self._bind(prog, m)
                # every input has a value before the first run of either entry
                z1, zc = numpy.zeros(B, numpy.int32), numpy.zeros(B * self.chunk, numpy.int32)
                feed = {"ids": z1, "pos": z1, "ids_p": zc, "pos_p": z1}
                if self.chunk > 1:
                    feed["rpos_p"] = zc
                with prog._lock:
                    prog._need_session("generate")
                    _set_inputs(prog, feed)
            except BaseException:
                prog.close()
                raise
            self._progs[B] = prog
        return prog

    @property
    def _quantized(self):
        """The inputs quantized at load (prog.load quantizes float arrays)."""
        if not self.quantization:
            return set()
        return {"%s%d" % (p, l) for l in range(self.L)
                for p in ("wq", "wk", "wv", "wo", "w1", "w3", "w2")}

    def _bind(self, prog, m):
        """Bind the weights: straight from the files where their dtype is
        the program's (each device reads its own blocks), else converted
        through NumPy (dtype= other than the checkpoint's)."""
        for path, h in self._heads.items():
            same = {k: v for k, v in m.items()
                    if v in h and _ST_DTYPES.get(h[v]["dtype"]) == self.dtype and
                    k not in self._quantized}
            if same:
                prog.load_safetensors(path, same)
            other = {k: v for k, v in m.items() if v in h and k not in same}
            for k, v in other.items():
                prog.load(k, self._read(path, h[v], v))

    def _read(self, path, info, name):
        """A tensor of a file as float32 (F32, F16 or BF16), or as float16
        when the program is f16."""
        st = info["dtype"]
        if st not in _ST_DTYPES:
            _fail("llama: tensor %s of %s is %s; expected F32, F16 or BF16" % (name, path, st))
        a, b = info["data_offsets"]
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            f.seek(8 + n + a)
            raw = f.read(b - a)
        if st == "BF16":
            x = _f32_from_bf16(numpy.frombuffer(raw, numpy.uint16))
        else:
            x = numpy.frombuffer(raw, numpy.float32 if st == "F32" else numpy.float16)
        x = x.reshape(info["shape"])
        return x.astype(numpy.float16) if self.dtype == "f16" else x.astype(numpy.float32)

    def _forget(self, B):
        """Drop the program of batch size B after a failed run: the next call
        compiles it again, so one failure does not leave the model unusable."""
        prog = self._progs.pop(B, None)
        if prog is not None:
            try:
                prog.close()
            except EinError:
                pass

    def _ids(self, ids, what):
        """ids as an int32 array, every id in [0, vocab); floats refused."""
        a = numpy.asarray(ids)
        if a.size and a.dtype.kind not in "iu":
            _fail("llama.%s: token ids must be integers, not %s" % (what, a.dtype))
        if a.size and (a.min() < 0 or a.max() >= self.V):
            _fail("llama.%s: a token id outside [0, %d) (the vocabulary)" % (what, self.V))
        return numpy.ascontiguousarray(a, dtype=numpy.int32)

    def step(self, ids, pos):
        """One decode step of a batch: token ids [B] at positions pos [B]
        (each sequence's keys [0, pos] must have been written by earlier
        steps of this model); returns the logits [B, vocab]."""
        ids = self._ids(ids, "step")
        pos = self._pos(pos, "step")
        if ids.ndim != 1 or ids.shape != pos.shape:
            _fail("llama.step: ids and pos must be two vectors of one length")
        if pos.size and (pos.min() < 0 or pos.max() >= self.max_len):
            _fail("llama.step: positions must lie in [0, %d) (max_len)" % self.max_len)
        return self._run(len(ids), "decode", {"ids": ids, "pos": pos}, "logits",
                         (len(ids), self.V))

    def _pos(self, pos, what):
        a = numpy.asarray(pos)
        if a.size and a.dtype.kind not in "iu":
            _fail("llama.%s: positions must be integers, not %s" % (what, a.dtype))
        return numpy.ascontiguousarray(a, dtype=numpy.int32)

    def _run(self, B, entry, feed, output, shape):
        prog = self._program(B)
        try:
            return _run(prog, entry, feed, output, shape, self.dtype)
        except BaseException:
            self._forget(B)
            raise

    def prefill(self, ids, pos):
        """One prefill chunk of a batch: ids [B, C] (C = prefill_chunk),
        token t of sequence b at position pos[b] + t, written into the
        caches and attending causally to [0, pos[b] + t]; returns the logits
        [B, C, vocab]."""
        ids = self._ids(ids, "prefill")
        pos = self._pos(pos, "prefill")
        C = self.chunk
        if ids.ndim != 2 or ids.shape[1] != C or pos.shape != (ids.shape[0],):
            _fail("llama.prefill: ids must be [batch, %d] (prefill_chunk) and pos [batch]" % C)
        if pos.size and (pos.min() < 0 or pos.max() > self.max_len - C):
            _fail("llama.prefill: first positions must lie in [0, %d] (max_len - prefill_chunk)"
                  % (self.max_len - C))
        B = ids.shape[0]
        feed = {"ids_p": ids.reshape(-1), "pos_p": pos}
        if C > 1:
            feed["rpos_p"] = (pos[:, None] + numpy.arange(C, dtype=numpy.int32)).reshape(-1)
        lg = self._run(B, "prefill", feed, "logits_p", (B * C, self.V))
        return lg.reshape(B, C, self.V)

    def _chunks(self, lens):
        """Prefill chunks covering positions [0, lens[b]) of each sequence:
        a list of start positions [B] per chunk. A chunk starts at k*C, or
        earlier where the sequence ends sooner (it rewrites rows already
        written, with the same tokens), at 0 when shorter than a chunk (its
        rows past the sequence hold padding, which every later token
        overwrites before reading)."""
        C = self.chunk
        n = max(lens) if lens else 0
        out = []
        for k in range((n + C - 1) // C):
            out.append(numpy.array([min(k * C, max(m - C, 0)) for m in lens], numpy.int32))
        return out

    def _prefill_prompts(self, ps, lens):
        """Prefill prompt tokens [0, lens[b]) of each prompt in chunks;
        yields (starts, logits [B, C, vocab]) per chunk."""
        C = self.chunk
        for st in self._chunks(lens):
            ids = numpy.zeros((len(ps), C), numpy.int32)
            for b, p in enumerate(ps):
                seg = p[st[b]:st[b] + C]
                ids[b, :len(seg)] = seg
            yield st, self.prefill(ids, st)

    def _check_prompts(self, prompts, extra, what):
        if isinstance(prompts, (str, bytes)) or not prompts or \
                any(isinstance(p, (str, bytes)) or len(p) == 0 for p in prompts):
            _fail("llama.%s: give a non-empty list of non-empty prompts" % what)
        out = [numpy.asarray(p) for p in prompts]
        for i, p in enumerate(out):
            if p.ndim != 1 or p.dtype.kind not in "iu":
                _fail("llama.%s: prompt %d must be a list of integer token ids, not %s"
                      % (what, i, p.dtype if p.ndim == 1 else "%d-d" % p.ndim))
            out[i] = p.astype(numpy.int64)
            p = out[i]
            if p.min() < 0 or p.max() >= self.V:
                _fail("llama.%s: prompt %d has a token id outside [0, %d)" % (what, i, self.V))
        if max(len(p) for p in out) + extra > self.max_len:
            _fail("llama.%s: %d prompt tokens + %d new ones exceed max_len %d" % (
                what, max(len(p) for p in out), extra, self.max_len))
        return out

    def logits(self, prompts):
        """The logits of every position of every prompt: a list of arrays
        [len, vocab] (float32), from prefill chunks (a batch of all the
        prompts)."""
        ps = self._check_prompts(prompts, 0, "logits")
        lens = [len(p) for p in ps]
        out = [numpy.empty((len(p), self.V), numpy.float32) for p in ps]
        for st, lg in self._prefill_prompts(ps, lens):
            for b, p in enumerate(ps):
                k = min(self.chunk, len(p) - st[b])
                out[b][st[b]:st[b] + k] = lg[b, :k]
        return out

    def generate(self, prompt_ids, max_new_tokens=32, temperature=0.0, top_k=None, seed=None,
                 eos_token_id=None):
        """New token ids for each prompt (a list of lists): greedy when
        temperature is 0, else sampled from softmax(logits / temperature)
        over the top_k most likely (None: all) with a NumPy generator seeded
        by `seed` (the same seed gives the same ids). A sequence stops after
        max_new_tokens or at an end-of-sequence id (eos_token_id, default
        the config's), which is included."""
        max_new_tokens = _whole(max_new_tokens, "llama.generate: max_new_tokens", 0)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or \
                not temperature >= 0:
            _fail("llama.generate: temperature %r; expected a number >= 0" % (temperature,))
        if top_k is not None:
            top_k = _whole(top_k, "llama.generate: top_k", 1)
        ps = self._check_prompts(prompt_ids, max_new_tokens, "generate")
        if temperature < 0:
            _fail("llama.generate: temperature %g < 0" % temperature)
        if top_k is not None and top_k < 1:
            _fail("llama.generate: top_k %r; expected None or >= 1" % (top_k,))
        eos = self.eos if eos_token_id is None else (
            set(eos_token_id) if isinstance(eos_token_id, (list, tuple, set))
            else {int(eos_token_id)})
        rng = numpy.random.default_rng(seed)
        B = len(ps)
        self._program(B)            # compiled and weights bound outside the timing
        t_start = time.perf_counter()
        # prefill every prompt token but the last in chunks; the last one is
        # each sequence's first decode step (its logits give the first new id)
        lens = [len(p) - 1 for p in ps]
        nchunks = 0
        if max(lens) > 0:
            for _ in self._prefill_prompts(ps, lens):
                nchunks += 1
        t_pre = time.perf_counter()
        new = [[] for _ in ps]
        done = [max_new_tokens <= 0] * B
        steps = 0
        while not all(done):
            # each sequence at its own position; a finished one runs on with a
            # token nobody reads
            ids = numpy.array([p[-1] if not new[b] else new[b][-1] if not done[b] else 0
                               for b, p in enumerate(ps)], numpy.int32)
            pos = numpy.array([lens[b] + steps for b in range(B)], numpy.int32)
            lg = self.step(ids, pos)
            for b in range(B):
                if done[b]:
                    continue
                tok = self._pick(lg[b], temperature, top_k, rng)
                new[b].append(tok)
                done[b] = len(new[b]) >= max_new_tokens or tok in eos
            steps += 1
        t_end = time.perf_counter()
        self.last_stats = {"steps": nchunks + steps, "seconds": t_end - t_start,
                           "prefill_steps": nchunks, "prefill_seconds": t_pre - t_start,
                           "decode_steps": steps, "decode_seconds": t_end - t_pre,
                           "new_tokens": sum(len(n) for n in new)}
        return new

    @staticmethod
    def _pick(logits, temperature, top_k, rng):
        if temperature == 0:
            return int(numpy.argmax(logits))
        z = logits.astype(numpy.float64) / temperature
        if top_k is not None and top_k < len(z):
            cut = numpy.partition(z, -top_k)[-top_k]
            z = numpy.where(z >= cut, z, -numpy.inf)
        p = numpy.exp(z - z.max())
        p /= p.sum()
        return int(rng.choice(len(p), p=p))

    def close(self):
        """Stop every program's workers."""
        for p in self._progs.values():
            p.close()
        self._progs = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _set_inputs(prog, feed):
    c_void_p = ctypes.c_void_p
    for name, a in feed.items():
        prog._call("generate", _lib.ein_session_set_input, name.encode(),
                   a.ctypes.data_as(c_void_p), a.nbytes)


def _ranges(ns):
    """Sorted ints as "0-3, 5"."""
    out, i = [], 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        out.append("%d" % ns[i] if i == j else "%d-%d" % (ns[i], ns[j]))
        i = j + 1
    return ", ".join(out)


def _run(prog, entry, feed, output, shape, dtype="f32"):
    """One run of entry point `entry`: set the inputs of `feed` ({name:
    int32 array}), run, read `output` (float32 of `shape`). The session
    calls straight (Program.execute runs each run in a helper thread so
    that Ctrl-C can cancel it, and converts the run's statistics: about 5
    ms per call, more than a small model's step); a Ctrl-C lands between
    steps."""
    out = numpy.empty(shape, {"f32": numpy.float32, "f16": numpy.float16,
                              "bf16": numpy.uint16}[dtype])
    with prog._lock:
        prog._need_session("generate")
        _set_inputs(prog, feed)
        prog._call("generate", _lib.ein_session_run_entry, entry.encode(), 1, None)
        prog._ran = True
        prog._call("generate", _lib.ein_session_get_output, output.encode(),
                   out.ctypes.data_as(ctypes.c_void_p), out.nbytes, None)
    if dtype == "bf16":
        return _f32_from_bf16(out).reshape(shape)
    return out.astype(numpy.float32, copy=False)


def load(files, config, device=None, max_len=None, backend=None, prefill_chunk=16,
         strategy=None, dtype=None, allow_unused=False, quantization=None):
    """A Llama over `files` (safetensors paths) and `config` (config.json's
    path or its dict), run on `device` (a list of devices, as compileGraph;
    default one). max_len: the cache length (default the config's
    max_position_embeddings, at most 2048): prompt plus new tokens must
    fit. prefill_chunk: prompt tokens per sequence and prefill run (at
    most max_len; 1 prefills token by token). strategy: None (the planner
    chooses the plan), or "megatron" (compileGraph's strategy): tensor
    parallelism over heads, d_ff and the vocabulary (o_proj and down_proj
    split on their contraction, each followed by one aggregation; the DP's
    specs, so rmsnorm and the residual run on one device). The planner's
    own plan replicates them instead (docs/planner.md, "Replicated specs"):
    one all-reduce per half-layer of a decode step.
    files: safetensors paths, or a model.safetensors.index.json (its
    shards). config: read by read_config (the library's one reader, the
    same as eingen --config): a key it does not implement is an error
    naming it. dtype: the weights, caches and arithmetic (None: the
    checkpoint's own, f32, f16 or bf16; another converts the weights as
    they are bound). allow_unused: run although the checkpoint holds
    tensors the config does not read (otherwise an error naming them).
    quantization: None, "int8", "q4" or "fp8": the attention and MLP
    projections' weights quantized as they are bound (round to nearest, in
    ggml's Q8_0 / Q4_0 blocks of 32 with an f16 scale each, or f8e4m3: e4m3
    with an f32 scale per 128; docs/kernels.md), read by
    kernels that dequantise in registers; embeddings, norms and lm_head stay
    in dtype. Pre-quantized checkpoints (a config's quantization_config:
    GPTQ, AWQ, compressed-tensors) are refused by name."""
    return Llama(files, config, device=device, max_len=max_len, backend=backend,
                 prefill_chunk=prefill_chunk, strategy=strategy, dtype=dtype,
                 allow_unused=allow_unused, quantization=quantization)
