#!/usr/bin/env python3
"""tools/bench-serve.py — continuous batching (issue 37) on the random
134M LLaMA of tools/bench-generate.py: aggregate decode tokens per second
of 8 concurrent streams against one stream, and the time to first token of
a 128-token prompt while 7 others decode. Never run by make check (it
writes a ~440 MB checkpoint and takes minutes).

    PYTHONPATH=python EIN_BUILDDIR=$PWD /usr/bin/python3 tools/bench-serve.py \\
        [--devices 2] [--slots 8] [--new 48] [--chunk 16] [--rounds 2]

Through es.engine directly (the server adds its HTTP and JSON on top).
Decode tokens per second: the new tokens after each stream's first,
divided by the time from the last stream's first token to the last one's
end (every stream decoding), best round of --rounds. One stream runs on
the same 8-slot program (the other slots idle), and on a 1-slot program
for comparison. TTFT: 7 streams decoding (greedy, no end), then a
128-token prompt submitted; the time until its first token (prefill chunks
alternate with the 7 streams' decode steps), against the same prompt
alone."""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import hf_model  # noqa: E402  (its safetensors writer)


def checkpoint(d, dm=768, L=12, V=32000, FF=2048, H=12, ctx=512):
    rng = np.random.default_rng(1)
    cfg = {"hidden_size": dm, "intermediate_size": FF, "num_attention_heads": H,
           "num_key_value_heads": H, "head_dim": dm // H, "num_hidden_layers": L,
           "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "max_position_embeddings": ctx}
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f)
    t = hf_model.random_llama(rng, dm, L, V, FF, H)
    hf_model.write(d + "/model.safetensors", t)
    return V


def decode_rate(eng, prompts, new, SP):
    rs = [eng.submit(p, SP(max_tokens=new, ignore_eos=True)) for p in prompts]
    for r in rs:
        r.wait(3600)
    start = max(r.first_token_at for r in rs)
    end = max(r.finished_at for r in rs)
    # tokens produced after `start` (each stream's tokens past its first)
    toks = sum(len(r.token_ids) - 1 for r in rs)
    return toks / (end - min(r.first_token_at for r in rs)), toks, end - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import einsummable as es
    from einsummable import engine as E
    d = tempfile.mkdtemp(prefix="bench-serve-")
    V = checkpoint(d)
    rng = np.random.default_rng(2)
    prompt = lambda n: list(map(int, rng.integers(0, V, size=n)))
    files, cfg = [d + "/model.safetensors"], d + "/config.json"
    dev = list(range(a.devices))
    print("load %.1f %.1f %.1f at the start" % os.getloadavg())
    t0 = time.time()
    one = E.Engine(es.llama.load(files, cfg, device=dev, max_len=256 + a.chunk,
                                 prefill_chunk=a.chunk), slots=1)
    print("compiled 1 slot in %.1f s" % (time.time() - t0))
    t0 = time.time()
    eng = E.Engine(es.llama.load(files, cfg, device=dev, max_len=256 + a.chunk,
                                 prefill_chunk=a.chunk), slots=a.slots)
    print("compiled %d slots in %.1f s" % (a.slots, time.time() - t0))
    SP = E.SamplingParams
    best = {}
    for rnd in range(a.rounds):
        for name, e, n in [("1 stream, 1-slot program", one, 1),
                           ("1 stream, %d-slot program" % a.slots, eng, 1),
                           ("%d streams" % a.slots, eng, a.slots)]:
            rate, toks, secs = decode_rate(e, [prompt(8) for _ in range(n)], a.new, SP)
            print("round %d: %-26s %6.1f decode tokens/s (%d tokens)" % (rnd, name, rate, toks))
            best[name] = max(best.get(name, 0), rate)
    agg = best["%d streams" % a.slots]
    print("best: %s" % ", ".join("%s %.1f tokens/s" % kv for kv in best.items()))
    print("aggregate %d streams / 1 stream: %.2fx (1-slot program), %.2fx (same program)"
          % (a.slots, agg / best["1 stream, 1-slot program"],
             agg / best["1 stream, %d-slot program" % a.slots]))
    # TTFT of a 128-token prompt, alone and while 7 others decode
    for rnd in range(a.rounds):
        p = prompt(128)
        r = eng.submit(p, SP(max_tokens=1)).wait(3600)
        alone = r.first_token_at - r.submitted
        bg = [eng.submit(prompt(8), SP(max_tokens=200, ignore_eos=True))
              for _ in range(a.slots - 1)]
        while any(not b.token_ids for b in bg):
            time.sleep(0.001)
        steps0 = eng.stats["decode_steps"]
        r = eng.submit(p, SP(max_tokens=1)).wait(3600)
        busy = r.first_token_at - r.submitted
        during = eng.stats["decode_steps"] - steps0
        for b in bg:
            b.cancel()
        for b in bg:
            b.wait(3600)
        print("round %d: TTFT of a 128-token prompt: %.3f s alone, %.3f s while %d others "
              "decode (%d decode steps of theirs meanwhile)"
              % (rnd, alone, busy, a.slots - 1, during))
    print("load %.1f %.1f %.1f at the end" % os.getloadavg())
    one.close()
    eng.close()


if __name__ == "__main__":
    main()
