"""tests/python/typed_user.py — a small user script with type hints, the
paper's FFN through the typed API; test_typing.py runs `mypy --strict` on
it (and runs it)."""

import numpy as np
import numpy.typing as npt

import einsummable as es


def ffn(tokens: int, d_model: int, d_ff: int) -> "tuple[es.Graph, es.Tensor, es.Tensor, es.Tensor, es.Tensor]":
    graph: es.Graph = es.createGraph()
    x = graph.insertTensor(es.tensorDesc([tokens, d_model], "f32"), name="x")
    w1 = graph.insertTensor(es.tensorDesc([d_model, d_ff], "f32"), name="w1")
    w2 = graph.insertTensor(es.tensorDesc([d_ff, d_model], "f32"), name="w2")
    hidden = graph.unary(x @ w1, "relu", 0.0)
    y = graph.matmul(hidden, w2, name="y")
    graph.save(y)
    return graph, x, w1, w2, y


def main() -> float:
    graph, x, w1, w2, y = ffn(16, 8, 12)
    rng = np.random.default_rng(1)
    inputs: dict[str, npt.NDArray[np.float32]] = {
        t.name: rng.standard_normal(t.shape).astype(np.float32) for t in (x, w1, w2)}
    try:
        program = es.compileGraph(graph, device=[0, 1], schedule_mode="search")
    except es.EinValueError as e:
        raise SystemExit("compile failed: %s (code %d)" % (e.message, e.code))
    with program:
        for name, value in inputs.items():
            program.load(name, value)
        program.execute()
        out = program.offload(y)
        stats: es.RunStats | None = program.last_stats
        assert stats is not None and len(stats.devices) == 2
        pred: es.Prediction = program.predict()
        assert pred.time > 0.0
        program.save("ffn.einprog")
    again: es.Program = es.load_program("ffn.einprog", device=[0, 1], progress=False)
    with again:
        for name, value in inputs.items():
            again.load(name, value)
        again.execute()
        assert np.array_equal(again.offload(y), out)
    want = np.maximum(inputs["x"] @ inputs["w1"], 0.0) @ inputs["w2"]
    return float(np.max(np.abs(out - want)))


if __name__ == "__main__":
    err = main()
    print("max |y - numpy| = %.3g" % err)
    raise SystemExit(0 if err < 1e-3 else 1)
