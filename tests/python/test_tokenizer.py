"""tests/python/test_tokenizer.py — einsummable.tokenizer (issue 37) against
an independent implementation: Hugging Face's JavaScript tokenizers
(@huggingface/tokenizers, installed by `npm ci --prefix tests/js` in
.ci/run), on tokenizers this test builds (tokgen.py) and a corpus of a few
thousand strings. Where node or the package is missing, the comparison is
skipped with a message, never failed. The rest (streaming, errors,
refusals) needs nothing but the library."""

import json
import os
import random

import pytest

import tokgen
from tokgen import _node, run_js
from einsummable import EinError
from einsummable.tokenizer import Tokenizer

# Under the sanitizers (an ASan runtime preloaded into Python) a third of the
# corpus: that run looks for memory errors, the plain one for differences.
N_TEXTS = int(os.environ.get("EIN_TOK_TEXTS") or
              (1000 if "asan" in os.environ.get("LD_PRELOAD", "") else 3000))


@pytest.fixture(scope="module")
def texts():
    specials = tokgen.LLAMA3_SPECIAL + tokgen.QWEN2_SPECIAL + ["<tool>", "<s>", "</s>", "<unk>"] + \
        tokgen.SP_SPECIAL + tokgen.SP_ADDED
    return tokgen.corpus(N_TEXTS, 37, specials)


@pytest.fixture(scope="module")
def tokenizers(texts, tmp_path_factory):
    train = texts[:400]
    d = tmp_path_factory.mktemp("tok")
    tjs = {
        "llama3": tokgen.bytelevel(train, 400, "llama3"),
        "gpt2": tokgen.bytelevel(train, 300, "gpt2"),
        "qwen2": tokgen.bytelevel(train, 300, "qwen2"),
        "llama2": tokgen.sentencepiece(train, 300, "legacy"),
        "metaspace": tokgen.sentencepiece(train, 300, "metaspace"),
        "sp_unk": tokgen.sentencepiece(train, 200, "legacy", byte_fallback=False, nfkc=True),
        "sp_unk_nofuse": tokgen.sentencepiece(train, 200, "metaspace", byte_fallback=False,
                                              fuse_unk=False),
    }
    out = {}
    for name, tj in tjs.items():
        p = d / name
        p.mkdir()
        with open(p / "tokenizer.json", "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        out[name] = (tj, Tokenizer.from_file(str(p)))
    return out


def _random_ids(tok, rng, n):
    return [[rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 16))] for _ in range(n)]


@pytest.fixture(scope="module")
def refs(texts, tokenizers, tmp_path_factory):
    """Both references' encodings of the corpus and decodings of those ids
    and of random id sequences (partial UTF-8, stray bytes, specials)."""
    _node()
    rng = random.Random(5)
    dec_in = {}
    for name, (tj, tok) in tokenizers.items():
        dec_in[name] = [tok.encode(t) for t in texts] + _random_ids(tok, rng, 600)
    out = run_js({"tokenizers": {n: tj for n, (tj, _) in tokenizers.items()}, "texts": texts,
                  "decode": dec_in}, tmp_path_factory.mktemp("js"))
    return out, dec_in


def _compare(engine, texts, tokenizers, refs):
    out, dec_in = refs
    if engine not in out["engines"]:
        pytest.skip("%s reference not installed: %s" % (engine, out.get(engine + "_error", "")))
    diffs = []
    ntok = 0
    for name, (tj, tok) in tokenizers.items():
        r = out[engine][name]
        for i, t in enumerate(texts):
            mine = tok.encode(t)
            ntok += len(mine)
            if mine != r["enc"][i]:
                diffs.append((t, "%s encode %r: ours %s, %s %s" % (name, t, mine, engine,
                                                                   r["enc"][i])))
            mine = tok.encode(t, add_special_tokens=False)
            if mine != r["enc_plain"][i]:
                diffs.append((t, "%s encode(plain) %r: ours %s, %s %s" % (
                    name, t, mine, engine, r["enc_plain"][i])))
        for i, ids in enumerate(dec_in[name]):
            for skip, key in ((False, "dec"), (True, "dec_skip")):
                mine = tok.decode(ids, skip_special_tokens=skip)
                if mine != r[key][i]:
                    diffs.append((None, "%s decode%s %s: ours %r, %s %r" % (
                        name, "(skip)" if skip else "", ids, mine, engine, r[key][i])))
    print("tokenizer vs %s: %d tokenizers, %d texts, %d tokens, %d id sequences decoded, "
          "%d differences" % (engine, len(tokenizers), len(texts), ntok,
                              sum(len(v) for v in dec_in.values()), len(diffs)))
    return diffs


def test_against_rust(texts, tokenizers, refs):
    """0 differences from Hugging Face's Rust tokenizers crate: encode with
    and without the template over the corpus; decode with and without
    special tokens."""
    diffs = _compare("rust", texts, tokenizers, refs)
    assert not diffs, "%d differences, the first:\n%s" % (
        len(diffs), "\n".join(d for _, d in diffs[:8]))


def test_against_js(texts, tokenizers, refs):
    """tokenizers.js, the JavaScript port, departs from the Rust crate in
    places (its regex \\s takes U+FEFF and not U+0085; ByteFallback gives
    one U+FFFD per maximal subpart, the crate one per byte; its Metaspace
    decoder keeps a first token's inner spaces and sees skipped special
    tokens): every difference from it must be one where it also differs
    from the Rust crate, i.e. where we agree with the crate."""
    out, dec_in = refs
    if "rust" not in out["engines"]:
        pytest.skip("without the Rust reference, tokenizers.js's own departures cannot be told "
                    "from ours")
    diffs = _compare("js", texts, tokenizers, refs)
    ours_only = []
    for name, (tj, tok) in tokenizers.items():
        r, q = out["js"][name], out["rust"][name]
        for i, t in enumerate(texts):
            for key, add in (("enc", True), ("enc_plain", False)):
                if r[key][i] != tok.encode(t, add) and r[key][i] == q[key][i]:
                    ours_only.append("%s %s %r" % (name, key, t))
        for i, ids in enumerate(dec_in[name]):
            for key, skip in (("dec", False), ("dec_skip", True)):
                if r[key][i] != tok.decode(ids, skip) and r[key][i] == q[key][i]:
                    ours_only.append("%s %s %s" % (name, key, ids))
    print("differences from tokenizers.js: %d, all where it also differs from the Rust crate: %s"
          % (len(diffs), not ours_only))
    assert not ours_only, "%d differences from tokenizers.js that the Rust crate does not " \
        "have:\n%s" % (len(ours_only), "\n".join(ours_only[:8]))


def test_roundtrip(texts, tokenizers):
    """Byte-level and byte-fallback tokenizers lose nothing: decode(encode(t))
    is t (the SentencePiece ones drop nothing but the one leading space
    their decoder strips; texts with added tokens are left out: "<tool>"
    takes the spaces around it, "<mark>" is matched after normalization
    with the "▁" before it, and specials decode as their content)."""
    for name in ("llama3", "gpt2", "llama2", "metaspace"):
        tok = tokenizers[name][1]
        for t in texts:
            back = tok.decode(tok.encode(t, add_special_tokens=False))
            if name == "gpt2" or (name == "llama3" and "<tool>" not in t):
                assert back == t, (name, t, back)
            elif name in ("llama2", "metaspace") and not t.startswith(" ") and not any(
                    s in t for s in ("<s>", "</s>", "<unk>", "[INST]", "[/INST]", "<mark>")):
                assert back == t, (name, t, back)


def test_stream(texts, tokenizers):
    """push() returns whole characters only and the pieces join to decode()."""
    rng = random.Random(9)
    for name, (_, tok) in tokenizers.items():
        seqs = [tok.encode(t) for t in texts[:800]] + _random_ids(tok, rng, 300)
        for skip in (False, True):
            for ids in seqs:
                s = tok.stream(skip_special_tokens=skip)
                parts = [s.push(i) for i in ids]
                parts.append(s.flush())
                assert "".join(parts) == tok.decode(ids, skip_special_tokens=skip), (name, ids)


def test_stream_holds_partial_chars(tokenizers):
    tok = tokenizers["llama3"][1]
    b2u = tokgen.bytes_to_unicode()
    ids = [tok.token_to_id(b2u[b]) for b in "€😀".encode("utf-8")]
    s = tok.stream()
    got = [s.push(i) for i in ids]
    assert got == ["", "", "€", "", "", "", "😀"]
    assert s.flush() == ""
    s = tok.stream()
    assert s.push(ids[0]) == "" and s.push(ids[1]) == ""
    assert s.flush() == "\ufffd"  # E2 82 with nothing after: one U+FFFD (maximal subpart)
    sp = tokenizers["llama2"][1]
    s = sp.stream()
    # a run of byte tokens is held whole until the run ends (an invalid byte
    # anywhere in it turns the whole run into U+FFFDs)
    got = [s.push(sp.token_to_id("<0x%02X>" % b)) for b in "😀".encode("utf-8")]
    assert got == ["", "", "", ""]
    assert s.flush() == "😀"
    s = sp.stream()
    got = [s.push(sp.token_to_id("<0x%02X>" % b)) for b in b"A\xe2"]
    assert got == ["", ""] and s.flush() == "\ufffd\ufffd" == sp.decode(
        [sp.token_to_id("<0x41>"), sp.token_to_id("<0xE2>")])


def test_special_tokens_and_ids(tokenizers):
    tok = tokenizers["llama3"][1]
    bot = tok.token_to_id("<|begin_of_text|>")
    assert tok.bos_token_id == bot and bot is not None
    ids = tok.encode("hi<|eot_id|>")
    assert ids[0] == bot and ids[-1] == tok.token_to_id("<|eot_id|>")
    assert tok.encode("hi", add_special_tokens=False) == ids[1:-1]
    assert tok.decode(ids, skip_special_tokens=True) == "hi"
    assert tok.decode(ids) == "<|begin_of_text|>hi<|eot_id|>"
    assert tok.is_special(bot) and tok.id_to_token(bot) == "<|begin_of_text|>"
    # lstrip/rstrip: "<tool>" takes the spaces around it
    tool = tok.token_to_id("<tool>")
    assert tok.encode("a  <tool>  b", False) == tok.encode("a", False) + [tool] + \
        tok.encode("b", False)
    assert tok.vocab_size == max(tokenizers["llama3"][0]["model"]["vocab"].values()) + 7
    sp = tokenizers["llama2"][1]
    assert sp.bos_token_id == 1 and sp.encode("")[0] == 1 and sp.encode("") == [1]
    assert sp.encode("", add_special_tokens=False) == []


def test_config_files(tokenizers, tmp_path):
    tj = tokenizers["llama3"][0]
    with open(tmp_path / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tj, f)
    with open(tmp_path / "tokenizer_config.json", "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>",
                   "eos_token": {"content": "<|eot_id|>", "lstrip": False}}, f)
    with open(tmp_path / "generation_config.json", "w") as f:
        json.dump({"eos_token_id": [tokenizers["llama3"][1].token_to_id("<|end_of_text|>")]}, f)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.eos_token == "<|eot_id|>"
    assert tok.eos_token_ids == sorted([tok.token_to_id("<|eot_id|>"),
                                        tok.token_to_id("<|end_of_text|>")])
    assert tok.eos_token_id == tok.token_to_id("<|eot_id|>")


def test_bad_ids(tokenizers):
    tok = tokenizers["llama3"][1]
    for bad in ([tok.vocab_size], [-1], [0, 2 ** 40]):
        with pytest.raises(EinError, match="out of range"):
            tok.decode(bad)
    with pytest.raises(EinError, match="out of range"):
        tok.stream().push(tok.vocab_size)
    with pytest.raises(EinError):
        tok.decode(["a"])


def _write(tmp_path, obj, name="tokenizer.json"):
    p = tmp_path / name
    with open(p, "w", encoding="utf-8") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
    return str(p)


def test_refusals(tokenizers, tmp_path):
    """What is not implemented is refused by name; malformed files are
    parse errors that say where."""
    base = tokenizers["llama2"][0]

    def variant(**kw):
        d = json.loads(json.dumps(base))
        for k, v in kw.items():
            if k.startswith("model_"):
                d["model"][k[6:]] = v
            else:
                d[k] = v
        return d

    cases = [
        (variant(normalizer={"type": "Lowercase"}), "normalizer \"Lowercase\" is not supported"),
        (variant(normalizer={"type": "NFKC", "x": 1}), "NFKC: field \"x\""),
        (variant(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer \"Whitespace\""),
        (variant(decoder={"type": "WordPiece", "prefix": "##", "cleanup": True}),
         "decoder \"WordPiece\""),
        (variant(post_processor={"type": "BertProcessing", "sep": ["[SEP]", 1],
                                 "cls": ["[CLS]", 0]}), "post_processor \"BertProcessing\""),
        (variant(model={"type": "WordPiece", "vocab": {}, "unk_token": "[UNK]"}),
         "model \"WordPiece\" is not supported"),
        (variant(model={"type": "Unigram", "vocab": []}), "model \"Unigram\""),
        (variant(model_dropout=0.1), "dropout is not supported"),
        (variant(model_continuing_subword_prefix="##"), "continuing_subword_prefix"),
        (variant(truncation={"max_length": 5}), "truncation is not supported"),
        (variant(extra=1), "field \"extra\" is not supported"),
        (variant(model_merges=["▁ nope"]), "not in the vocabulary"),
        (variant(model_merges=["a b c"]), "merges[0]"),
        (variant(model_unk_token="<nope>"), "unk_token"),
        (variant(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(unclosed"},
                                "behavior": "Isolated", "invert": False}), "regex rejected"),
        (variant(pre_tokenizer={"type": "Split", "pattern": {"Regex": "a"},
                                "behavior": "Sideways", "invert": False}), "behavior \"Sideways\""),
        (variant(added_tokens=[{"id": 0, "content": "<unk>", "single_word": True,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True}]), "single_word is not supported"),
        (variant(added_tokens=[{"id": 5, "content": "<s>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True}]), "has id 5 but the vocabulary gives it 1"),
        ("{\"model\": ", "line 1"),
        ("[1, 2]", "not a JSON object"),
    ]
    for obj, msg in cases:
        p = _write(tmp_path, obj)
        with pytest.raises(EinError) as e:
            Tokenizer.from_file(p)
        assert msg in str(e.value), (msg, str(e.value))
    with pytest.raises(EinError, match="cannot open"):
        Tokenizer.from_file(str(tmp_path / "missing.json"))


def test_encode_type_errors(tokenizers):
    tok = tokenizers["gpt2"][1]
    with pytest.raises(EinError):
        tok.encode(b"bytes")
    with pytest.raises(UnicodeEncodeError):
        tok.encode("\ud800")


def test_threads(texts, tokenizers):
    """One tokenizer used by several threads at once gives the same ids."""
    import threading
    tok = tokenizers["llama3"][1]
    want = [tok.encode(t) for t in texts[:300]]
    bad = []

    def work():
        for t, w in zip(texts[:300], want):
            if tok.encode(t) != w:
                bad.append(t)
    th = [threading.Thread(target=work) for _ in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert not bad
