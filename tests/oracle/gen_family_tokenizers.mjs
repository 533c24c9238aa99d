// tests/oracle/gen_family_tokenizers.mjs - Gemma's and Phi-3's tokenizer.json forms and chat
// templates, and what the oracles make of them, for the tests of issue 30's families:
//
//   cd tests/oracle && npm ci && node gen_family_tokenizers.mjs
//
// No real Gemma or Phi-3 tokenizer is downloaded: tok512 (tests/data/tok512_hf, committed)
// is converted the way each family's tokenizer.json is laid out, with the family's special
// tokens added after its 512 pieces:
//   tests/data/gemma_tok/  Gemma's form: a Replace normalizer (" " -> U+2581) with no prefix
//     space (Gemma's SentencePiece model has add_dummy_prefix false), BPE with byte fallback,
//     a decoder without Strip, <bos>/<eos>/<unk>/<pad> and <start_of_turn>/<end_of_turn>
//     (special); tokenizer_config.json with Gemma 2's chat template.
//   tests/data/phi3_tok/   Phi-3's form: Llama 2's (Prepend + Replace, a Strip decoder) with
//     <|endoftext|>, <|assistant|>, <|system|>, <|end|>, <|user|> added (special, rstrip
//     true but <|endoftext|>, as Phi-3-mini's tokenizer.json has them); tokenizer_config.json
//     with Phi-3's chat template.
// and tests/data/family_tokenizer_oracle.json: @lenml/tokenizers 3.7.2's ids (special-token
// strings parsed and as plain text, BOS added and not) and decodes of a corpus that includes
// each family's rendered chats, in tokenizer_oracle.json's layout (tests/tokenizer/hf_oracle.c
// reads both). The chat templates also go to tests/data/templates (gemma-2-2b-it,
// gemma-3-1b-it, phi-3-mini-4k-instruct, phi-3.5-mini-instruct .tokenizer_config.json), where
// gen_template_fixtures.mjs renders them with @huggingface/jinja.
//
// The templates are the families' published ones in substance (Gemma 2: alternating turns,
// no system role, "model" for the assistant, trimmed content; Gemma 3: a system message
// prepended to the first user turn, text parts of list contents; Phi-3 / Phi-3.5: <|role|>
// headers and <|end|>).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.join(here, "..", "data");
const readJson = (f) => JSON.parse(fs.readFileSync(f, "utf8"));
function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value, null, 1) + "\n");
  console.error(`wrote ${path.relative(process.cwd(), file)}`);
}

const base = readJson(path.join(dataDir, "tok512_hf", "tokenizer.json"));
const special = (id, content, rstrip = false) =>
  ({ id, content, single_word: false, lstrip: false, rstrip, normalized: false, special: true });

// ---- Gemma ----
const GEMMA2_TEMPLATE =
  "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not " +
  "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != " +
  "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate " +
  "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}" +
  "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}" +
  "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}" +
  "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
const GEMMA3_TEMPLATE = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
`;

function gemmaTokenizer() {
  const vocab = { ...base.model.vocab };
  // tok512's control pieces take Gemma's names
  const rename = { "<s>": "<bos>", "</s>": "<eos>" };
  for (const [from, to] of Object.entries(rename)) {
    vocab[to] = vocab[from];
    delete vocab[from];
  }
  return {
    ...base,
    added_tokens: [special(0, "<unk>"), special(1, "<bos>"), special(2, "<eos>"),
                   special(512, "<start_of_turn>"), special(513, "<end_of_turn>"),
                   special(514, "<pad>")],
    normalizer: { type: "Replace", pattern: { String: " " }, content: "\u2581" },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<bos>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<bos>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: "<bos>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<bos>": { id: "<bos>", ids: [1], tokens: ["<bos>"] } },
    },
    decoder: {
      type: "Sequence",
      decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " },
                 { type: "ByteFallback" }, { type: "Fuse" }],
    },
    model: { ...base.model, vocab },
  };
}
const gemmaConfig = (template) => ({
  add_bos_token: true, add_eos_token: false, bos_token: "<bos>", eos_token: "<eos>",
  unk_token: "<unk>", pad_token: "<pad>", clean_up_tokenization_spaces: false,
  additional_special_tokens: ["<start_of_turn>", "<end_of_turn>"],
  model_max_length: 8192, tokenizer_class: "GemmaTokenizer", chat_template: template,
});

// ---- Phi-3 ----
const PHI3_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + " +
  "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + " +
  "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}" +
  "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
const PHI35_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}" +
  "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}" +
  "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}" +
  "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

function phi3Tokenizer() {
  return {
    ...base,
    // add_bos_token is false in Phi-3's tokenizer_config.json, and transformers rebuilds the
    // post-processor from it (LlamaTokenizerFast.update_post_processor); @lenml/tokenizers
    // reads tokenizer.json's alone, so the file says the same: no BOS
    post_processor: {
      type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: {},
    },
    added_tokens: [...base.added_tokens, special(512, "<|endoftext|>"),
                   special(513, "<|assistant|>", true), special(514, "<|system|>", true),
                   special(515, "<|end|>", true), special(516, "<|user|>", true)],
  };
}
const phi3Config = (template) => ({
  add_bos_token: false, add_eos_token: false, bos_token: "<s>", eos_token: "<|endoftext|>",
  unk_token: "<unk>", pad_token: "<|endoftext|>", clean_up_tokenization_spaces: false,
  // Phi-3's config says legacy: false, which transformers' fast tokenizer ignores when it
  // loads tokenizer.json (the flag only steers a conversion from the .model), while
  // transformers.js then swaps the normalizer for a Metaspace of prepend_scheme "first": left
  // out here, so the oracle reads tokenizer.json as the Rust library (and pagellm) does
  model_max_length: 4096, tokenizer_class: "LlamaTokenizer",
  chat_template: template,
});

const families = {
  gemma_tok: { json: gemmaTokenizer(), config: gemmaConfig(GEMMA2_TEMPLATE) },
  phi3_tok: { json: phi3Tokenizer(), config: phi3Config(PHI3_TEMPLATE) },
};
for (const [name, f] of Object.entries(families)) {
  writeJson(path.join(dataDir, name, "tokenizer.json"), f.json);
  writeJson(path.join(dataDir, name, "tokenizer_config.json"), f.config);
}
for (const [name, config] of [["gemma-2-2b-it", gemmaConfig(GEMMA2_TEMPLATE)],
                              ["gemma-3-1b-it", gemmaConfig(GEMMA3_TEMPLATE)],
                              ["phi-3-mini-4k-instruct", phi3Config(PHI3_TEMPLATE)],
                              ["phi-3.5-mini-instruct", phi3Config(PHI35_TEMPLATE)]])
  writeJson(path.join(dataDir, "templates", `${name}.tokenizer_config.json`), config);

// ---- the corpus: plain text, and each family's chat turns as its template renders them ----
const corpus = [
  "Hello, my dog is cute",
  "  two leading spaces and  double  spaces  ",
  "The quick brown fox jumps over the lazy dog.",
  "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \ud83d\ude00",
  "line one\nline two\n\n\ttabbed",
  "",
  " ",
  "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
  "<start_of_turn>model\nParis.<end_of_turn>\n<start_of_turn>user\nAnd Japan? <end_of_turn>\n",
  "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n",
  "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n",
  "<|user|>  \n  spaces after the tag<|end|>   \n<|assistant|>\nOk.<|end|>\n<|endoftext|>",
  "text<|end|>text <|user|>x",
  "<start_of_turn> and <end_of_turn> inside text",
  "<pad><unk><eos>",
];

function load(src, parseSpecial) {
  let json = src.json;
  if (!parseSpecial) json = { ...json, added_tokens: json.added_tokens.filter((a) => !a.special) };
  const config = parseSpecial ? src.config : { ...src.config, additional_special_tokens: [] };
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
}

const out = {
  generator: "tests/oracle/gen_family_tokenizers.mjs",
  oracle: "@lenml/tokenizers 3.7.2",
  tokenizers: {
    gemma_tok: "tests/data/gemma_tok (tok512 in Gemma's tokenizer.json form)",
    phi3_tok: "tests/data/phi3_tok (tok512 in Phi-3's tokenizer.json form)",
  },
  cases: [],
  long: [],
};
for (const [name, src] of Object.entries(families)) {
  const parsed = load(src, true), plain = load(src, false);
  for (const text of corpus)
    for (const addSpecial of [true, false]) {
      const ids = parsed.encode(text, { add_special_tokens: addSpecial });
      const idsPlain = plain.encode(text, { add_special_tokens: addSpecial });
      const c = { tokenizer: name, text, add_special: addSpecial, ids };
      if (JSON.stringify(idsPlain) !== JSON.stringify(ids)) c.ids_plain = idsPlain;
      if (ids.length > 0) {
        const dec = parsed.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
        const skip = parsed.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
        if (dec !== text) c.decoded = dec;
        if (skip !== dec) c.decoded_skip = skip;
      }
      out.cases.push(c);
    }
}
writeJson(path.join(dataDir, "family_tokenizer_oracle.json"), out);
