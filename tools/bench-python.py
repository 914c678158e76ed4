#!/usr/bin/env python3
"""tools/bench-python.py — per-run cost of the Python package's session
(load + execute + offload of an already compiled, tiny graph) against a
whole `einrun` process for the same graph, on 1 and 4 CPU devices.
Prints numbers; asserts nothing. Run from a build tree:

    PYTHONPATH=python /usr/bin/python3 tools/bench-python.py [RUNS]
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import einsummable as es


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    einrun = os.path.join(os.environ.get("EIN_BUILDDIR", "."), "einrun")
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([8, 8]), name="a")
    y = g.unary(a, "relu", name="y")
    g.save(y)
    A = np.ones((8, 8), np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ein = os.path.join(tmp, "tiny.ein")
        with open(ein, "w") as f:
            f.write("input a[8, 8]\ny = relu(a)\nsave y\n")
        for ndev in (1, 4):
            with es.compileGraph(g, device=list(range(ndev))) as p:
                p.load(a, A)
                p.execute()                      # workers started, warm
                ts = []
                for i in range(runs):
                    t0 = time.perf_counter()
                    p.load(a, A * i)
                    p.execute()
                    p.offload(y)
                    ts.append(time.perf_counter() - t0)
            ts.sort()
            sess = ts[len(ts) // 2]
            es_ = []
            for _ in range(5):
                t0 = time.perf_counter()
                subprocess.run([einrun, "--cpu", str(ndev), "--output",
                                "y=" + os.path.join(tmp, "y.npy"), ein],
                               check=True, capture_output=True)
                es_.append(time.perf_counter() - t0)
            es_.sort()
            proc = es_[len(es_) // 2]
            print("%d device(s): session load+execute+offload median %.3f ms (min %.3f) over %d; "
                  "einrun process median %.1f ms over 5; ratio %.0fx"
                  % (ndev, 1e3 * sess, 1e3 * ts[0], runs, 1e3 * proc, proc / sess))
    return 0


if __name__ == "__main__":
    sys.exit(main())
