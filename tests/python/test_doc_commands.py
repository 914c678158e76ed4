"""tests/python/test_doc_commands.py — the commands of README.md and
docs/*.md run as written.

A code block is runnable when the line just before it (blank lines
between allowed) is the marker

    <!-- runnable -->            or    <!-- runnable: FIXTURE -->

Each such block (an indented block, or a fenced one; ```python blocks run
with Python, every other block with `sh -e`) runs exactly as the page shows
it, in a fresh temporary directory that holds the built programs (einrun,
einworker, einplan, eingen, exprog, einnode, also on PATH) and links to the
source tree's examples/, python/ and tools/, on CPU devices, and must exit
0. FIXTURE names files the block expects the reader to have, written first
(FIXTURES below: e.g. a tiny random LLaMA checkpoint in the Hugging Face
layout for docs/hf-llama.md). A page must keep its markers: the test fails
when fewer blocks than expected are marked."""

import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("EIN_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("EIN_BUILDDIR") or SRC
PAGES = ["README.md"] + sorted("docs/" + p for p in os.listdir(os.path.join(SRC, "docs"))
                               if p.endswith(".md"))
PROGRAMS = ["einrun", "einworker", "einplan", "eingen", "exprog", "einnode"]
MARKER = re.compile(r"^<!-- runnable(?:: *([a-z0-9-]+))? -->$")
MIN_BLOCKS = 5  # the markers below (README, docs/simulator.md, docs/hf-llama.md)


def blocks_of(page):
    """(line, language, text, fixture) of every marked block of `page`."""
    with open(os.path.join(SRC, page)) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i].strip())
        i += 1
        if not m:
            continue
        while i < len(lines) and not lines[i].strip():
            i += 1
        start = i + 1
        if i < len(lines) and lines[i].startswith("```"):
            lang = lines[i][3:].strip() or "sh"
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
        else:
            lang = "sh"
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
        assert body, "%s:%d: a runnable marker without a code block after it" % (page, start)
        out.append((start, lang, "\n".join(body) + "\n", m.group(1)))
    return out


def write_safetensors(path, tensors):
    header, data, off = {}, b"", 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        data += a.tobytes()
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def hf_tiny(d):
    """config.json, model.safetensors and ids.npy of docs/hf-llama.md: a
    random one-layer LLaMA in the transformers layout, 1024 token ids."""
    hidden, inter, heads, kv, vocab = 32, 64, 4, 2, 64
    hd = hidden // heads
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": hidden, "intermediate_size": inter,
           "num_attention_heads": heads, "num_key_value_heads": kv,
           "num_hidden_layers": 1, "vocab_size": vocab, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "float32", "hidden_act": "silu",
           "max_position_embeddings": 2048}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(34)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.1

    p = "model.layers.0."
    write_safetensors(os.path.join(d, "model.safetensors"), {
        "model.embed_tokens.weight": w(vocab, hidden),
        p + "input_layernorm.weight": 1 + w(hidden),
        p + "self_attn.q_proj.weight": w(heads * hd, hidden),
        p + "self_attn.k_proj.weight": w(kv * hd, hidden),
        p + "self_attn.v_proj.weight": w(kv * hd, hidden),
        p + "self_attn.o_proj.weight": w(hidden, heads * hd),
        p + "post_attention_layernorm.weight": 1 + w(hidden),
        p + "mlp.gate_proj.weight": w(inter, hidden),
        p + "mlp.up_proj.weight": w(inter, hidden),
        p + "mlp.down_proj.weight": w(hidden, inter),
        "model.norm.weight": 1 + w(hidden),
        "lm_head.weight": w(vocab, hidden),
    })
    np.save(os.path.join(d, "ids.npy"), rng.integers(0, vocab, 1024).astype(np.int32))


FIXTURES = {"hf-tiny": hf_tiny}

ALL = [(page,) + b for page in PAGES for b in blocks_of(page)]


def test_blocks_are_marked():
    assert len(ALL) >= MIN_BLOCKS, "only %d runnable blocks: %s" % (
        len(ALL), [(p, line) for p, line, _, _, _ in ALL])
    for page, line, _, _, fixture in ALL:
        assert fixture is None or fixture in FIXTURES, "%s:%d: unknown fixture %s" % (
            page, line, fixture)


@pytest.mark.parametrize("page,line,lang,text,fixture", ALL,
                         ids=["%s:%d" % (b[0].replace("/", "-"), b[1]) for b in ALL])
def test_block_runs(page, line, lang, text, fixture, tmp_path):
    if not os.path.exists(os.path.join(BUILD, "einrun")):
        pytest.skip("no einrun in %s (the package installed alone)" % BUILD)
    d = str(tmp_path)
    for p in PROGRAMS:
        if os.path.exists(os.path.join(BUILD, p)):
            os.symlink(os.path.join(BUILD, p), os.path.join(d, p))
    for sub in ["examples", "python", "tools"]:
        os.symlink(os.path.join(SRC, sub), os.path.join(d, sub))
    if fixture:
        FIXTURES[fixture](d)
    env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""),
               EINWORKER=os.path.join(BUILD, "einworker"))
    if lang == "python":
        script = os.path.join(d, "block.py")
        with open(script, "w") as f:
            f.write(text)
        cmd = [sys.executable, script]
    else:
        cmd = ["sh", "-e", "-c", text]
    r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "%s:%d exits %d:\n%s\n%s\n%s" % (
        page, line, r.returncode, text, r.stdout[-3000:], r.stderr[-3000:])
