"""einserve — an OpenAI-compatible HTTP server over a Hugging Face LLaMA
folder, with continuous batching (docs/serving.md).

    einserve --model DIR [--gpus LIST | --cpu N] [--host H] [--port P] [--api-key K]
    python -m einsummable.serve --model DIR ...      (the same)

DIR holds config.json, the safetensors weights (model.safetensors, or the
shards of model.safetensors.index.json) and tokenizer.json (with
tokenizer_config.json for chat). The model is compiled once for --slots
sequences; /v1/completions, /v1/chat/completions (both streaming with
server-sent events), /v1/models and /health are served on FastAPI and
uvicorn. While the model loads and compiles every endpoint but /health
answers 503, and /health does too.
"""

import argparse
import asyncio
import hmac
import json
import os
import sys
import threading
import time
import uuid

from ._errors import EIN_EINVAL, EinError, EinValueError
from . import _core
from . import engine as _engine

__all__ = ["main", "build_app", "load_folder"]

# -- errors -------------------------------------------------------------


class ApiError(Exception):
    """An OpenAI error answer: HTTP status, message, type, param, code."""

    def __init__(self, status, message, type_="invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type_, param, code)

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def _bad(message, param=None, code=None):
    return ApiError(400, message, param=param, code=code)


# -- the model folder ------------------------------------------------------


def _say(msg):
    sys.stderr.write("einserve: %s\n" % msg)
    sys.stderr.flush()


def load_tokenizer(folder):
    """(tokenizer or None, why not): einsummable.tokenizer.Tokenizer of
    folder/tokenizer.json (with tokenizer_config.json's and
    generation_config.json's bos/eos)."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return None, "the model folder has no tokenizer.json"
    try:
        from . import tokenizer as _tok
    except ImportError as e:
        return None, "this einsummable has no tokenizer module (%s)" % e
    return _tok.Tokenizer.from_file(folder), None


class ChatTemplate:
    """The folder's chat template (einsummable.chat) rendered and encoded
    as transformers' apply_chat_template(tokenize=True) does: the text of
    the template (which writes the bos itself) encoded without special
    tokens added."""

    def __init__(self, template, tokenizer):
        self.template, self.tokenizer = template, tokenizer

    def __call__(self, messages):
        text = self.template.render(messages, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)


def load_chat(folder, tok):
    """(ChatTemplate or None, why not)."""
    if tok is None:
        return None, "no tokenizer"
    try:
        from . import chat as _chat
    except ImportError as e:
        return None, "this einsummable has no chat template module (%s)" % e
    try:
        return ChatTemplate(_chat.ChatTemplate.from_dir(folder), tok), None
    except EinError as e:
        return None, e.message


def weight_files(folder):
    """The safetensors files of a Hugging Face folder: the shards an index
    names, else model.safetensors, else every *.safetensors."""
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(idx):
        with open(idx) as f:
            wm = json.load(f).get("weight_map") or {}
        files = sorted(set(wm.values()))
        if not files:
            raise EinValueError(EIN_EINVAL, "%s names no shard" % idx)
        return [os.path.join(folder, f) for f in files]
    one = os.path.join(folder, "model.safetensors")
    if os.path.isfile(one):
        return [one]
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if not files:
        raise EinValueError(EIN_EINVAL, "no .safetensors file in %s" % folder)
    return [os.path.join(folder, f) for f in files]


def load_folder(folder, device, backend=None, slots=8, max_len=None, prefill_chunk=16,
                strategy=None, tokenizer=True):
    """(engine, tokenizer or None, why not, chat template or None, why not)
    for a Hugging Face
    LLaMA folder, compiled for `slots` sequences of up to max_len tokens
    (default the config's max_position_embeddings, at most 2048)."""
    from . import llama
    cfgp = os.path.join(folder, "config.json")
    if not os.path.isfile(cfgp):
        raise EinValueError(EIN_EINVAL, "no config.json in %s" % folder)
    with open(cfgp) as f:
        cfg = json.load(f)
    arch = cfg.get("architectures") or ["LlamaForCausalLM"]
    if cfg.get("model_type", "llama") != "llama" or arch != ["LlamaForCausalLM"]:
        raise EinValueError(EIN_EINVAL, "%s: model_type %r, architectures %r; einserve runs "
                            "LlamaForCausalLM (model_type llama) only"
                            % (cfgp, cfg.get("model_type"), arch))
    files = weight_files(folder)
    mpe = int(cfg.get("max_position_embeddings", 2048))
    if max_len and int(max_len) > mpe:
        raise EinValueError(EIN_EINVAL, "--max-len %d exceeds the model's "
                            "max_position_embeddings %d"
                            % (max_len, mpe))
    ctx = int(max_len) if max_len else min(mpe, 2048)
    tok, why = (None, "--no-tokenizer")
    if tokenizer:
        tok, why = load_tokenizer(folder)
    chat, chat_why = load_chat(folder, tok)
    _say("loading %s (%d safetensors file%s, %d layers, vocab %d); compiling for %d slots "
         "of %d tokens on %s" % (folder, len(files), "" if len(files) == 1 else "s",
                                  cfg.get("num_hidden_layers", 0), cfg.get("vocab_size", 0),
                                  slots, ctx, _devices_words(device, backend)))
    t0 = time.time()
    model = llama.load(files, cfg, device=device, max_len=ctx + prefill_chunk, backend=backend,
                       prefill_chunk=prefill_chunk, strategy=strategy)
    try:
        eng = _engine.Engine(model, slots=slots, tokenizer=tok)
    except BaseException:
        model.close()
        raise
    _say("ready in %.1f s%s%s" % (time.time() - t0, "" if tok else " (no tokenizer: %s; "
                                   "token-id prompts only)" % why,
                                   "" if chat or not tok else " (no chat: %s)" % chat_why))
    return eng, tok, why, chat, chat_why


def _devices_words(device, backend):
    rows = _core._backends()
    n, row = len(device), rows.get(backend) or next(iter(rows.values()))
    if row.probed:  # devices named by id (GPUs)
        return "%s%s %s" % (row.device.decode(), "" if n == 1 else "s",
                            ",".join(map(str, device)))
    return "%d %s%s" % (n, row.device.decode(), "" if n == 1 else "s")


def parse_devices(text):
    """'0-3,6' -> [0, 1, 2, 3, 6]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            if not a.isdigit() or not b.isdigit() or int(b) < int(a):
                raise ValueError("bad device range %r" % part)
            out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise ValueError("bad device %r" % part)
    if len(set(out)) != len(out):
        raise ValueError("a device is named twice in %r" % text)
    return out


# -- request bodies ------------------------------------------------------------


class _Body:
    """A JSON object's fields, taken one by one; what is left at the end is
    refused by name."""

    def __init__(self, d):
        if not isinstance(d, dict):
            raise _bad("the request body must be a JSON object")
        self.d = dict(d)

    def take(self, name, default=None):
        return self.d.pop(name, default)

    def num(self, name, default, lo, hi, integer=False, lo_open=False):
        v = self.d.pop(name, None)
        if v is None:
            return default
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or v < lo or v > hi or (lo_open and v == lo):
            raise _bad("%s: %r; expected %s %s%s to %s" % (
                name, v, "an integer" if integer else "a number", "above " if lo_open else "",
                lo, hi), param=name)
        return v

    def only(self, name, allowed, why):
        """A field accepted only at a value that changes nothing."""
        v = self.d.pop(name, None)
        if v is not None and v not in allowed:
            raise _bad("%s=%s is not supported (%s)" % (name, json.dumps(v), why), param=name)

    def done(self):
        if self.d:
            names = sorted(self.d)
            raise _bad("unsupported field%s: %s (einserve refuses what it does not "
                       "implement rather than ignore it)" % (
                           "" if len(names) == 1 else "s", ", ".join(names)), param=names[0])


def _stop_list(b):
    stop = b.take("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) \
            or len(stop) > 16:
        raise _bad("stop: expected a non-empty string or a list of up to 16", param="stop")
    return stop


def _common(b, eng, what):
    """The sampling fields both endpoints take -> dict of SamplingParams args."""
    kw = {}
    kw["temperature"] = b.num("temperature", 1.0, 0, 2)
    kw["top_p"] = b.num("top_p", 1.0, 0, 1, lo_open=True)
    tk = b.num("top_k", None, -1, 1 << 30, integer=True)
    kw["top_k"] = None if tk in (None, -1, 0) else tk
    kw["seed"] = b.num("seed", None, -(1 << 63), (1 << 64) - 1, integer=True)
    if kw["seed"] is not None and kw["seed"] < 0:
        kw["seed"] = kw["seed"] & ((1 << 64) - 1)
    kw["stop"] = _stop_list(b)
    sti = b.take("stop_token_ids")
    if sti is not None:
        if not isinstance(sti, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                and 0 <= t < eng.V for t in sti):
            raise _bad("stop_token_ids: expected a list of ids in [0, %d)" % eng.V,
                       param="stop_token_ids")
        kw["stop_token_ids"] = sti
    ie = b.take("ignore_eos")
    if ie is not None:
        if not isinstance(ie, bool):
            raise _bad("ignore_eos: expected true or false", param="ignore_eos")
        kw["ignore_eos"] = ie
    if kw["stop"] and eng.tokenizer is None:
        raise _bad("stop strings need the model's tokenizer, which this server has not; "
                   "give stop_token_ids", param="stop")
    b.only("n", (1,), "one choice per prompt")
    b.only("best_of", (1,), "one choice per prompt")
    b.only("presence_penalty", (0, 0.0), "no penalties")
    b.only("frequency_penalty", (0, 0.0), "no penalties")
    b.only("repetition_penalty", (1, 1.0), "no penalties")
    lb = b.take("logit_bias")
    if lb not in (None, {}):
        raise _bad("logit_bias is not supported", param="logit_bias")
    b.take("user")                          # an end-user id: changes nothing
    return kw


def _max_tokens(b, names, default):
    for n in names:
        if b.d.get(n) is not None:
            v = b.num(n, None, 1, 1 << 30, integer=True)
            for m in names:
                b.take(m)
            return v
    for m in names:
        b.take(m)
    return default


def _flag(b, name):
    v = b.take(name)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad("%s: %s; expected true or false" % (name, json.dumps(v)), param=name)
    return v


def _stream_opts(b, stream):
    so = b.take("stream_options")
    if so is None:
        return False
    if not stream:
        raise _bad("stream_options needs stream: true", param="stream_options")
    if not isinstance(so, dict) or set(so) - {"include_usage"}:
        raise _bad("stream_options: only include_usage is supported", param="stream_options")
    return bool(so.get("include_usage"))


# -- the app ---------------------------------------------------------------


class State:
    """What the app serves: set once loading ends."""

    def __init__(self, name, api_key=None):
        self.name = name
        self.api_key = api_key
        self.engine = None
        self.tokenizer = None
        self.no_tok_why = None
        self.chat = None             # messages -> ids (ChatTemplate), or None
        self.no_chat_why = "no tokenizer"
        self.error = None            # loading failed or the engine died: why
        self.created = int(time.time())
        self.server = None           # uvicorn.Server, to stop it when the engine dies
        self.exit_code = 0


def build_app(state):
    """The FastAPI app over `state` (its engine may still be loading)."""
    from fastapi import FastAPI, Request as HTTPRequest
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = FastAPI(title="einserve", docs_url=None, redoc_url=None, openapi_url=None)

    def err(e: ApiError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc):
        return err(ApiError(exc.status_code, "%s %s: %s" % (
            request.method, request.url.path, exc.detail), code=None))

    @app.exception_handler(ApiError)
    async def _api(request, exc):
        return err(exc)

    class Auth:
        """The API key, checked before anything else (a plain ASGI
        middleware: Starlette's BaseHTTPMiddleware would hide a client's
        disconnect from the endpoints)."""

        def __init__(self, app):
            self.inner = app

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http" and state.api_key is not None \
                    and scope["path"] != "/health":
                h = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(h, b"Bearer " + state.api_key.encode()):
                    await err(ApiError(401, "Incorrect API key provided" if h else
                                       "No API key provided: send Authorization: Bearer KEY",
                                       code="invalid_api_key"))(scope, receive, send)
                    return
            await self.inner(scope, receive, send)

    app.add_middleware(Auth)

    def ready():
        if state.error is not None:
            raise ApiError(500 if state.engine is not None else 503,
                           "the model is not available: %s" % state.error, "server_error",
                           code="model_failed")
        eng = state.engine
        if eng is None or eng.state != "ready":
            raise ApiError(503, "the model is %s" % (
                "loading; try again shortly" if eng is None else
                "compiling again after a failure; try again shortly"
                if eng.state == "recovering" else "failing: %s" % eng.dead), "server_error",
                code="model_not_ready")
        return eng

    @app.get("/health")
    async def health():
        try:
            eng = ready()
        except ApiError as e:
            return err(e)
        return {"status": "ok", "model": state.name, "slots": eng.B, "active": eng.active,
                "waiting": eng.waiting, "recoveries": eng.recoveries,
                "requests": eng.stats["requests"], "tokens": eng.stats["tokens"],
                "cancelled": eng.stats["cancelled"]}

    @app.get("/v1/models")
    async def models():
        eng = ready()
        return {"object": "list", "data": [{"id": state.name, "object": "model",
                                            "created": state.created, "owned_by": "einsummable",
                                            "max_model_len": eng.context}]}

    async def body_of(request):
        try:
            raw = await request.body()
            return _Body(json.loads(raw))
        except (ValueError, UnicodeDecodeError) as e:
            raise _bad("the request body is not valid JSON: %s" % e)

    def check_model(b):
        m = b.take("model")
        if m is None:
            raise _bad("model: missing (this server has %r)" % state.name, param="model")
        if m != state.name:
            raise ApiError(404, "The model %r does not exist; this server has %r"
                           % (m, state.name), param="model", code="model_not_found")

    def submit(eng, prompts, params, q, loop, param):
        reqs = []
        for i, p in enumerate(prompts):
            try:
                eng.check(p, params)
            except _engine.ContextError as e:
                for r in reqs:
                    r.cancel()
                raise _bad(e.message, param=param,
                           code="context_length_exceeded")
            except EinValueError as e:
                for r in reqs:
                    r.cancel()
                raise _bad(e.message)
            sink = (lambda ev, i=i: loop.call_soon_threadsafe(q.put_nowait, (i, ev)))
            try:
                reqs.append(eng.submit(p, params, sink=sink))
            except EinError as e:
                for r in reqs:
                    r.cancel()
                raise ApiError(503, e.message, "server_error")
        return reqs

    def tok_str(tid):
        if state.tokenizer is None:
            return "token_id:%d" % tid
        return state.tokenizer.decode([tid])

    def comp_logprobs(toks, offset0):
        lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        off = offset0
        for t in toks:
            lp["tokens"].append(tok_str(t.id))
            lp["token_logprobs"].append(t.logprob)
            lp["top_logprobs"].append(None if t.top is None else
                                      {tok_str(i): v for i, v in t.top})
            lp["text_offset"].append(off)
            off += len(t.text or "")
        return lp

    def chat_logprobs(toks):
        out = []
        for t in toks:
            s = tok_str(t.id)
            out.append({"token": s, "logprob": t.logprob, "bytes": list(s.encode()),
                        "top_logprobs": [{"token": tok_str(i), "logprob": v,
                                          "bytes": list(tok_str(i).encode())}
                                         for i, v in (t.top or [])]})
        return {"content": out}

    async def run(request, reqs, q, stream, chat, include_usage, want_ids, rid, lp_on):
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        n = len(reqs)
        ptoks = sum(len(r.prompt) for r in reqs)

        def usage():
            c = sum(len(r.token_ids) for r in reqs)
            return {"prompt_tokens": ptoks, "completion_tokens": c, "total_tokens": ptoks + c}

        if not stream:
            left = n

            async def gone():               # http.disconnect: the client went away
                while (await request.receive())["type"] != "http.disconnect":
                    pass

            watch = asyncio.ensure_future(gone())
            try:
                while left:
                    get = asyncio.ensure_future(q.get())
                    await asyncio.wait([get, watch], return_when=asyncio.FIRST_COMPLETED)
                    if not get.done():
                        get.cancel()
                        return None          # its sequences are cancelled below
                    i, ev = get.result()
                    if ev[0] == "error":
                        raise ApiError(500, ev[1], "server_error", code="model_failed")
                    if ev[0] == "done":
                        left -= 1
            finally:
                watch.cancel()
                for r in reqs:
                    r.cancel()
            choices = []
            for i, r in enumerate(reqs):
                text = r.text
                c = {"index": i, "finish_reason": r.finish_reason}
                if chat:
                    c["message"] = {"role": "assistant", "content": text}
                    c["logprobs"] = chat_logprobs(r.tokens) if lp_on else None
                else:
                    c["text"] = text
                    c["logprobs"] = comp_logprobs(r.tokens, 0) if lp_on else None
                if want_ids:
                    c["token_ids"] = list(r.token_ids)
                choices.append(c)
            return {"id": rid, "object": obj, "created": created, "model": state.name,
                    "choices": choices, "usage": usage()}

        async def events():
            obj_c = "chat.completion.chunk" if chat else "text_completion"

            def chunk(choices, **extra):
                d = {"id": rid, "object": obj_c, "created": created, "model": state.name,
                     "choices": choices}
                d.update(extra)
                return "data: %s\n\n" % json.dumps(d)

            offs = [0] * n
            try:
                if chat:
                    yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None} for i in range(n)])
                left = n
                while left:
                    i, ev = await q.get()
                    if ev[0] == "token":
                        t = ev[1]
                        text = t.text
                        if not text and not lp_on and not want_ids:
                            continue
                        c = {"index": i, "finish_reason": None}
                        if chat:
                            c["delta"] = {"content": text}
                            c["logprobs"] = chat_logprobs([t]) if lp_on else None
                        else:
                            c["text"] = text
                            c["logprobs"] = comp_logprobs([t], offs[i]) if lp_on else None
                        if want_ids:
                            c["token_ids"] = [t.id]
                        offs[i] += len(text or "")
                        yield chunk([c])
                    elif ev[0] == "done":
                        left -= 1
                        c = {"index": i, "finish_reason": ev[1], "logprobs": None}
                        if chat:
                            c["delta"] = {}
                        else:
                            c["text"] = ""
                        yield chunk([c])
                    else:
                        yield "data: %s\n\n" % json.dumps(ApiError(
                            500, ev[1], "server_error", code="model_failed").body())
                        return
                if include_usage:
                    yield chunk([], usage=usage())
                yield "data: [DONE]\n\n"
            finally:
                for r in reqs:        # a client that went away cancels its sequences
                    r.cancel()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.post("/v1/completions")
    async def completions(request: HTTPRequest):
        b = await body_of(request)
        eng = ready()
        check_model(b)
        prompt = b.take("prompt")
        stream = _flag(b, "stream")
        include_usage = _stream_opts(b, stream)
        want_ids = _flag(b, "return_token_ids")
        mt = _max_tokens(b, ["max_tokens"], 16)
        kw = _common(b, eng, "completions")
        lp = b.num("logprobs", None, 0, 20, integer=True)
        b.only("echo", (False,), "the prompt is not echoed")
        b.only("suffix", ("",), "no insertion")
        b.done()
        # prompt: a string, a list of ids, or a list of either (one choice each)
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                       and all(isinstance(t, int) for t in prompt)):
            prompt = [prompt]
        if not isinstance(prompt, list) or not prompt or len(prompt) > 64:
            raise _bad("prompt: expected a string, a list of token ids, or a list of up to 64 "
                       "of either", param="prompt")
        ids = []
        for p in prompt:
            if isinstance(p, str):
                if state.tokenizer is None:
                    raise _bad("text prompts need the model's tokenizer, which this server has "
                               "not (%s): send the prompt as a list of token ids"
                               % state.no_tok_why, param="prompt")
                try:
                    ids.append(state.tokenizer.encode(p, add_special_tokens=True))
                except EinError as e:
                    raise _bad("the prompt cannot be encoded: %s" % e.message, param="prompt")
            elif isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                             for t in p):
                ids.append(p)
            else:
                raise _bad("prompt: expected a string or a list of token ids", param="prompt")
        params = _engine.SamplingParams(max_tokens=mt, logprobs=lp, **kw)
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        reqs = submit(eng, ids, params, q, loop, "prompt")
        out = await run(request, reqs, q, stream, False, include_usage,
                        want_ids or state.tokenizer is None, "cmpl-" + uuid.uuid4().hex,
                        lp is not None)
        return out

    @app.post("/v1/chat/completions")
    async def chat(request: HTTPRequest):
        b = await body_of(request)
        eng = ready()
        check_model(b)
        msgs = b.take("messages")
        stream = _flag(b, "stream")
        include_usage = _stream_opts(b, stream)
        want_ids = _flag(b, "return_token_ids")
        mt = _max_tokens(b, ["max_completion_tokens", "max_tokens"], None)
        kw = _common(b, eng, "chat")
        lp_on = _flag(b, "logprobs")
        if not isinstance(lp_on, bool):
            raise _bad("logprobs: expected true or false", param="logprobs")
        top = b.num("top_logprobs", 0, 0, 20, integer=True)
        if top and not lp_on:
            raise _bad("top_logprobs needs logprobs: true", param="top_logprobs")
        rf = b.take("response_format")
        if rf not in (None, {"type": "text"}):
            raise _bad("response_format: only {\"type\": \"text\"} is supported",
                       param="response_format")
        for name in ("tools", "functions"):
            if b.take(name) not in (None, []):
                raise _bad("%s: tool calls are not supported" % name, param=name)
        b.only("tool_choice", ("none",), "no tool calls")
        b.done()
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs):
            raise _bad("messages: expected a non-empty list of {role, content}",
                       param="messages")
        for m in msgs:
            c = m.get("content")
            if isinstance(c, list):            # [{type: text, text}] parts
                if not all(isinstance(p, dict) and p.get("type") == "text"
                           and isinstance(p.get("text"), str) for p in c):
                    raise _bad("messages: only text content parts are supported",
                               param="messages")
                m["content"] = "".join(p["text"] for p in c)
            elif not isinstance(c, str):
                raise _bad("messages: each content must be a string", param="messages")
        if state.chat is None:
            raise _bad("chat needs the model's tokenizer and chat template, which this server "
                       "has not (%s); use /v1/completions" % state.no_chat_why, param="messages")
        try:
            ids = list(state.chat(msgs))
        except (EinError, ValueError, LookupError) as e:
            raise _bad("the chat template failed: %s" % (getattr(e, "message", None) or e),
                       param="messages")
        params = _engine.SamplingParams(max_tokens=mt, logprobs=(top if lp_on else None), **kw)
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        reqs = submit(eng, [ids], params, q, loop, "messages")
        return await run(request, reqs, q, stream, True, include_usage, want_ids,
                         "chatcmpl-" + uuid.uuid4().hex, lp_on)

    return app


# -- the command line ------------------------------------------------------


def _parser():
    p = argparse.ArgumentParser(
        prog="einserve", description="An OpenAI-compatible server (/v1/completions, "
        "/v1/chat/completions, /v1/models, /health) over a Hugging Face LLaMA folder, with "
        "continuous batching (docs/serving.md).")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="a Hugging Face folder: config.json, *.safetensors, tokenizer.json")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpus", metavar="LIST", help="GPUs to run on, e.g. 0-7 or 0,1")
    g.add_argument("--cpu", type=int, metavar="N", help="N CPU devices (default 1)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", metavar="K", default=os.environ.get("EINSERVE_API_KEY"),
                   help="require Authorization: Bearer K (default $EINSERVE_API_KEY; none)")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="the model's name in the API (default the folder's name)")
    p.add_argument("--slots", type=int, default=8,
                   help="sequences decoded together: the compiled batch (default 8)")
    p.add_argument("--max-len", type=int, metavar="N",
                   help="context length in tokens (default max_position_embeddings, "
                   "at most 2048)")
    p.add_argument("--prefill-chunk", type=int, default=16, metavar="C",
                   help="prompt tokens per slot and prefill run (default 16)")
    p.add_argument("--strategy", choices=["megatron"], help="a hand-written plan")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default warning)")
    return p


def main(argv=None):
    a = _parser().parse_args(argv)
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        _say("needs FastAPI and uvicorn (Debian: python3-fastapi python3-uvicorn): %s" % e)
        return 2
    if not os.path.isdir(a.model):
        _say("--model %s: not a folder" % a.model)
        return 2
    backend = None
    try:
        if a.gpus is not None:
            device, backend = parse_devices(a.gpus), "cuda"
        else:
            if a.cpu is not None and a.cpu < 1:
                raise ValueError("--cpu %d: expected N >= 1" % a.cpu)
            device = list(range(a.cpu or 1))
    except ValueError as e:
        _say(str(e))
        return 2
    if a.slots < 1 or a.prefill_chunk < 1 or (a.max_len is not None and a.max_len < 2):
        _say("--slots and --prefill-chunk must be >= 1, --max-len >= 2")
        return 2
    name = a.served_model_name or os.path.basename(os.path.abspath(a.model))
    state = State(name, a.api_key)
    app = build_app(state)
    config = uvicorn.Config(app, host=a.host, port=a.port, log_level=a.log_level,
                            lifespan="off", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    state.server = server

    def stop(code, why):
        state.error = why
        state.exit_code = code
        server.should_exit = True

    def load():
        delay = float(os.environ.get("EIN_SERVE_DELAY_LOAD") or 0)   # tests: 503 while loading
        if delay > 0:
            time.sleep(delay)
        try:
            eng, tok, why, chat, chat_why = load_folder(
                a.model, device, backend=backend, slots=a.slots, max_len=a.max_len,
                prefill_chunk=a.prefill_chunk, strategy=a.strategy)
        except (EinError, OSError, ValueError) as e:
            _say("loading failed: %s" % (getattr(e, "message", None) or e))
            stop(1, "loading failed: %s" % (getattr(e, "message", None) or e))
            return
        state.tokenizer, state.no_tok_why = tok, why
        state.chat, state.no_chat_why = chat, chat_why

        def failed(msg):
            if eng.dead:
                _say("the engine cannot go on (%s); exiting" % msg)
                stop(1, eng.dead)
            else:
                _say(msg + ("; compiling again" if eng.state == "recovering" else ""))

        eng.on_failure = failed
        eng.on_recovered = lambda: _say("recovered: serving again")
        state.engine = eng
        while not server.started:          # bound: say where (a failed bind exits the process)
            time.sleep(0.05)
        _say("serving %r on http://%s:%d (/v1/completions, /v1/chat/completions, "
             "/v1/models, /health)" % (name, a.host, a.port))

    th = threading.Thread(target=load, name="einserve-load", daemon=True)
    th.start()
    try:
        server.run()
    finally:
        if state.engine is not None:
            state.engine.close()
    if not server.started and state.exit_code == 0:
        return 1                       # could not bind
    return state.exit_code


if __name__ == "__main__":
    sys.exit(main())
