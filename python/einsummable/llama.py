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
import os
import time

import numpy

from ._core import compileGraph, createGraph, tensorDesc
from ._errors import EIN_EINVAL, EinValueError
from ._lib import lib as _lib

__all__ = ["load", "Llama"]


def _fail(msg):
    raise EinValueError(EIN_EINVAL, msg)


class Llama:
    """A LLaMA-architecture decoder (LlamaForCausalLM's layout: rotate-half
    RoPE, RMSNorm, SwiGLU, grouped-query attention) over safetensors files,
    on `device` (a list, as compileGraph's)."""

    def __init__(self, files, config, device=None, max_len=None, backend=None,
                 prefill_chunk=16, strategy=None):
        if isinstance(files, (str, os.PathLike)):
            files = [files]
        self.files = [os.fspath(f) for f in files]
        if not self.files:
            _fail("llama.load: no safetensors file given")
        if isinstance(config, dict):
            cfg = dict(config)
        else:
            with open(os.fspath(config)) as f:
                cfg = json.load(f)
        need = ["hidden_size", "intermediate_size", "num_attention_heads",
                "num_hidden_layers", "vocab_size"]
        miss = [k for k in need if k not in cfg]
        if miss:
            _fail("llama.load: the config lacks %s" % ", ".join(miss))
        self.config = cfg
        self.dm = int(cfg["hidden_size"])
        self.H = int(cfg["num_attention_heads"])
        self.KV = int(cfg.get("num_key_value_heads") or self.H)
        self.D = int(cfg.get("head_dim") or self.dm // self.H)
        self.FF = int(cfg["intermediate_size"])
        self.V = int(cfg["vocab_size"])
        self.L = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.theta = float(cfg.get("rope_theta", 10000.0))
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        if cfg.get("rope_scaling"):
            _fail("llama.load: rope_scaling %r is not supported" % (cfg["rope_scaling"],))
        eos = cfg.get("eos_token_id")
        self.eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        mp = int(cfg.get("max_position_embeddings", 2048))
        self.max_len = int(max_len) if max_len else min(mp, 2048)
        self.device = list(device) if device is not None else [0]
        self.chunk = int(prefill_chunk)
        if not 1 <= self.chunk <= self.max_len:
            _fail("llama.load: prefill_chunk %r; expected 1 to max_len (%d)"
                  % (prefill_chunk, self.max_len))
        self.backend = backend
        self.strategy = strategy
        self._progs = {}
        self.last_stats = None      # generate()'s step counts and times

    # -- the program: a prefill chunk and a decode step over one set of weights and caches
    def _graph(self, B):
        H, KV, D, dm, FF, V, S = self.H, self.KV, self.D, self.dm, self.FF, self.V, self.max_len
        g = createGraph()
        m, w = {}, {}

        def inp(name, shape, tensor, dims):
            # dims: the labels a strategy ranks (planner/pl_strategy.h)
            if name not in w:
                m[name] = tensor
                w[name] = g.insertTensor(tensorDesc(shape, "f32", dims), name=name)
            return w[name]

        lin = lambda a, wt: g.einsum("ij,kj->ik", a, wt)   # weights are [out, in]
        caches = {}
        DQ, DKV, DFF = ["d_q", "d_model"], ["d_kv", "d_model"], ["d_ff", "d_model"]

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
                wq = inp("wq%d" % l, [H * D, dm], p + "self_attn.q_proj.weight", DQ)
                wk = inp("wk%d" % l, [KV * D, dm], p + "self_attn.k_proj.weight", DKV)
                wv = inp("wv%d" % l, [KV * D, dm], p + "self_attn.v_proj.weight", DKV)
                wo = inp("wo%d" % l, [dm, H * D], p + "self_attn.o_proj.weight",
                         ["d_model", "d_q"])
                fn = inp("fn%d" % l, [dm], p + "post_attention_layernorm.weight", ["d_model"])
                w1 = inp("w1%d" % l, [FF, dm], p + "mlp.gate_proj.weight", DFF)
                w3 = inp("w3%d" % l, [FF, dm], p + "mlp.up_proj.weight", DFF)
                w2 = inp("w2%d" % l, [dm, FF], p + "mlp.down_proj.weight",
                         ["d_model", "d_ff"])
                if l not in caches:
                    caches[l] = (g.state(tensorDesc([KV, B, S, D], "f32"), name="kcache_%d" % l),
                                 g.state(tensorDesc([KV, B, S, D], "f32"), name="vcache_%d" % l))
                kc, vc = caches[l]
                h = g.rmsnorm(x, an, self.eps)
                q = g.rope_at(lin(h, wq), rpos, D, self.theta, style="half")
                k = g.rope_at(lin(h, wk), rpos, D, self.theta, style="half")
                v = lin(h, wv)
                kw = g.cache_write(kc, g.split_heads(k, D), pos)
                vw = g.cache_write(vc, g.split_heads(v, D), pos)
                a = g.decode_attention(g.split_heads(q, D), kw, vw, pos)
                x = g.add(x, lin(g.merge_heads(a), wo))
                f = g.rmsnorm(x, fn, self.eps)
                x = g.add(x, lin(g.mul(g.silu(lin(f, w1)), lin(f, w3)), w2))
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
            prog = compileGraph(g, device=self.device, backend=self.backend, no_reuse=True,
                                strategy=self.strategy)
            prog.add_entry("decode", ["logits"])
            prog.add_entry("prefill", ["logits_p"])
            bound = set()
            for path in self.files:
                from_file = self._names(path)
                mine = {k: v for k, v in m.items() if v in from_file and k not in bound}
                if mine:
                    prog.load_safetensors(path, mine)
                    bound.update(mine)
            missing = sorted(set(m) - bound)
            if missing:
                prog.close()
                _fail("llama: no tensor %s in %s" % (
                    ", ".join(m[k] for k in missing[:4]), ", ".join(self.files)))
            # every input has a value before the first run of either entry
            z1, zc = numpy.zeros(B, numpy.int32), numpy.zeros(B * self.chunk, numpy.int32)
            feed = {"ids": z1, "pos": z1, "ids_p": zc, "pos_p": z1}
            if self.chunk > 1:
                feed["rpos_p"] = zc
            with prog._lock:
                prog._need_session("generate")
                _set_inputs(prog, feed)
            self._progs[B] = prog
        return prog

    @staticmethod
    def _names(path):
        """The tensor names of a .safetensors file (its JSON header)."""
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return set(json.loads(f.read(n))) - {"__metadata__"}

    def step(self, ids, pos):
        """One decode step of a batch: token ids [B] at positions pos [B]
        (each sequence's keys [0, pos] must have been written by earlier
        steps of this model); returns the logits [B, vocab]."""
        ids = numpy.ascontiguousarray(ids, dtype=numpy.int32)
        pos = numpy.ascontiguousarray(pos, dtype=numpy.int32)
        if ids.ndim != 1 or ids.shape != pos.shape:
            _fail("llama.step: ids and pos must be two vectors of one length")
        if pos.size and (pos.min() < 0 or pos.max() >= self.max_len):
            _fail("llama.step: positions must lie in [0, %d) (max_len)" % self.max_len)
        prog = self._program(len(ids))
        return _run(prog, "decode", {"ids": ids, "pos": pos}, "logits", (len(ids), self.V))

    def prefill(self, ids, pos):
        """One prefill chunk of a batch: ids [B, C] (C = prefill_chunk),
        token t of sequence b at position pos[b] + t, written into the
        caches and attending causally to [0, pos[b] + t]; returns the logits
        [B, C, vocab]."""
        ids = numpy.ascontiguousarray(ids, dtype=numpy.int32)
        pos = numpy.ascontiguousarray(pos, dtype=numpy.int32)
        C = self.chunk
        if ids.ndim != 2 or ids.shape[1] != C or pos.shape != (ids.shape[0],):
            _fail("llama.prefill: ids must be [batch, %d] (prefill_chunk) and pos [batch]" % C)
        if pos.size and (pos.min() < 0 or pos.max() > self.max_len - C):
            _fail("llama.prefill: first positions must lie in [0, %d] (max_len - prefill_chunk)"
                  % (self.max_len - C))
        B = ids.shape[0]
        prog = self._program(B)
        feed = {"ids_p": ids.reshape(-1), "pos_p": pos}
        if C > 1:
            feed["rpos_p"] = (pos[:, None] + numpy.arange(C, dtype=numpy.int32)).reshape(-1)
        lg = _run(prog, "prefill", feed, "logits_p", (B * C, self.V))
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
        if not prompts or any(len(p) == 0 for p in prompts):
            _fail("llama.%s: give a non-empty list of non-empty prompts" % what)
        out = [numpy.asarray(p, dtype=numpy.int64) for p in prompts]
        for i, p in enumerate(out):
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
        ps = self._check_prompts(prompt_ids, int(max_new_tokens), "generate")
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


def _run(prog, entry, feed, output, shape):
    """One run of entry point `entry`: set the inputs of `feed` ({name:
    int32 array}), run, read `output` (float32 of `shape`). The session
    calls straight (Program.execute runs each run in a helper thread so
    that Ctrl-C can cancel it, and converts the run's statistics: about 5
    ms per call, more than a small model's step); a Ctrl-C lands between
    steps."""
    out = numpy.empty(shape, numpy.float32)
    with prog._lock:
        prog._need_session("generate")
        _set_inputs(prog, feed)
        prog._call("generate", _lib.ein_session_run_entry, entry.encode(), 1, None)
        prog._ran = True
        prog._call("generate", _lib.ein_session_get_output, output.encode(),
                   out.ctypes.data_as(ctypes.c_void_p), out.nbytes, None)
    return out


def load(files, config, device=None, max_len=None, backend=None, prefill_chunk=16,
         strategy=None):
    """A Llama over `files` (safetensors paths) and `config` (config.json's
    path or its dict), run on `device` (a list of devices, as compileGraph;
    default one). max_len: the cache length (default the config's
    max_position_embeddings, at most 2048): prompt plus new tokens must
    fit. prefill_chunk: prompt tokens per sequence and prefill run (at
    most max_len; 1 prefills token by token). strategy: None (the planner
    chooses the plan), or "megatron" (compileGraph's strategy): tensor
    parallelism over heads, d_ff and the vocabulary, two exchanges per layer
    in a decode step (o_proj and down_proj split on their contraction, each
    followed by one aggregation; rmsnorm and the residual replicated)."""
    return Llama(files, config, device=device, max_len=max_len, backend=backend,
                 prefill_chunk=prefill_chunk, strategy=strategy)
