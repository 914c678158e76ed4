// tests/js/tok_ref.mjs — the reference side of tests/python/test_tokenizer.py.
// Two independent implementations encode and decode what the test gives:
//   "rust": Hugging Face's Rust tokenizers crate (0.22) through its Node
//           binding @anush008/tokenizers — the implementation checkpoints'
//           tokenizer.json files are written for;
//   "js":   Hugging Face's JavaScript port, @huggingface/tokenizers;
// and @huggingface/jinja renders chat templates.
//   node tok_ref.mjs IN.json OUT.json
// IN: {"tokenizers": {name: tokenizer.json object}, "texts": [...],
//      "decode": {name: [[ids], ...]}, "chats": [{template, context}]}
// OUT: {"engines": [...], ENGINE: {name: {"enc": [[ids]], "enc_plain": [[ids]],
//      "dec": [str], "dec_skip": [str]}}, "chats": [str or {"error": msg}]}
// An engine whose package is not installed is left out of "engines".
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = { engines: [] };

async function tryImport(name) {
  try {
    return await import(name);
  } catch (e) {
    return null;
  }
}

// The Rust crate.
let rust = null;
try {
  rust = require("@anush008/tokenizers");
} catch (e) {
  out.rust_error = String(e && e.message || e);
}
if (rust && input.tokenizers) {
  out.engines.push("rust");
  out.rust = {};
  for (const [name, tj] of Object.entries(input.tokenizers)) {
    const tok = rust.Tokenizer.fromString(JSON.stringify(tj));
    const r = { enc: [], enc_plain: [], dec: [], dec_skip: [] };
    for (const t of input.texts) {
      r.enc.push((await tok.encode(t, null, { addSpecialTokens: true })).getIds());
      r.enc_plain.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
    }
    for (const ids of (input.decode || {})[name] || []) {
      r.dec.push(await tok.decode(ids, false));
      r.dec_skip.push(await tok.decode(ids, true));
    }
    out.rust[name] = r;
  }
}

// The JavaScript port.
const tjs = await tryImport("@huggingface/tokenizers");
if (tjs && input.tokenizers) {
  out.engines.push("js");
  out.js = {};
  for (const [name, tj] of Object.entries(input.tokenizers)) {
    const tok = new tjs.Tokenizer(tj, { clean_up_tokenization_spaces: false });
    const r = { enc: [], enc_plain: [], dec: [], dec_skip: [] };
    for (const t of input.texts) {
      r.enc.push(tok.encode(t).ids);
      r.enc_plain.push(tok.encode(t, { add_special_tokens: false }).ids);
    }
    for (const ids of (input.decode || {})[name] || []) {
      if (!ids.length) { // tokenizers.js refuses an empty list; its text is ""
        r.dec.push("");
        r.dec_skip.push("");
        continue;
      }
      const o = { clean_up_tokenization_spaces: false };
      r.dec.push(tok.decode(ids, { ...o, skip_special_tokens: false }));
      r.dec_skip.push(tok.decode(ids, { ...o, skip_special_tokens: true }));
    }
    out.js[name] = r;
  }
}

// Chat templates.
const jinja = await tryImport("@huggingface/jinja");
if (jinja) {
  out.engines.push("jinja");
  out.chats = [];
  for (const c of input.chats || []) {
    try {
      out.chats.push(new jinja.Template(c.template).render(c.context));
    } catch (e) {
      out.chats.push({ error: String(e && e.message || e) });
    }
  }
}
writeFileSync(process.argv[3], JSON.stringify(out));
