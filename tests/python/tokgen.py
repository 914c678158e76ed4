"""tests/python/tokgen.py — tokenizer.json files and a text corpus for
test_tokenizer.py, made here (nothing downloaded): small BPE vocabularies
trained on the corpus in the layouts of real checkpoints (Llama 3 and GPT-2
byte-level BPE; Llama 2 / Mistral SentencePiece-style BPE with byte
fallback, in the legacy Prepend+Replace and the Metaspace forms)."""

import collections
import json
import os
import random
import re
import shutil
import subprocess

import pytest

SRC = os.environ.get("EIN_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
# tests/js: the references (npm ci --prefix tests/js) and tok_ref.mjs.
JS_DIR = os.environ.get("EIN_JS_DIR") or os.path.join(SRC, "tests", "js")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>"]
SP_SPECIAL = ["[INST]", "[/INST]"]
SP_ADDED = ["<mark>", " <mark>"]

_WORDS = ("the of and to in is was for on that with as by at from it an be this are or "
          "have not but what all were when we there can your which their said if do will "
          "each about how up out them then she many some so these would other into has "
          "more her two like him see time could no make than first been its who now people "
          "don't it's I'll we've you're they'd HELLO World Tokenizer tokenization GPU's "
          "résumé naïve café Zürich Ångström façade jalapeño coöperate").split()
_SCRIPTS = [
    "Привет мир как дела сегодня", "Γειά σου κόσμε καλημέρα", "مرحبا بالعالم كيف حالك",
    "नमस्ते दुनिया आप कैसे हैं", "你好世界今天天气很好我们去公园吧", "日本語のテキストとカタカナ",
    "こんにちは、世界！", "안녕하세요 세계 여러분", "שלום עולם", "สวัสดีชาวโลก",
    "Tiếng Việt có dấu", "ქართული ენა", "Ελληνικά και English μαζί",
]
_EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🤖", "🧑🏿‍💻", "✨", "🙈🙉🙊", "🐍", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
          "😀😀😀"]
_ODD = ["\u00a0", "\u0085", "\u3000", "\ufeff", "\u200b", "\u2028", "e\u0301", "\u202f",
        "\t", "\r\n", "\v", "\f", "\u1680", "ﬁ", "Ⅻ", "½", "²", "٣", "𝟘", "\x00", "\x7f",
        "\u0300", "\U0010fffd", "\ue000", "\u212b", "n\u0303", "\u1100\u1161", "\u00c5\u0301",
        "\uff21\uff22", "\u2460", "\u3231"]
_PUNCT = list(".,;:!?-—–()[]{}<>\"'`~@#$%^&*_+=/\\|…«»“”‘’") + ["...", "!!", "?!", "--", "''",
                                                               "->", "=>", "::", "//"]


def corpus(n, seed, specials=()):
    """n strings: words, mixed scripts, emoji, whitespace runs, newlines,
    digits, punctuation, odd code points, and `specials` inside the text."""
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", "\n\n\n", "a", "Hello world", " Hello world", "Hello  world ",
           "1234567890", "3.14159", "it's I'm we'll they've you'd SHE'S", "\t\tindented\n",
           "x" * 300, " " * 40 + "end", "ab" * 50, "😀" * 7]
    out += [s + t for s in specials for t in ("", "x", " x", "\n")]
    out += [t + s for s in specials for t in ("x", "x ", " ", "\n")]
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.35:
                w = rng.choice(_WORDS)
                if rng.random() < 0.2:
                    w = w.upper() if rng.random() < 0.5 else w.capitalize()
                parts.append(w)
            elif r < 0.5:
                s = rng.choice(_SCRIPTS)
                i = rng.randrange(len(s))
                parts.append(s[i:i + rng.randint(1, 12)])
            elif r < 0.58:
                parts.append(rng.choice(_EMOJI))
            elif r < 0.66:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
            elif r < 0.74:
                parts.append(rng.choice(_PUNCT))
            elif r < 0.82:
                parts.append(rng.choice([" ", "  ", "   ", "\n", "\n\n", " \n", "\t", "\r\n",
                                         "    \n  ", " " * rng.randint(2, 9)]))
            elif r < 0.88:
                parts.append(rng.choice(_ODD))
            elif r < 0.94 and specials:
                parts.append(rng.choice(specials))
            else:
                parts.append(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                             rng.randint(0x3000, 0x9fff),
                                             rng.randint(0xac00, 0xd7a3),
                                             rng.randint(0x1f300, 0x1faff)])))
        sep = rng.choice(["", " ", " ", " ", "\n"])
        out.append(sep.join(parts) if rng.random() < 0.8 else "".join(parts))
    return out[:n]


def _add(added, vocab, content, special, normalized=False, lstrip=False, rstrip=False):
    """An added token: the vocabulary's id where the content is in it (as the
    crate assigns it), else the next free id."""
    used = set(vocab.values()) | {a["id"] for a in added}
    tid = vocab.get(content)
    if tid is None:
        tid = max(used) + 1
    added.append({"id": tid, "content": content, "single_word": False, "lstrip": lstrip,
                  "rstrip": rstrip, "normalized": normalized, "special": special})


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) +
          list(range(0xAE, 0xFF + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _train(words, alphabet, n_merges):
    """Plain BPE training: words (tuples of symbols) with counts; returns
    the merges in order."""
    words = {tuple(s for s in w): c for w, c in words.items()}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += c
        if not pairs:
            break
        (a, b), cnt = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        merges.append((a, b))
        nw = {}
        for w, c in words.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


def _pieces(texts):
    ws = collections.Counter()
    for t in texts:
        for w in re.findall(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+", t):
            ws[w] += 1
    return ws


def bytelevel(texts, n_merges, style):
    """A byte-level BPE: style "llama3" (Split regex + ByteLevel without
    regex, ignore_merges, bos template, merges as pairs, special tokens) or
    "gpt2" (ByteLevel with its own regex, merges as "a b" strings)."""
    b2u = bytes_to_unicode()
    words = collections.Counter()
    for w, c in _pieces(texts).items():
        words[tuple(b2u[b] for b in w.encode("utf-8"))] += c
    merges = _train(words, None, n_merges)
    vocab = {}
    for b in range(256):
        vocab.setdefault(b2u[b], len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    model = {"type": "BPE", "dropout": None, "unk_token": None,
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
             "byte_fallback": False, "ignore_merges": style == "llama3", "vocab": vocab}
    added = []
    norm = None
    if style == "qwen2":  # NFC, Qwen2's regex (one digit a piece), no bos template
        model["merges"] = ["%s %s" % (a, b) for a, b in merges]
        for s in QWEN2_SPECIAL:
            _add(added, vocab, s, True)
        norm = {"type": "NFC"}
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_RE}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]}
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                "use_regex": False}
    elif style == "llama3":
        model["merges"] = [[a, b] for a, b in merges]
        for s in LLAMA3_SPECIAL:
            _add(added, vocab, s, True)
        # a non-special added token that eats the spaces around it
        _add(added, vocab, "<tool>", False, lstrip=True, rstrip=True)
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
        bos = LLAMA3_SPECIAL[0]
        post = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [added[0]["id"]], "tokens": [bos]}}}]}
    else:
        model["merges"] = ["%s %s" % (a, b) for a, b in merges]
        _add(added, vocab, "<|endoftext|>", True)
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}
        post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": norm, "pre_tokenizer": pre, "post_processor": post,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": model}


def sentencepiece(texts, n_merges, style, byte_fallback=True, fuse_unk=True, min_count=4,
                  nfkc=False):
    """A SentencePiece-style BPE over characters ("▁" for spaces): style
    "legacy" (Llama 2: Prepend + Replace normalizers, Replace/ByteFallback/
    Fuse/Strip decoders, merges as "a b") or "metaspace" (Metaspace
    pre-tokenizer and decoder, prepend_scheme first, merges as pairs).
    Characters seen fewer than min_count times are left to byte fallback
    (or <unk> when byte_fallback is off)."""
    chars = collections.Counter()
    words = collections.Counter()
    for t in texts:
        t = "▁" + t.replace(" ", "▁")
        chars.update(t)
        for w in re.findall(r"▁*[^▁]+|▁+", t):
            words[tuple(w)] += 1
    # NUL is left to byte fallback: JSON object keys cannot hold it in jansson
    # (a vocabulary key "\u0000" is refused as a parse error)
    alphabet = sorted(c for c, k in chars.items() if k >= min_count and c != "\x00")
    aset = set(alphabet)
    words = collections.Counter({w: c for w, c in words.items() if all(ch in aset for ch in w)})
    merges = _train(words, alphabet, n_merges)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
    for c in alphabet:
        vocab.setdefault(c, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(["<unk>", "<s>", "</s>"])]
    for s in SP_SPECIAL:
        _add(added, vocab, s, True)
    # an added token matched in the normalized text (normalized: true)
    _add(added, vocab, "<mark>", False, normalized=True)
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None,
             "fuse_unk": fuse_unk, "byte_fallback": byte_fallback, "vocab": vocab}
    post = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    if style == "legacy":
        model["merges"] = ["%s %s" % (a, b) for a, b in merges]
        norm = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        if nfkc:
            norm["normalizers"].insert(0, {"type": "NFKC"})
        pre = None
        dec = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        model["merges"] = [[a, b] for a, b in merges]
        norm = None
        pre = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
               "split": False}
        dec = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
             "split": False}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": norm, "pre_tokenizer": pre, "post_processor": post, "decoder": dec,
            "model": model}


def _node():
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed (Debian: nodejs): no reference implementation")
    if not os.path.isdir(os.path.join(JS_DIR, "node_modules")):
        pytest.skip("the references are not installed in %s/node_modules (npm ci --prefix "
                    "tests/js, as .ci/run does)" % JS_DIR)
    return node


def run_js(payload, tmp_path):
    """tests/js/tok_ref.mjs on `payload`; its JSON answer."""
    node = _node()
    inp, outp = tmp_path / "in.json", tmp_path / "out.json"
    with open(inp, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False)
    # Without the ASan runtime a sanitizer run preloads into Python (tests/
    # e2e/lib.sh): node and the references are not ours, and run twice as
    # slowly under its interceptors.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([node, os.path.join(JS_DIR, "tok_ref.mjs"), str(inp), str(outp)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(outp, encoding="utf-8") as f:
        return json.load(f)
