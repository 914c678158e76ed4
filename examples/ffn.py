#!/usr/bin/env python3
"""examples/ffn.py — the paper's section 2 example, word for word: the
two-layer feed-forward network Y = ReLU(X W1) W2 built with the Python
interface, compiled for four devices, run with NumPy inputs, and checked
against NumPy.

After the README's set-up (an in-tree build):

    PYTHONPATH=python /usr/bin/python3 examples/ffn.py

or, installed (make install), with the prefix's site-packages folder on
PYTHONPATH. Without a GPU the four devices are CPU devices (one worker
process each), and the package says so on stderr. The default sizes are the
paper's divided by 8 so that it runs in seconds; --paper uses tokens 8192,
d_model 4096, d_ff 14336 (about 20 s on 2 cores).
"""
import argparse
import sys

import numpy as np

import einsummable as es


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--d-ff", type=int, default=1792)
    ap.add_argument("--paper", action="store_true", help="the paper's sizes")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--schedule", choices=["naive", "ai"], default="ai")
    ap.add_argument("--explain", action="store_true", help="print the compiled program")
    args = ap.parse_args()
    tokens, d_model, d_ff = args.tokens, args.d_model, args.d_ff
    if args.paper:
        tokens, d_model, d_ff = 8192, 4096, 14336
    dtype = np.float32

    # ---- the paper's section 2, word for word ----
    graph = es.createGraph()
    x = graph.insertTensor(es.tensorDesc([tokens, d_model], dtype))
    w1 = graph.insertTensor(es.tensorDesc([d_model, d_ff], dtype))
    w2 = graph.insertTensor(es.tensorDesc([d_ff, d_model], dtype))
    act = graph.matmul(x, w1)
    hidden = graph.unary(act, "relu", 0.0)
    y = graph.matmul(hidden, w2)
    graph.save(y)
    program = es.compileGraph(graph, device=list(range(args.devices)),
                              schedule_mode=args.schedule)
    # ----------------------------------------------

    rng = np.random.default_rng(0)
    X = rng.standard_normal((tokens, d_model), dtype=dtype)
    W1 = rng.standard_normal((d_model, d_ff), dtype=dtype) / np.sqrt(d_model)
    W2 = rng.standard_normal((d_ff, d_model), dtype=dtype) / np.sqrt(d_ff)
    with program:
        if args.explain:
            print(program.explain())
        program.load(x, X)
        program.load(w1, W1)
        program.load(w2, W2)
        program.execute()
        Y = program.offload(y)

    ref = np.maximum(X.astype(np.float64) @ W1, 0.0) @ W2
    diff = float(np.max(np.abs(Y - ref)))
    scale = float(np.max(np.abs(ref)))
    print("y: shape %s %s, max |y - numpy| = %.3g (max |y| = %.3g)"
          % (list(Y.shape), Y.dtype, diff, scale))
    return 0 if diff <= 1e-4 * scale + 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
