// tools/llamacpp/serve.mjs: llama.cpp (node-llama-cpp's prebuilt CPU
// binaries) driven by tools/bench-llamacpp.py through JSON lines: one
// request a line on stdin, one answer a line on stdout ({"error": "..."}
// when a request fails). Requests:
//   {"cmd": "load", "path": GGUF}           the model (the previous one goes)
//   {"cmd": "logits", "tokens": [...], "kv": "F32"}  the raw logits after
//        each token (1 thread; kv: the key/value cache's ggml type, F16
//        when absent): {"logits": [[V]...]}
//   {"cmd": "decode", "tokens": [...], "new": N, "threads": T, "kv": "F32"}
//        greedy decode of N tokens after the prompt on T threads:
//        {"ids": [...], "seconds": s, "cpu_seconds": c}, s the wall time of
//        the N - 1 decode steps after the first new token (which includes
//        the prompt), c this process's CPU time in them (all its threads)
import readline from "node:readline";
import {getLlama} from "node-llama-cpp";

const llama = await getLlama({gpu: false, build: "never", maxThreads: 0,
                              logLevel: "error"});
let model = null;

async function context(n, threads, kv) {
    const ctx = await model.createContext({contextSize: n, batchSize: n, sequences: 1,
                                           threads: {ideal: threads, min: threads},
                                           experimentalKvCacheKeyType: kv || "F16",
                                           experimentalKvCacheValueType: kv || "F16",
                                           flashAttention: false});
    return [ctx, ctx.getSequence()];
}

async function handle(q) {
    if (q.cmd === "load") {
        if (model) await model.dispose();
        model = null;
        model = await llama.loadModel({modelPath: q.path, gpuLayers: 0, useMmap: true});
        return {ok: true};
    }
    if (!model) throw new Error("no model loaded");
    if (q.cmd === "logits") {
        const [ctx, seq] = await context(q.tokens.length + 8, 1, q.kv);
        try {
            const r = await seq.controlledEvaluate(
                q.tokens.map((t) => [t, {generateNext: {logits: true}}]));
            return {logits: r.map((o) => {
                const a = [];
                for (const [tok, v] of o.next.logits) a[tok] = v;
                return a;
            })};
        } finally {
            await ctx.dispose();
        }
    }
    if (q.cmd === "decode") {
        const [ctx, seq] = await context(q.tokens.length + q.new + 8, q.threads, q.kv);
        try {
            const ids = [];
            let t0 = 0, c0 = null;
            for await (const t of seq.evaluate(q.tokens, {temperature: 0})) {
                ids.push(t);
                if (ids.length === 1) {
                    t0 = performance.now();
                    c0 = process.cpuUsage();
                }
                if (ids.length === q.new) break;
            }
            const c = process.cpuUsage(c0);
            return {ids, seconds: (performance.now() - t0) / 1e3,
                    cpu_seconds: (c.user + c.system) / 1e6};
        } finally {
            await ctx.dispose();
        }
    }
    throw new Error("unknown request " + JSON.stringify(q.cmd));
}

const rl = readline.createInterface({input: process.stdin, terminal: false});
for await (const line of rl) {
    if (!line.trim()) continue;
    let out;
    try {
        out = await handle(JSON.parse(line));
    } catch (e) {
        out = {error: String(e && e.stack || e)};
    }
    process.stdout.write(JSON.stringify(out) + "\n");
}
if (model) await model.dispose();
await llama.dispose();
