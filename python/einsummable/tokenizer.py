"""einsummable.tokenizer — Hugging Face tokenizer.json, text to ids and back
(docs/tokenizer.md; the C API is include/einsummable/ein_tokenizer.h).

    from einsummable.tokenizer import Tokenizer
    tok = Tokenizer.from_file("Llama-3-8B/tokenizer.json")   # or the folder
    ids = tok.encode("Hello world")          # [bos, ...]: the post-processor's template
    text = tok.decode(ids, skip_special_tokens=True)
    s = tok.stream()                         # streaming decode, one id at a time
    pieces = [s.push(i) for i in ids] + [s.flush()]   # never half a character

From a folder (or a tokenizer.json with its siblings), tokenizer_config.json
gives bos_token / eos_token and generation_config.json eos_token_id; their
ids are bos_token_id and eos_token_ids. The tokenizer is immutable: one may
be used from many threads at once; a stream belongs to one thread.
"""

import ctypes
import json
import os
from typing import Any, Dict, List, Optional, Sequence

from ._errors import EIN_EINVAL, EinError
from ._lib import ein_error, lib as _L

_c = _L.cdll
_P = ctypes.c_void_p
_I32P = ctypes.POINTER(ctypes.c_int32)
_SZ = ctypes.c_size_t
_ERR = ctypes.POINTER(ein_error)
_PROTOS = {
    "ein_tokenizer_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    "ein_tokenizer_load_json": (ctypes.c_int, [ctypes.c_char_p, _SZ, ctypes.POINTER(_P), _ERR]),
    "ein_tokenizer_free": (None, [_P]),
    "ein_tokenizer_encode": (ctypes.c_int, [_P, ctypes.c_char_p, _SZ, ctypes.c_int,
                                            ctypes.POINTER(_I32P), ctypes.POINTER(_SZ), _ERR]),
    "ein_tokenizer_decode": (ctypes.c_int, [_P, _I32P, _SZ, ctypes.c_int, ctypes.POINTER(_P),
                                            ctypes.POINTER(_SZ), _ERR]),
    "ein_tokenizer_vocab_size": (ctypes.c_int32, [_P]),
    "ein_tokenizer_token_to_id": (ctypes.c_int32, [_P, ctypes.c_char_p, _SZ]),
    "ein_tokenizer_id_to_token": (_P, [_P, ctypes.c_int32, ctypes.POINTER(_SZ)]),
    "ein_tokenizer_is_special": (ctypes.c_int, [_P, ctypes.c_int32]),
    "ein_tokenizer_bos_id": (ctypes.c_int32, [_P]),
    "ein_tokenizer_buf_free": (None, [_P]),
    "ein_tokstream_new": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "ein_tokstream_push": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.POINTER(_P),
                                          ctypes.POINTER(_SZ), _ERR]),
    "ein_tokstream_flush": (ctypes.c_int, [_P, ctypes.POINTER(_P), ctypes.POINTER(_SZ), _ERR]),
    "ein_tokstream_free": (None, [_P]),
}
_f: Dict[str, Any] = {}
for _name, (_res, _args) in _PROTOS.items():
    try:
        _fn = getattr(_c, _name)
    except AttributeError:  # a library older than this package
        continue
    _fn.restype = _res
    _fn.argtypes = _args
    _f[_name] = _fn


def _fn_(name):
    try:
        return _f[name]
    except KeyError:
        raise EinError(-10, "einsummable: %s has no %s (a library older than this package?)"
                       % (_L.path, name)) from None


def _check(rc, err):
    if rc < 0:
        raise EinError(err.code if err.code < 0 else rc, err.msg.decode("utf-8", "replace"))


def _take_text(p, n):
    """The library's malloc'd UTF-8 buffer as str (freed here)."""
    try:
        return ctypes.string_at(p.value, n.value).decode("utf-8") if n.value else ""
    finally:
        _fn_("ein_tokenizer_buf_free")(p)


def _token_content(v):
    """tokenizer_config's bos_token / eos_token: a string or {"content": ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids_arg(ids, vocab_size):
    ids = list(ids)
    for k, i in enumerate(ids):
        if isinstance(i, bool) or not isinstance(i, int) and not hasattr(i, "__index__"):
            raise EinError(EIN_EINVAL, "decode: ids[%d] is %r, not an int" % (k, i))
        i = int(i)
        if not 0 <= i < vocab_size:
            raise EinError(EIN_EINVAL, "decode: token id %d (at %d) is out of range 0..%d"
                           % (i, k, vocab_size - 1))
        ids[k] = i
    return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)


class Tokenizer:
    """A loaded tokenizer.json. Use Tokenizer.from_file(path)."""

    def __init__(self, handle: int, config: Optional[Dict[str, Any]] = None,
                 generation_config: Optional[Dict[str, Any]] = None):
        self._p = handle
        self.config: Dict[str, Any] = dict(config or {})
        self.vocab_size: int = _fn_("ein_tokenizer_vocab_size")(self._p)
        bos = _fn_("ein_tokenizer_bos_id")(self._p)
        self.bos_token: Optional[str] = _token_content(self.config.get("bos_token"))
        if self.bos_token is not None and self.token_to_id(self.bos_token) is not None:
            bos = self.token_to_id(self.bos_token)
        self.bos_token_id: Optional[int] = bos if bos >= 0 else None
        if self.bos_token is None and self.bos_token_id is not None:
            self.bos_token = self.id_to_token(self.bos_token_id)
        self.eos_token: Optional[str] = _token_content(self.config.get("eos_token"))
        eos = set()
        if self.eos_token is not None:
            i = self.token_to_id(self.eos_token)
            if i is None:
                raise EinError(EIN_EINVAL, "tokenizer_config.json: eos_token %r is not a token"
                               % self.eos_token)
            eos.add(i)
        g = (generation_config or {}).get("eos_token_id")
        for i in ([g] if isinstance(g, int) else g or []):
            if not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise EinError(EIN_EINVAL, "generation_config.json: eos_token_id %r is not a "
                               "token id" % (i,))
            eos.add(i)
        self.eos_token_ids: List[int] = sorted(eos)
        self.eos_token_id: Optional[int] = (self.token_to_id(self.eos_token)
                                            if self.eos_token is not None else
                                            (self.eos_token_ids[0] if self.eos_token_ids else None))

    @classmethod
    def from_file(cls, path: str) -> "Tokenizer":
        """Load `path`: a tokenizer.json, or a folder holding one. Its
        folder's tokenizer_config.json and generation_config.json, where
        present, give the bos/eos tokens."""
        path = os.fspath(path)
        folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        err = ein_error()
        h = _P()
        _check(_fn_("ein_tokenizer_load")(os.fsencode(path), ctypes.byref(h), ctypes.byref(err)),
               err)
        try:
            cfg = _read_json(os.path.join(folder, "tokenizer_config.json"))
            gen = _read_json(os.path.join(folder, "generation_config.json"))
            return cls(h.value, cfg, gen)
        except BaseException:
            _fn_("ein_tokenizer_free")(h)
            raise

    @classmethod
    def from_str(cls, text: str, config: Optional[Dict[str, Any]] = None) -> "Tokenizer":
        """Load the JSON text of a tokenizer.json."""
        b = text.encode("utf-8")
        err = ein_error()
        h = _P()
        _check(_fn_("ein_tokenizer_load_json")(b, len(b), ctypes.byref(h), ctypes.byref(err)), err)
        try:
            return cls(h.value, config)
        except BaseException:
            _fn_("ein_tokenizer_free")(h)
            raise

    def close(self) -> None:
        if getattr(self, "_p", None):
            _fn_("ein_tokenizer_free")(self._p)
            self._p = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _h(self):
        if not self._p:
            raise EinError(EIN_EINVAL, "tokenizer: closed")
        return self._p

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """The ids of `text`; add_special_tokens applies the
        post-processor's template (bos for Llama)."""
        if not isinstance(text, str):
            raise EinError(EIN_EINVAL, "encode: text must be a str, not %s" % type(text).__name__)
        b = text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
        err = ein_error()
        ids = _I32P()
        n = _SZ()
        _check(_fn_("ein_tokenizer_encode")(self._h(), b, len(b), int(bool(add_special_tokens)),
                                            ctypes.byref(ids), ctypes.byref(n),
                                            ctypes.byref(err)), err)
        try:
            return ids[:n.value]
        finally:
            _fn_("ein_tokenizer_buf_free")(ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; an id out of range is an EinValueError."""
        arr, n = _ids_arg(ids, self.vocab_size)
        err = ein_error()
        p = _P()
        ln = _SZ()
        _check(_fn_("ein_tokenizer_decode")(self._h(), arr, n, int(bool(skip_special_tokens)),
                                            ctypes.byref(p), ctypes.byref(ln),
                                            ctypes.byref(err)), err)
        return _take_text(p, ln)

    def stream(self, skip_special_tokens: bool = False) -> "DecodeStream":
        """A streaming decoder: .push(id) returns only complete text."""
        return DecodeStream(self, skip_special_tokens)

    def token_to_id(self, token: str) -> Optional[int]:
        b = token.encode("utf-8")
        i = _fn_("ein_tokenizer_token_to_id")(self._h(), b, len(b))
        return i if i >= 0 else None

    def id_to_token(self, id: int) -> Optional[str]:
        n = _SZ()
        p = _fn_("ein_tokenizer_id_to_token")(self._h(), int(id), ctypes.byref(n))
        return ctypes.string_at(p, n.value).decode("utf-8") if p else None

    def is_special(self, id: int) -> bool:
        return bool(_fn_("ein_tokenizer_is_special")(self._h(), int(id)))


class DecodeStream:
    """Streaming decode of one sequence: push(id) returns the text that id
    completes ("" while a character or byte sequence is still open);
    flush() returns what is held back. The pushes and the flush joined are
    tokenizer.decode(all ids)."""

    def __init__(self, tok: Tokenizer, skip_special_tokens: bool = False):
        self._tok = tok  # kept alive: the stream reads it
        err = ein_error()
        h = _P()
        _check(_fn_("ein_tokstream_new")(tok._h(), int(bool(skip_special_tokens)), ctypes.byref(h),
                                         ctypes.byref(err)), err)
        self._p = h.value

    def push(self, id: int) -> str:
        if isinstance(id, bool) or not isinstance(id, int) and not hasattr(id, "__index__"):
            raise EinError(EIN_EINVAL, "push: the id must be an int, not %r" % (id,))
        if not 0 <= int(id) < self._tok.vocab_size:
            raise EinError(EIN_EINVAL, "push: token id %d is out of range 0..%d"
                           % (int(id), self._tok.vocab_size - 1))
        err = ein_error()
        p = _P()
        n = _SZ()
        _check(_fn_("ein_tokstream_push")(self._p, int(id), ctypes.byref(p), ctypes.byref(n),
                                          ctypes.byref(err)), err)
        return _take_text(p, n)

    def flush(self) -> str:
        err = ein_error()
        p = _P()
        n = _SZ()
        _check(_fn_("ein_tokstream_flush")(self._p, ctypes.byref(p), ctypes.byref(n),
                                           ctypes.byref(err)), err)
        return _take_text(p, n)

    def __del__(self):
        try:
            if self._p:
                _fn_("ein_tokstream_free")(self._p)
                self._p = None
        except Exception:
            pass


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            d = json.load(f)
        except ValueError as e:
            raise EinError(-4, "%s: %s" % (path, e)) from None
    if not isinstance(d, dict):
        raise EinError(-4, "%s: not a JSON object" % path)
    return d
