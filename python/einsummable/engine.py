"""einsummable.engine — continuous batching over es.llama's two entry
points (docs/serving.md).

    import einsummable as es
    model = es.llama.load(files, "config.json", device=[0, 1],
                          max_len=context + 16, prefill_chunk=16)
    eng = es.engine.Engine(model, slots=8)       # compiles for 8 slots, starts its thread
    r = eng.submit([1, 15043, 29892], es.engine.SamplingParams(max_tokens=32))
    r.wait().token_ids                            # or iterate r.events() while it runs
    eng.close()

One program, compiled once for `slots` sequences (the decode step's batch),
serves every request: each slot holds one sequence at its own position, and
the plan never changes as requests come and go. A new request takes a free
slot and its prompt is prefilled in chunks (the "prefill" entry point, each
run one chunk of every slot still prefilling), between decode steps of the
others (the "decode" entry point, one token of every decoding slot), so the
sequences already decoding go on while it is prefilled. A sequence that
finishes (max_tokens, an end-of-sequence or stop id, a stop string, the end
of the context) or is cancelled frees its slot before the next run.

Every token of a sequence comes from the decode step's logits of its own
slot, which no other slot's contents change: a greedy request gives the same
ids alone or among others. Sampling draws from the request's own NumPy
generator (`seed`), so a seeded request is reproducible whatever runs
beside it.

Runs that are not a slot's own write harmless rows: a decode step writes the
row a prefilling slot's next chunk rewrites; a prefill run writes padding
from a decoding slot's next position on (rows no step reads before it
rewrites them), which is why the cache holds `prefill_chunk` rows more than
the context (context = model.max_len - prefill_chunk).
"""

import math
import os
import queue
import threading
import time
from typing import Any, Callable, List, Optional, Sequence

import numpy

from ._errors import EIN_EINVAL, EIN_EWORKER, EinError, EinValueError

try:                                   # Python >= 3.8
    from typing import Protocol
except ImportError:                    # pragma: no cover
    Protocol = object                  # type: ignore

__all__ = ["Engine", "SamplingParams", "Request", "Tokenizer", "StreamDecoder"]


class StreamDecoder(Protocol):
    """Text of ids pushed one at a time; never half a UTF-8 character."""

    def push(self, token_id: int) -> str: ...


class Tokenizer(Protocol):
    """What the engine and the server need of a tokenizer
    (einsummable.tokenizer.Tokenizer has it)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...

    def stream(self) -> StreamDecoder: ...


def _fail(msg):
    raise EinValueError(EIN_EINVAL, msg)


class SamplingParams:
    """How one request generates. max_tokens: new tokens at most (None: to
    the end of the context). temperature 0: greedy; else sampled from
    softmax(logits / temperature) over the top_k most likely (None: all)
    and the smallest set of them whose probability reaches top_p, with
    numpy.random.default_rng(seed). stop: strings that end the text (not
    included in it; a tokenizer is needed); stop_token_ids: ids that end
    it (included, as an end-of-sequence id); ignore_eos: do not stop at the
    model's end-of-sequence ids. logprobs: None, or n >= 0: the
    log-probability of each chosen token under the model (before
    temperature, top_k and top_p) and the n most likely."""

    def __init__(self, max_tokens: Optional[int] = 16, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: Optional[int] = None, seed: Optional[int] = None,
                 stop: Sequence[str] = (), stop_token_ids: Sequence[int] = (),
                 ignore_eos: bool = False, logprobs: Optional[int] = None):
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            _fail("max_tokens %r; expected an integer >= 1" % (max_tokens,))
        if not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
            _fail("temperature %r; expected a number >= 0" % (temperature,))
        if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            _fail("top_p %r; expected a number in (0, 1]" % (top_p,))
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            _fail("top_k %r; expected None or an integer >= 1" % (top_k,))
        if seed is not None and not isinstance(seed, int):
            _fail("seed %r; expected an integer" % (seed,))
        if isinstance(stop, str):
            stop = [stop]
        if any(not isinstance(s, str) or not s for s in stop):
            _fail("stop: expected non-empty strings")
        if any(not isinstance(t, int) or t < 0 for t in stop_token_ids):
            _fail("stop_token_ids: expected integers >= 0")
        if logprobs is not None and (not isinstance(logprobs, int) or logprobs < 0):
            _fail("logprobs %r; expected None or an integer >= 0" % (logprobs,))
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = top_k
        self.seed = seed
        self.stop = list(stop)
        self.stop_token_ids = set(int(t) for t in stop_token_ids)
        self.ignore_eos = bool(ignore_eos)
        self.logprobs = logprobs


class Token:
    """One new token of a request: its id, the text it adds (None without
    a tokenizer; may be empty while a UTF-8 character or a possible stop
    string is incomplete), its log-probability and the top ones ([(id,
    logprob)], most likely first) when asked."""
    __slots__ = ("id", "text", "logprob", "top")

    def __init__(self, id, text, logprob, top):
        self.id, self.text, self.logprob, self.top = id, text, logprob, top


class Request:
    """A submitted request: its events as they come (`events()`), or all
    at once (`wait()`). Fields once finished: token_ids, text (None without
    a tokenizer), logprobs ([Token]), finish_reason ("stop", "length",
    "cancelled", "error"), error (a message when "error")."""

    def __init__(self, rid, prompt, params, sink):
        self.id = rid
        self.prompt = list(prompt)
        self.params = params
        self.token_ids: List[int] = []
        self.tokens: List[Token] = []
        self.text: Optional[str] = None
        self.finish_reason: Optional[str] = None
        self.error: Optional[str] = None
        self.submitted = time.perf_counter()
        self.first_token_at: Optional[float] = None
        self.finished_at: Optional[float] = None
        self._sink = sink
        self._q: Optional["queue.SimpleQueue"] = None
        if sink is None:
            self._q = queue.SimpleQueue()
            self._sink = self._q.put
        self._cancel = False
        self._done = threading.Event()
        # the engine's bookkeeping
        self._rng = numpy.random.default_rng(params.seed)
        self._filled = 0            # prompt rows written by prefill chunks
        self._pos = 0               # next row a decode step writes
        self._next = 0              # the id that step feeds
        self._dec = None            # a StreamDecoder
        self._text = ""             # text so far, and how much of it is out
        self._out = 0

    def cancel(self):
        """Stop generating: the slot is freed before the engine's next run
        (the request ends with finish_reason "cancelled")."""
        self._cancel = True
        eng = getattr(self, "_engine", None)
        if eng is not None:
            eng._wake()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def events(self, timeout=None):
        """("token", Token) per new token, then one ("done", finish_reason)
        or ("error", message); only for a request submitted without a sink."""
        if self._q is None:
            _fail("Request.events: this request was submitted with a sink")
        while True:
            ev = self._q.get(timeout=timeout)
            yield ev
            if ev[0] in ("done", "error"):
                return

    def wait(self, timeout=None) -> "Request":
        """Block until finished; returns the request."""
        if not self._done.wait(timeout):
            raise TimeoutError("request %s not finished after %s s" % (self.id, timeout))
        return self


class Engine:
    """Continuous batching of requests over one es.llama model (see the
    module's docstring). slots: the sequences decoded together (the
    compiled batch). tokenizer: for stop strings and the text of each token
    (optional: ids in, ids out without it). eos_token_ids: the ids that end
    a sequence (default the model config's, with the tokenizer's)."""

    def __init__(self, model, slots: int = 8, tokenizer: Optional[Tokenizer] = None,
                 eos_token_ids: Optional[Sequence[int]] = None, start: bool = True):
        if not isinstance(slots, int) or slots < 1:
            _fail("Engine: slots %r; expected an integer >= 1" % (slots,))
        self.model = model
        self.B = slots
        self.C = model.chunk
        self.context = model.max_len - model.chunk
        if self.context < 2:
            _fail("Engine: max_len %d leaves no context past prefill_chunk %d"
                  % (model.max_len, model.chunk))
        self.V = model.V
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos = set(model.eos)
            if tokenizer is not None:
                for name in ("eos_token_ids", "eos_token_id"):
                    v = getattr(tokenizer, name, None)
                    if isinstance(v, int):
                        eos.add(v)
                    elif v:
                        eos.update(int(x) for x in v)
            self.eos = eos
        else:
            self.eos = set(int(x) for x in eos_token_ids)
        self._slots: List[Optional[Request]] = [None] * slots
        self._waiting: List[Request] = []
        self._cv = threading.Condition()
        self._closing = False
        self._last = "prefill"
        self._nid = 0
        self.dead: Optional[str] = None         # why the engine stopped for good
        self.recoveries = 0
        self.on_failure: Optional[Callable[[str], None]] = None
        self.on_recovered: Optional[Callable[[], None]] = None
        self.state = "starting"     # "ready", "recovering" (compiling again), "failing", "dead"
        self.stats = {"decode_steps": 0, "prefill_runs": 0, "tokens": 0, "requests": 0,
                      "mixed_prefill_runs": 0, "cancelled": 0, "decode_seconds": 0.0,
                      "prefill_seconds": 0.0}
        self._thread: Optional[threading.Thread] = None
        if start:
            self.start()

    # -- life
    def start(self):
        """Compile (if not yet) and start the engine's thread."""
        if self._thread is not None:
            return
        self.model._program(self.B)
        self.state = "ready"
        self._thread = threading.Thread(target=self._loop, name="einsummable-engine",
                                        daemon=True)
        self._thread.start()

    def close(self):
        """Cancel every request, stop the thread and the model's workers."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _wake(self):
        with self._cv:
            self._cv.notify_all()

    @property
    def active(self) -> int:
        """Requests holding a slot."""
        return sum(r is not None for r in self._slots)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    # -- requests
    def check(self, prompt: Sequence[int], params: SamplingParams):
        """Raise EinValueError when the request cannot run (a bad id, no
        room in the context, a stop string without a tokenizer)."""
        if len(prompt) == 0:
            _fail("the prompt is empty")
        for t in prompt:
            if not isinstance(t, (int, numpy.integer)) or not 0 <= t < self.V:
                _fail("token id %r is outside the vocabulary [0, %d)" % (t, self.V))
        n = len(prompt) + (params.max_tokens or 1)
        if n > self.context:
            raise _context_error(len(prompt), params.max_tokens, self.context)
        if params.stop and self.tokenizer is None:
            _fail("stop strings need a tokenizer; give stop_token_ids instead")

    def submit(self, prompt: Sequence[int], params: Optional[SamplingParams] = None,
               sink: Optional[Callable[[Any], None]] = None) -> Request:
        """Queue a request (token ids); it takes a slot as soon as one is
        free. sink: called from the engine's thread with each event
        (("token", Token), then ("done", reason) or ("error", message));
        without one, read them with Request.events()."""
        params = params or SamplingParams()
        self.check(prompt, params)
        with self._cv:
            if self.dead:
                raise EinError(EIN_EWORKER, "the engine stopped: %s" % self.dead)
            if self._closing:
                _fail("the engine is closed")
            self._nid += 1
            r = Request(self._nid, [int(t) for t in prompt], params, sink)
            r._engine = self
            if self.tokenizer is not None:
                try:                     # the text leaves special tokens out, as OpenAI's
                    r._dec = self.tokenizer.stream(skip_special_tokens=True)
                except TypeError:
                    r._dec = self.tokenizer.stream()
                r.text = ""
            self._waiting.append(r)
            self.stats["requests"] += 1
            self._cv.notify_all()
        return r

    # -- the loop
    def _finish(self, r, reason, error=None):
        if r.finished_at is not None:
            return
        r.finish_reason = reason
        r.error = error
        if reason == "cancelled":
            self.stats["cancelled"] += 1
        r.finished_at = time.perf_counter()
        if r._dec is not None and reason != "error":
            r.text = r._text
        try:
            r._sink(("error", error) if reason == "error" else ("done", reason))
        finally:
            r._done.set()

    def _admit(self):
        """Under the lock: drop cancelled requests, give free slots to the
        waiting ones (first come, first served)."""
        for b, r in enumerate(self._slots):
            if r is not None and r._cancel:
                self._slots[b] = None
                self._finish(r, "cancelled")
        keep = []
        for r in self._waiting:
            if r._cancel:
                self._finish(r, "cancelled")
            else:
                keep.append(r)
        self._waiting = keep
        for b in range(self.B):
            if self._slots[b] is None and self._waiting:
                r = self._waiting.pop(0)
                m = len(r.prompt) - 1          # rows prefilled; the last token is decoded
                r._filled = 0
                r._pos = m
                r._next = r.prompt[-1]
                self._slots[b] = r

    def _loop(self):
        while True:
            with self._cv:
                self._admit()
                while not self._closing and not any(self._slots):
                    self._cv.wait()
                    self._admit()
                if self._closing:
                    for b, r in enumerate(self._slots):
                        if r is not None:
                            self._slots[b] = None
                            self._finish(r, "cancelled")
                    for r in self._waiting:
                        self._finish(r, "cancelled")
                    self._waiting = []
                    return
                slots = list(self._slots)
            pre = [b for b, r in enumerate(slots)
                   if r is not None and r._filled < len(r.prompt) - 1]
            dec = [b for b, r in enumerate(slots)
                   if r is not None and r._filled >= len(r.prompt) - 1]
            try:
                if pre and (not dec or self._last == "decode"):
                    self._prefill(slots, pre)
                    self._last = "prefill"
                else:
                    self._decode(slots, dec)
                    self._last = "decode"
            except Exception as e:       # a worker died, a device failed: never hang
                if not self._recover(e):
                    return

    def _prefill(self, slots, pre):
        C = self.C
        ids = numpy.zeros((self.B, C), numpy.int32)
        pos = numpy.zeros(self.B, numpy.int32)
        ends = {}
        mixed = False
        for b, r in enumerate(slots):
            if r is None:
                continue
            m = len(r.prompt) - 1
            if b in pre:
                st = min(r._filled, max(m - C, 0))
                seg = r.prompt[st:min(st + C, m)]
                ids[b, :len(seg)] = seg
                pos[b] = st
                ends[b] = st + len(seg)
            else:
                pos[b] = r._pos          # padding from its next row on, rewritten before read
                mixed = True
        t0 = time.perf_counter()
        self.model.prefill(ids, pos)
        self.stats["prefill_seconds"] += time.perf_counter() - t0
        self.stats["prefill_runs"] += 1
        self.stats["mixed_prefill_runs"] += mixed
        for b, e in ends.items():
            slots[b]._filled = e

    def _decode(self, slots, dec):
        ids = numpy.zeros(self.B, numpy.int32)
        pos = numpy.zeros(self.B, numpy.int32)
        for b, r in enumerate(slots):
            if r is None:
                continue
            if b in dec:
                ids[b] = r._next
                pos[b] = r._pos
            else:
                pos[b] = r._filled       # the row its next chunk rewrites
        t0 = time.perf_counter()
        lg = self.model.step(ids, pos)
        self.stats["decode_seconds"] += time.perf_counter() - t0
        self.stats["decode_steps"] += 1
        for b in dec:
            r = slots[b]
            if r._cancel:
                continue                 # freed by the next _admit
            try:
                self._advance(b, r, lg[b])
            except Exception as e:       # this request's (a tokenizer's) failure, not the model's
                with self._cv:
                    if self._slots[b] is r:
                        self._slots[b] = None
                self._finish(r, "error", "request %d: %s: %s" % (r.id, type(e).__name__, e))

    def _advance(self, b, r, logits):
        p = r.params
        tok = _pick(logits, p, r._rng)
        lp, top = None, None
        if p.logprobs is not None:
            z = logits.astype(numpy.float64)
            z = z - (z.max() + math.log(numpy.exp(z - z.max()).sum()))
            lp = float(z[tok])
            if p.logprobs > 0:
                k = min(p.logprobs, len(z))
                idx = numpy.argpartition(-z, k - 1)[:k]
                idx = idx[numpy.lexsort((idx, -z[idx]))]
                top = [(int(i), float(z[i])) for i in idx]
        r._pos += 1
        r._next = tok
        r.token_ids.append(tok)
        self.stats["tokens"] += 1
        if r.first_token_at is None:
            r.first_token_at = time.perf_counter()
        stop_id = tok in p.stop_token_ids or (not p.ignore_eos and tok in self.eos)
        ending = stop_id or len(r.token_ids) >= (p.max_tokens or math.inf) \
            or r._pos + 1 >= self.context
        reason = None
        text = None
        if r._dec is not None:
            r._text += r._dec.push(tok)
            if ending and hasattr(r._dec, "flush"):
                r._text += r._dec.flush()        # bytes held for a character never completed
            cut, hold = _stop_scan(r._text, p.stop, r._out)
            if cut is not None:
                r._text = r._text[:cut]
                reason = "stop"
                hold = len(r._text)
            elif ending:
                hold = len(r._text)      # the end: nothing more can complete a stop string
            text = r._text[r._out:hold]
            r._out = hold
        t = Token(tok, text, lp, top)
        r.tokens.append(t)
        r._sink(("token", t))
        if reason is None:
            if stop_id:
                reason = "stop"
            elif len(r.token_ids) >= (p.max_tokens or math.inf) or r._pos + 1 >= self.context:
                reason = "length"
        if reason is not None:
            with self._cv:
                if self._slots[b] is r:
                    self._slots[b] = None
            self._finish(r, reason)

    def _recover(self, e):
        """A run failed (a worker died): end every request holding a slot
        with the error, compile again and go on with the waiting ones.
        Returns False when the engine cannot go on."""
        msg = "the model failed during a run: %s" % (getattr(e, "message", None) or e)
        with self._cv:
            held = [r for r in self._slots if r is not None]
            self._slots = [None] * self.B
        limit = int(os.environ.get("EIN_SERVE_RECOVERIES") or 3)
        self.state = "recovering" if self.recoveries < limit else "failing"
        for r in held:
            self._finish(r, "error", msg)
        if self.on_failure is not None:
            self.on_failure(msg)
        if self.recoveries >= limit:
            why = "%s (no recovery left: %d of EIN_SERVE_RECOVERIES=%d made)" % (
                msg, self.recoveries, limit)
        else:
            try:
                self.recoveries += 1
                self.model.close()
                self.model._program(self.B)
                self.state = "ready"
                if self.on_recovered is not None:
                    self.on_recovered()
                return True
            except Exception as e2:
                why = "%s; compiling again failed: %s" % (msg, getattr(e2, "message", None) or e2)
        with self._cv:
            self.dead = why
            self.state = "dead"
            waiting, self._waiting = self._waiting, []
        for r in waiting:
            self._finish(r, "error", why)
        if self.on_failure is not None:
            self.on_failure(why)
        return False


class ContextError(EinValueError):
    """A prompt (with its max_tokens) longer than the context: .prompt_tokens,
    .max_tokens, .context."""


def _context_error(prompt_tokens, max_tokens, context):
    if max_tokens is None:
        m = ("the prompt has %d tokens; this model's context is %d tokens (at least one "
             "new token must fit)" % (prompt_tokens, context))
    else:
        m = ("this model's context is %d tokens; the request asks for %d (%d in the "
             "prompt, %d new)" % (context, prompt_tokens + max_tokens, prompt_tokens,
                                  max_tokens))
    e = ContextError(EIN_EINVAL, m)
    e.prompt_tokens, e.max_tokens, e.context = prompt_tokens, max_tokens, context
    return e


def _pick(logits, p, rng):
    """The next id: argmax when temperature is 0, else a draw after
    temperature, top_k and top_p (inverse CDF of one uniform of rng)."""
    if p.temperature == 0:
        return int(numpy.argmax(logits))
    z = logits.astype(numpy.float64) / p.temperature
    if p.top_k is not None and p.top_k < len(z):
        cut = numpy.partition(z, -p.top_k)[-p.top_k]
        z = numpy.where(z >= cut, z, -numpy.inf)
    pr = numpy.exp(z - z.max())
    pr /= pr.sum()
    if p.top_p < 1.0:
        order = numpy.argsort(-pr, kind="stable")
        cum = numpy.cumsum(pr[order])
        keep = int(numpy.searchsorted(cum, p.top_p)) + 1     # the token that reaches top_p too
        mask = numpy.zeros(len(pr), bool)
        mask[order[:keep]] = True
        pr = numpy.where(mask, pr, 0.0)
        pr /= pr.sum()
    cum = numpy.cumsum(pr)
    i = int(numpy.searchsorted(cum, rng.random() * cum[-1], side="right"))
    i = min(i, len(pr) - 1)
    while pr[i] == 0.0 and i > 0:        # never a token outside the kept set
        i -= 1
    return i


def _stop_scan(text, stops, out):
    """(cut, hold): cut is where the first stop string starts (None when
    none is in text); else hold is how much of text may go out (the rest
    could begin a stop string)."""
    if not stops:
        return None, len(text)
    first = None
    for s in stops:
        i = text.find(s, max(0, out - len(s) + 1))
        if i >= 0 and (first is None or i < first):
            first = i
    if first is not None:
        return first, first
    hold = len(text)
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = min(hold, len(text) - k)
                break
    return None, max(hold, out)
