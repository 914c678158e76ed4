#!/usr/bin/python3
"""tests/e2e/diffcheck.py — a differential test of einrun against an
independent NumPy interpreter of .ein (issue 22).

It writes random .ein programs (elementwise chains with broadcasting,
matmul chains and projections sharing an input, einsums, softmax, norms,
reductions, concat and slice, unused operators, saved inputs, the same
expression saved twice, inputs declared between operators), computes every
saved tensor with NumPy in float64 from the definitions in
docs/ein-language.md (never from einrun's output), runs einrun on the same
inputs under one of the options that change the plan or the lowering
(--rewrite, --objective, --selector, --exchange-chunks, --topology,
--schedule, P = 1..8) and compares every saved tensor. Prints TAP.

  diffcheck.py EINRUN DIR [--runs N] [--seed S] [--keep]

The programs and options are a pure function of the seed, so a failure is
reproduced by the same command; the failing program, its inputs and the
einrun command are printed (and left in DIR with --keep).
"""
import math
import os
import subprocess
import sys

import numpy as np

UNARY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))),
    "exp": np.exp,
    "neg": lambda x: -x,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "square": lambda x: x * x,
    "gelu_exact": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
}
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
}


class Gen:
    """One random program, built with its NumPy values as it grows."""

    def __init__(self, rng):
        self.rng = rng
        self.lines = []
        self.val = {}       # name -> float64 array
        self.inputs = []    # names of inputs, in declaration order
        self.ops = []       # names of operator results
        self.n = 0

    def fresh(self, base):
        self.n += 1
        return "%s%d" % (base, self.n)

    def size(self):
        return int(self.rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]))

    def input(self, shape):
        name = self.fresh("in")
        self.lines.append("input %s[%s]" % (name, ", ".join(str(s) for s in shape)))
        self.val[name] = self.rng.uniform(-1.0, 1.0, size=shape).astype(np.float32).astype(np.float64)
        self.inputs.append(name)
        return name

    def op(self, text, value):
        """Defines a result unless its values leave a comfortable range
        (then returns None and the caller tries something else)."""
        if not np.all(np.isfinite(value)) or np.max(np.abs(value)) > 50.0:
            return None
        name = self.fresh("t")
        self.lines.append("%s = %s" % (name, text))
        self.val[name] = value
        self.ops.append(name)
        return name

    def pick(self, rank=None):
        names = [n for n in self.val if rank is None or self.val[n].ndim == rank]
        if not names:
            return None
        return names[int(self.rng.integers(len(names)))]

    def step(self):
        r = self.rng
        kind = r.choice(["unary", "unary", "binary", "bcast", "scale", "div", "matmul",
                         "chain", "shared", "einsum_t", "einsum_b", "softmax", "rmsnorm",
                         "layernorm", "reduce", "concat", "slice", "input"])
        if kind == "input":
            rank = int(r.integers(1, 4))
            return self.input([self.size() for _ in range(rank)])
        x = self.pick()
        xv = self.val[x]
        if kind == "unary":
            f = str(r.choice(sorted(UNARY)))
            return self.op("%s(%s)" % (f, x), UNARY[f](xv))
        if kind == "scale":
            c = float(r.choice([0.5, -2.0, 0.125, 3.0]))
            if r.integers(2):
                return self.op("scale(%s, %g)" % (x, c), xv * c)
            return self.op("addc(%s, %g)" % (x, c), xv + c)
        if kind == "binary":
            same = [n for n in self.val if self.val[n].shape == xv.shape]
            y = same[int(r.integers(len(same)))]
            f = str(r.choice(sorted(BINARY)))
            return self.op("%s(%s, %s)" % (f, x, y), BINARY[f](xv, self.val[y]))
        if kind == "bcast":  # a suffix of x's shape, or a 1 in it
            shape = list(xv.shape[int(r.integers(xv.ndim)):])
            if r.integers(2):
                shape[int(r.integers(len(shape)))] = 1
            y = self.input(shape)
            f = str(r.choice(sorted(BINARY)))
            if r.integers(2):
                return self.op("%s(%s, %s)" % (f, x, y), BINARY[f](xv, self.val[y]))
            return self.op("%s(%s, %s)" % (f, y, x), BINARY[f](self.val[y], xv))
        if kind == "div":
            y = [n for n in self.val if self.val[n].shape == xv.shape]
            y = y[int(r.integers(len(y)))]
            sq = self.op("square(%s)" % y, self.val[y] ** 2)  # a denominator >= 1
            den = self.op("addc(%s, 1)" % sq, self.val[sq] + 1.0) if sq else None
            if not den:
                return None
            return self.op("div(%s, %s)" % (x, den), xv / self.val[den])
        if kind in ("matmul", "chain", "shared"):
            if xv.ndim != 2:
                x = self.input([self.size(), self.size()])
                xv = self.val[x]
            m, k = xv.shape
            w = self.input([k, self.size()])
            if kind == "matmul":
                return self.op("matmul(%s, %s)" % (x, w), xv @ self.val[w])
            if kind == "shared":  # two projections of one input (merged by --rewrite)
                w2 = self.input([k, self.size()])
                a = self.op("matmul(%s, %s)" % (x, w), xv @ self.val[w])
                b = self.op("matmul(%s, %s)" % (x, w2), xv @ self.val[w2])
                return b or a
            a = self.op("matmul(%s, %s)" % (x, w), xv @ self.val[w])  # a left-deep chain
            if not a:
                return None
            w2 = self.input([self.val[a].shape[1], self.size()])
            return self.op("matmul(%s, %s)" % (a, w2), self.val[a] @ self.val[w2])
        if kind == "einsum_t":
            if xv.ndim == 2:
                return self.op('einsum("ij->ji", %s)' % x, xv.T)
            if xv.ndim == 3:
                return self.op('einsum("ijk->ik", %s)' % x, xv.sum(axis=1))
            return None
        if kind == "einsum_b":
            if xv.ndim != 3:
                return None
            b, i, j = xv.shape
            w = self.input([b, j, self.size()])
            return self.op('einsum("bij,bjk->bik", %s, %s)' % (x, w),
                           np.einsum("bij,bjk->bik", xv, self.val[w]))
        if kind == "softmax":
            axis = int(r.integers(xv.ndim))
            e = np.exp(xv - xv.max(axis=axis, keepdims=True))
            text = "softmax(%s)" % x if axis == xv.ndim - 1 and r.integers(2) else \
                "softmax(%s, %d)" % (x, axis)
            return self.op(text, e / e.sum(axis=axis, keepdims=True))
        if kind in ("rmsnorm", "layernorm"):
            d = xv.shape[-1]
            w = self.input([d])
            if kind == "rmsnorm":
                v = xv / np.sqrt((xv ** 2).mean(axis=-1, keepdims=True) + 1e-5) * self.val[w]
                return self.op("rmsnorm(%s, %s)" % (x, w), v)
            b = self.input([d])
            mu = xv.mean(axis=-1, keepdims=True)
            var = ((xv - mu) ** 2).mean(axis=-1, keepdims=True)
            if var.min() < 1e-3:  # f32 cancellation would dominate the comparison
                return None
            v = (xv - mu) / np.sqrt(var + 1e-5) * self.val[w] + self.val[b]
            return self.op("layernorm(%s, %s, %s)" % (x, w, b), v)
        if kind == "reduce":
            if xv.ndim < 2:
                return None
            axis = int(r.integers(xv.ndim))
            if r.integers(2):
                return self.op("reduce_sum(%s, %d)" % (x, axis), xv.sum(axis=axis))
            return self.op("reduce_max(%s, %d)" % (x, axis), xv.max(axis=axis))
        if kind == "concat":
            axis = int(r.integers(xv.ndim))
            shape = list(xv.shape)
            shape[axis] = self.size()
            y = self.input(shape)
            return self.op("concat(%s, %s, %d)" % (x, y, axis),
                           np.concatenate([xv, self.val[y]], axis=axis))
        if kind == "slice":
            axis = int(r.integers(xv.ndim))
            n = xv.shape[axis]
            s = int(r.integers(n))
            e = int(r.integers(s + 1, n + 1))
            idx = [slice(None)] * xv.ndim
            idx[axis] = slice(s, e)
            return self.op("slice(%s, %d, %d, %d)" % (x, axis, s, e), xv[tuple(idx)])
        return None

    def program(self, nsteps):
        self.input([self.size(), self.size()])
        for _ in range(nsteps):
            self.step()
        if not self.ops:
            x = self.inputs[0]
            self.op("neg(%s)" % x, -self.val[x])
        r = self.rng
        saved = [n for n in self.ops if r.integers(3) == 0]
        if self.ops[-1] not in saved:
            saved.append(self.ops[-1])
        if r.integers(3) == 0:  # an input saved as it is
            saved.append(self.inputs[int(r.integers(len(self.inputs)))])
        if r.integers(3) == 0:  # the same expression twice, both saved
            x = saved[0]
            a = self.op("tanh(%s)" % x, np.tanh(self.val[x]))
            b = self.op("tanh(%s)" % x, np.tanh(self.val[x]))
            saved += [n for n in (a, b) if n]
        if r.integers(3) == 0:  # an operator nobody reads
            self.op("relu(%s)" % self.inputs[0], np.maximum(self.val[self.inputs[0]], 0))
        self.lines.append("save " + ", ".join(saved))
        return "\n".join(self.lines) + "\n", saved


# The options that change the plan or the lowering; run i uses OPTIONS[i % n]
# and P = 1 + i % 8, so every option meets several device counts.
OPTIONS = [
    ["--rewrite"],
    [],
    ["--objective", "time"],
    ["--rewrite", "--objective", "time"],
    ["--selector", "greedy"],
    ["--selector", "random", "--plan-seed", "7"],
    ["--exchange-chunks", "auto"],
    ["--exchange-chunks", "3"],
    ["--topology", "dgx-a100"],
    ["--rewrite", "--selector", "greedy"],
    ["--schedule", "naive"],
    ["--topology", "gb200-nvl72", "--rewrite"],
]


def tolerance_ok(got, want):
    """|got - want| <= 1e-4 + 1e-3 |want| everywhere; NaN fails."""
    return bool(np.all(np.abs(got - want) <= 1e-4 + 1e-3 * np.abs(want)))


def main():
    args = sys.argv[1:]
    einrun, d = args[0], args[1]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 24
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 22
    keep = "--keep" in args
    print("1..%d" % runs)
    failures = 0
    for i in range(runs):
        rng = np.random.default_rng([seed, i])
        g = Gen(rng)
        text, saved = g.program(int(rng.integers(4, 12)))
        p = 1 + i % 8
        opts = OPTIONS[i % len(OPTIONS)]
        run_dir = os.path.join(d, "run%d" % i)
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "prog.ein"), "w") as f:
            f.write(text)
        cmd = [einrun, "--cpu", str(p), "-q", "--worker-timeout", "30", "--timeout", "120"] + opts
        for n in g.inputs:
            path = os.path.join(run_dir, "%s.npy" % n)
            np.save(path, g.val[n].astype(np.float32))
            cmd += ["--input", "%s=%s" % (n, path)]
        for n in saved:
            cmd += ["--output", "%s=%s" % (n, os.path.join(run_dir, "out-%s.npy" % n))]
        cmd.append(os.path.join(run_dir, "prog.ein"))
        what = "run %d: P=%d %s (%d inputs, saves %s)" % (i, p, " ".join(opts) or "(defaults)",
                                                          len(g.inputs), ", ".join(saved))
        try:
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=180)
            out, rc = res.stdout.decode("utf-8", "replace"), res.returncode
        except subprocess.TimeoutExpired:
            out, rc = "(einrun did not finish in 180 s)", -1
        bad = []
        if rc != 0:
            bad.append("einrun exited with %d: %s" % (rc, out.strip()[-600:]))
        else:
            for n in saved:
                try:
                    got = np.load(os.path.join(run_dir, "out-%s.npy" % n)).astype(np.float64)
                except (OSError, ValueError) as e:
                    bad.append("%s: cannot read the output: %s" % (n, e))
                    continue
                want = g.val[n]
                if got.shape != want.shape:
                    bad.append("%s: shape %s, expected %s" % (n, got.shape, want.shape))
                elif not tolerance_ok(got, want):
                    k = int(np.argmax(np.abs(got - want)))
                    bad.append("%s: element %d is %r, expected %r (max error %.3g)" % (
                        n, k, got.flat[k], want.flat[k], float(np.nanmax(np.abs(got - want)))))
        if bad:
            failures += 1
            print("not ok %d - %s" % (i + 1, what))
            for b in bad:
                print("# " + b.replace("\n", "\n# "))
            print("# program:\n# " + text.strip().replace("\n", "\n# "))
            print("# command: " + " ".join(cmd))
        else:
            print("ok %d - %s" % (i + 1, what))
    if not keep:
        subprocess.run(["rm", "-rf", d])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
