# tests/e2e/st_gen.py — writes .safetensors test files and checks results
# against NumPy, for test_weights.sh (run with Debian's /usr/bin/python3,
# which has NumPy). The writer is independent of ours (ein_safetensors_write):
# it follows the format description, so a test cannot pass by our writer
# and reader agreeing on a mistake.
#
#   st_gen.py ffn DIR DTYPE        DIR/model.safetensors (x, w1, layers.0.w2,
#                                  pos I64) and DIR/ref.npy = relu(x@w1)@w2
#   st_gen.py bad DIR              DIR/bad-*.safetensors, one lie each
#   st_gen.py rope DIR             DIR/x.npy [12, 4*16] and DIR/ref.npy: Hugging
#                                  Face's rotate-half RoPE of x (theta 500000)
#                                  over packed sequences [5, 7], written the
#                                  way transformers' modeling_llama does it
#   st_gen.py check GOT REF TOL    max |got - ref| / max(1, |ref|) <= TOL
import json, struct, sys
import numpy as np


def write(path, tensors, lie=None):
    """tensors: [(name, array, dtype-name)]; lie: edits the header dict."""
    header, blobs, off = {}, [], 0
    for name, a, dt in tensors:
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    if lie:
        lie(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def ffn(d, dtype):
    rng = np.random.default_rng(7)
    np_t, st_t = {"f32": (np.float32, "F32"), "f16": (np.float16, "F16")}[dtype]
    x = (rng.standard_normal((37, 24)) * 0.5).astype(np_t)
    w1 = (rng.standard_normal((24, 50)) * 0.3).astype(np_t)
    w2 = (rng.standard_normal((50, 24)) * 0.3).astype(np_t)
    pos = np.arange(5, dtype=np.int64)
    write(d + "/model.safetensors",
          [("pos", pos, "I64"), ("w1", w1, st_t), ("layers.0.w2", w2, st_t), ("x", x, st_t)])
    f = lambda a: a.astype(np.float64)
    np.save(d + "/ref.npy", np.maximum(f(x) @ f(w1), 0) @ f(w2))
    # w1 transposed under the right name (a shape error), and f16 for f32.
    write(d + "/transposed.safetensors", [("w1", np.ascontiguousarray(w1.T), st_t)])
    write(d + "/f16.safetensors", [("w1", w1.astype(np.float16), "F16")])
    write(d + "/i64.safetensors", [("w1", np.zeros((24, 50), np.int64), "I64")])


def bad(d):
    a = np.ones((24, 50), np.float32)
    b = np.ones((50, 24), np.float32)
    good = [("w1", a, "F32"), ("w2", b, "F32")]
    write(d + "/good.safetensors", good)
    np.save(d + "/w1.npy", a)
    data = open(d + "/good.safetensors", "rb").read()
    open(d + "/bad-truncated.safetensors", "wb").write(data[:-100])

    def lie_offsets(h):
        h["w2"]["data_offsets"][1] += 400
    write(d + "/bad-offsets.safetensors", good, lie_offsets)

    def overlap(h):
        h["w2"]["data_offsets"] = [4000, 4000 + 3200]
        h["w1"]["data_offsets"] = [0, 4800]
    write(d + "/bad-overlap.safetensors", [("w1", a, "F32"), ("w2", b[:, :16], "F32")], overlap)

    def dtype(h):
        h["w1"]["dtype"] = "F33"
    write(d + "/bad-dtype.safetensors", good, dtype)


def rope(d):
    rng = np.random.default_rng(3)
    tokens, heads, hd, base = 12, 4, 16, 500000.0
    x = rng.standard_normal((tokens, heads * hd)).astype(np.float32)
    np.save(d + "/x.npy", x)
    # transformers: inv_freq = 1 / base^(arange(0, dim, 2) / dim); emb = cat(freqs, freqs)
    inv_freq = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    pos = np.concatenate([np.arange(5), np.arange(7)]).astype(np.float64)
    freqs = np.outer(pos, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    def rotate_half(v):
        v1, v2 = v[..., : hd // 2], v[..., hd // 2:]
        return np.concatenate([-v2, v1], axis=-1)

    q = x.astype(np.float64).reshape(tokens, heads, hd)
    np.save(d + "/ref.npy", (q * cos + rotate_half(q) * sin).reshape(tokens, heads * hd))


def check(got, ref, tol):
    g = np.load(got).astype(np.float64)
    r = np.load(ref)
    if g.shape != r.shape:
        print("shape %s, expected %s" % (g.shape, r.shape))
        return 1
    err = float(np.max(np.abs(g - r) / np.maximum(1.0, np.abs(r))))
    if not err <= float(tol):   # NaN fails
        print("max relative error %g over %s" % (err, tol))
        return 1
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "ffn":
        ffn(sys.argv[2], sys.argv[3])
    elif cmd == "rope":
        rope(sys.argv[2])
    elif cmd == "bad":
        bad(sys.argv[2])
    elif cmd == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
