// tests/oracle/gen_tokenizer_fixtures.mjs - expected token ids from an independent tokenizer
// implementation, @lenml/tokenizers 3.7.2 (a port of transformers.js' tokenizers), for the
// tests in tests/tokenizer (test_tokenizer_hf*.c).
//
//   cd tests/oracle && npm ci
//   PAGELLM_TEST_MODELS=/path/to/shared/models node gen_tokenizer_fixtures.mjs
//
// Writes, under tests/data/:
//   tok512_hf/tokenizer.json, tokenizer_config.json      Llama-2 style tokenizer.json (BPE with
//   tok512_meta/tokenizer.json, tokenizer_config.json    byte_fallback, Metaspace spaces),
//     converted from ../shared/models/tok512.model the way transformers' LlamaConverter does:
//     _hf with the older normalizer form (Prepend + Replace), _meta with a Metaspace
//     pre-tokenizer (prepend_scheme "first"). 512 tokens: small enough to commit.
//   tokenizer_oracle.json   for each tokenizer (llama3, qwen3 from PAGELLM_TEST_MODELS, which are
//     never copied here, and the two above) and each text of the corpus below: the ids with
//     special-token strings parsed (Hugging Face's default encode) and, where different, with
//     them as plain text; the decode of those ids (with and without special tokens) where it is
//     not the text itself; and for 1 MB inputs (and the corpus 20 times over), the id count,
//     an FNV-1a hash of the ids and their first and last ids.
//
// "Special tokens as plain text" is obtained from the oracle by removing the added tokens
// marked special from the tokenizer.json it loads (it has no such switch); non-special added
// tokens (Qwen's <think>) are still split out, as Hugging Face does with split_special_tokens.
// Decoding uses clean_up_tokenization_spaces: false (pagellm never applies that pass).
//
// Texts where this oracle is known to differ from the Rust tokenizers library that pagellm
// follows (see tokenizer/hf.h) are kept out of the corpus: U+0085 / U+FEFF next to spaces
// (JavaScript's \s is not Unicode White_Space), a Metaspace decoder's first token.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.join(here, "..", "data");
const models = process.env.PAGELLM_TEST_MODELS;
if (!models) {
  console.error("PAGELLM_TEST_MODELS is not set (the folder of ../shared/models)");
  process.exit(1);
}

// ---- SentencePiece .model -> tokenizer.json ----------------------------------------------------

// Minimal protobuf reader for ModelProto: pieces (field 1: piece 1, score 2, type 3).
function readVarint(buf, pos) {
  let x = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos++];
    x |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [x, pos];
    shift += 7n;
  }
}

function* fields(buf, start, end) {
  let pos = start;
  while (pos < end) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      let v;
      [v, pos] = readVarint(buf, pos);
      yield { field, wire, value: v };
    } else if (wire === 1) {
      yield { field, wire, start: pos, end: pos + 8 };
      pos += 8;
    } else if (wire === 5) {
      yield { field, wire, start: pos, end: pos + 4 };
      pos += 4;
    } else if (wire === 2) {
      let n;
      [n, pos] = readVarint(buf, pos);
      yield { field, wire, start: pos, end: pos + Number(n) };
      pos += Number(n);
    } else {
      throw new Error(`unsupported wire type ${wire}`);
    }
  }
}

function readSpm(file) {
  const buf = fs.readFileSync(file);
  const pieces = [];
  for (const f of fields(buf, 0, buf.length)) {
    if (f.field !== 1 || f.wire !== 2) continue;
    const p = { piece: "", score: 0, type: 1 };
    for (const g of fields(buf, f.start, f.end)) {
      if (g.field === 1) p.piece = buf.subarray(g.start, g.end).toString("utf8");
      else if (g.field === 2) p.score = buf.readFloatLE(g.start);
      else if (g.field === 3) p.type = Number(g.value);
    }
    pieces.push(p);
  }
  return pieces;
}

// transformers' SentencePieceExtractor for a BPE model: every split of every piece into two
// pieces of the vocabulary is a merge, ranked by the piece's score (highest first).
function spmMerges(pieces) {
  const vocab = new Map(pieces.map((p, i) => [p.piece, i]));
  const merges = [];
  pieces.forEach((p) => {
    const chars = Array.from(p.piece);
    const local = [];
    for (let i = 1; i < chars.length; i++) {
      const l = chars.slice(0, i).join(""), r = chars.slice(i).join("");
      if (vocab.has(l) && vocab.has(r)) local.push([l, r, p.score]);
    }
    local.sort((a, b) => vocab.get(a[0]) - vocab.get(b[0]) || vocab.get(a[1]) - vocab.get(b[1]));
    merges.push(...local);
  });
  merges.sort((a, b) => b[2] - a[2]); // stable: equal scores keep their order
  return merges.map((m) => [m[0], m[1]]);
}

function convertSpm(pieces, metaspace) {
  const vocab = {};
  pieces.forEach((p, i) => (vocab[p.piece] = i));
  // unknown (2) and control (3) pieces become special added tokens
  const added = [];
  pieces.forEach((p, i) => {
    if (p.type === 2 || p.type === 3)
      added.push({ id: i, content: p.piece, single_word: false, lstrip: false, rstrip: false,
                   normalized: false, special: true });
  });
  const decoder = {
    type: "Sequence",
    decoders: [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " },
      { type: "ByteFallback" },
      { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 },
    ],
  };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: metaspace ? null : {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "\u2581" },
        { type: "Replace", pattern: { String: " " }, content: "\u2581" },
      ],
    },
    // add_prefix_space is the older spelling of the scheme; the oracle only reads that one
    pre_tokenizer: metaspace ? { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first",
                                 split: false, add_prefix_space: true } : null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder,
    model: {
      type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
      vocab, merges: spmMerges(pieces),
    },
  };
}

const spmConfig = {
  add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>",
  unk_token: "<unk>", clean_up_tokenization_spaces: false, legacy: true,
  model_max_length: 2048, tokenizer_class: "LlamaTokenizer",
  chat_template: [
    { name: "default", template: "{% for m in messages %}{{ m['content'] }}{% endfor %}" },
    { name: "tool_use", template: "{{ tools | tojson }}" },
  ],
};

// ---- the tokenizers ----------------------------------------------------------------------------

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value, null, 1) + "\n");
}

const tok512 = readSpm(path.join(models, "tok512.model"));
const local = {};
for (const [name, meta] of [["tok512_hf", false], ["tok512_meta", true]]) {
  const json = convertSpm(tok512, meta);
  writeJson(path.join(dataDir, name, "tokenizer.json"), json);
  writeJson(path.join(dataDir, name, "tokenizer_config.json"), spmConfig);
  local[name] = { json, config: spmConfig };
}

const sources = {
  llama3: {
    json: readJson(path.join(models, "llama3", "tokenizer.json")),
    config: readJson(path.join(models, "llama3", "tokenizer_config.json")),
  },
  qwen3: {
    json: readJson(path.join(models, "qwen3", "tokenizer.json")),
    config: readJson(path.join(models, "qwen3", "tokenizer_config.json")),
  },
  ...local,
};

function load(src, parseSpecial) {
  let json = src.json;
  if (!parseSpecial) json = { ...json, added_tokens: json.added_tokens.filter((a) => !a.special) };
  const config = parseSpecial ? src.config : { ...src.config, additional_special_tokens: [] };
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
}

// ---- the corpus ----------------------------------------------------------------------------------

const corpus = [
  // English and punctuation
  "Hello, my dog is cute",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure they'll say it's fine, but DON'T you think we'd've known? He'S WE'LL",
  "Well... \"quoted\" (parenthesised) [bracketed] {braced} <angled> -- em—dash – en; semi: colon!",
  "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
  "",
  " ",
  "a",
  // code
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
  "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
  "for (int i=0;i<10;++i){x+=i*2;}  // comment\r\n",
  // numbers
  "1234567890 3.14159 1,000,000 2024-01-15 0x1F -42 +7 1e-9",
  "123 4567 89012 345678",
  // whitespace runs, tabs, CRLF
  "a  b   c    d     e",
  "   leading spaces",
  "trailing spaces   ",
  "\t\tindented\twith\ttabs",
  "line1\nline2\n\n\nline3",
  "windows\r\nline\r\nendings\r\n",
  " \n \t \r\n  mixed \u00a0 nbsp",
  "\n",
  "\n\n\n\n",
  "      ",
  // emoji, including ZWJ sequences, skin tones and flags
  "😀 😃 😄 😁",
  "👍🏽 thumbs",
  "family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 flag and 🇺🇸🇯🇵",
  "🐈",
  // CJK, Korean, Arabic, Hebrew, Devanagari, Thai
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트입니다",
  "مرحبا بالعالم، كيف حالك؟",
  "שלום עולם",
  "नमस्ते दुनिया, यह एक परीक्षण है।",
  "ภาษาไทย",
  // combining marks and text that normalization changes
  "cafe\u0301 vs café",
  "A\u030A vs \u00C5 vs \u212B",
  "\u2126hm and \uFB01ne and \u00BD and x\u00B2",
  "\u1E9B\u0323 and q\u0307\u0323",
  "Ǆemal ǅ ǆ",
  // special-token strings and lookalikes
  "<|begin_of_text|>Hello<|eot_id|>",
  "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
  "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning\n</think>\n\nanswer <tool_call>{}</tool_call>",
  "<s> hello </s> <unk>",
  "<s>hello</s>",
  "<|eot_id|",
  "<|endoftext|><|endoftext|>",
  "text<|im_end|>text",
  // strings that look like byte escapes
  "<0x41><0xE4><0xBD><0xA0> and \\x00\\xff and %E4%BD%A0 and \\u00e9",
  "<0x0A>",
  // long words
  "supercalifragilisticexpialidocious supercalifragilisticexpialidocious",
  "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcd",
  "zxqvjkwpmbrtlnhgfdscyxzqwvkjpmbtrlnhgfdscxzqwvbnmkjhgfdsaplokijuhygtfrdeswaqzxcvbnm",
  "ThisIsACamelCaseIdentifierThatGoesOnAndOnWithoutAnySpacesAtAllForAVeryLongWhile",
  "----------------------------------------------------------------------------------",
  "................................................................................",
];

// 1 MB inputs: one word without spaces (pseudo-random letters), one character repeated,
// spaces, digits, newlines; and the whole corpus 20 times over, a long text of repeated words
// in every script (what a word cache sees).
const MB = 1 << 20;
const longInputs = [
  { kind: "letters", seed: 12345, bytes: MB },
  { kind: "repeat", unit: "a", bytes: MB },
  { kind: "repeat", unit: " ", bytes: MB },
  { kind: "repeat", unit: "0123456789", bytes: MB },
  { kind: "repeat", unit: "\n", bytes: MB },
  { kind: "times", unit: corpus.join("\n") + "\n", times: 20 },
];

// Letters from a 32-bit LCG (x = x * 1664525 + 1013904223), 'a' + (x >>> 24) % 26; the C test
// generates the same text.
function makeLong(g) {
  if (g.kind === "times") return g.unit.repeat(g.times);
  if (g.kind === "repeat") {
    let s = g.unit.repeat(Math.ceil(g.bytes / g.unit.length));
    return s.slice(0, g.bytes);
  }
  let x = g.seed >>> 0;
  const out = new Array(g.bytes);
  for (let i = 0; i < g.bytes; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = String.fromCharCode(97 + ((x >>> 24) % 26));
  }
  return out.join("");
}

// FNV-1a 64 over the ids as little-endian uint32.
function fnv64(ids) {
  let h = 0xcbf29ce484222325n;
  const P = 0x100000001b3n, M = (1n << 64n) - 1n;
  for (const id of ids) {
    for (let k = 0; k < 4; k++) {
      h ^= BigInt((id >>> (8 * k)) & 0xff);
      h = (h * P) & M;
    }
  }
  return h.toString(16).padStart(16, "0");
}

// ---- generate ----------------------------------------------------------------------------------

const out = {
  generator: "tests/oracle/gen_tokenizer_fixtures.mjs",
  oracle: "@lenml/tokenizers 3.7.2",
  tokenizers: {
    llama3: "$PAGELLM_TEST_MODELS/llama3 (tokenizer.json + tokenizer_config.json)",
    qwen3: "$PAGELLM_TEST_MODELS/qwen3 (tokenizer.json + tokenizer_config.json)",
    tok512_hf: "tests/data/tok512_hf (converted from tok512.model; Prepend/Replace normalizer)",
    tok512_meta: "tests/data/tok512_meta (converted from tok512.model; Metaspace pre-tokenizer)",
  },
  cases: [],
  long: [],
};

for (const [name, src] of Object.entries(sources)) {
  const parsed = load(src, true), plain = load(src, false);
  for (const text of corpus) {
    for (const addSpecial of name.startsWith("tok512") ? [true, false] : [true]) {
      const ids = parsed.encode(text, { add_special_tokens: addSpecial });
      const idsPlain = plain.encode(text, { add_special_tokens: addSpecial });
      const c = { tokenizer: name, text, add_special: addSpecial, ids };
      if (JSON.stringify(idsPlain) !== JSON.stringify(ids)) c.ids_plain = idsPlain;
      if (ids.length > 0) {
        const dec = parsed.decode(ids, { skip_special_tokens: false,
                                         clean_up_tokenization_spaces: false });
        const skip = parsed.decode(ids, { skip_special_tokens: true,
                                          clean_up_tokenization_spaces: false });
        if (dec !== text) c.decoded = dec;
        if (skip !== dec) c.decoded_skip = skip;
      }
      out.cases.push(c);
    }
  }
  for (const g of longInputs) {
    const t0 = Date.now();
    const ids = parsed.encode(makeLong(g), { add_special_tokens: false });
    out.long.push({ tokenizer: name, gen: g, n_ids: ids.length, fnv64: fnv64(ids),
                    head: ids.slice(0, 8), tail: ids.slice(-8) });
    console.error(`${name} ${g.kind} ${JSON.stringify((g.unit ?? "").slice(0, 12) || g.seed)}: ` +
                  `${ids.length} ids, ` +
                  `${Date.now() - t0} ms`);
  }
}

writeJson(path.join(dataDir, "tokenizer_oracle.json"), out);
console.error(`${out.cases.length} cases, ${out.long.length} long inputs`);
