// Renders chat templates with @huggingface/jinja (the interpreter transformers.js uses, pinned
// in package.json) and writes what it renders as fixtures for tests/template:
//
//   tests/data/templates/constructs.json       small templates, one construct each
//                                              (template_cases.mjs)
//   tests/data/templates/random.json           seeded random templates: expressions, whitespace
//                                              control, number and statement programs
//                                              (template_random.mjs)
//   tests/data/templates/<family>.expected.json conversations rendered with the template of
//                                              tests/data/templates/<family>.tokenizer_config.json
//   tests/data/templates/<model>-real.expected.json the same with the real tokenizer_config.json
//                                              of ../shared/models/<model> (llama3, qwen3), which
//                                              are not committed; skipped when absent
//
// Each conversation is rendered as transformers.js' apply_chat_template does: the variables
// are messages, add_generation_prompt, tools (when given), the special tokens of
// tokenizer_config.json (bos_token, eos_token, ...: a string, or an object's "content") and
// any extra variables of the case; each family also gets 25 seeded random conversations.
// A render that throws is recorded as {"error": message}.
//
// Run: cd tests/oracle && npm ci && node gen_template_fixtures.mjs [MODELS_DIR]
// (MODELS_DIR defaults to $PAGELLM_TEST_MODELS, then ../../../shared/models).
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { cases as constructCases } from "./template_cases.mjs";
import { conversations } from "./template_conversations.mjs";
import * as random from "./template_random.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.join(here, "..", "data", "templates");
const modelsDir = process.argv[2] || process.env.PAGELLM_TEST_MODELS ||
  path.join(here, "..", "..", "..", "shared", "models");

function render(src, vars) {
  try {
    return { expect: new Template(src).render(vars) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

function write(name, value) {
  const file = path.join(dataDir, name);
  fs.writeFileSync(file, JSON.stringify(value, null, 1) + "\n");
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
}

// ---- constructs ----
write("constructs.json", {
  generator: "tests/oracle/gen_template_fixtures.mjs (@huggingface/jinja 0.5.11)",
  cases: constructCases.map(([name, template, vars]) => ({ name, template, vars, ...render(template, vars) })),
});

// ---- random templates ----
const group = (name, vars, templates) =>
  ({ name, vars, cases: templates.map((template) => ({ template, ...render(template, vars) })) });
write("random.json", {
  generator: "tests/oracle/gen_template_fixtures.mjs (@huggingface/jinja 0.5.11)",
  groups: [
    group("expressions", random.exprVars, random.expressions(11, 600)),
    group("whitespace", random.spaceVars, random.whitespace(12, 600)),
    group("programs", random.programVars, random.programs(13, 300)),
  ],
});

// ---- chat templates ----
const SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function templateOf(config, hasTools) {
  const ct = config.chat_template;
  if (typeof ct === "string") return ct;
  const byName = Object.fromEntries(ct.map((t) => [t.name, t.template]));
  return (hasTools && byName.tool_use) || byName.default;
}

function chatVars(config, c) {
  const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
  if (c.tools !== undefined) vars.tools = c.tools;
  for (const k of SPECIAL) {
    let t = config[k];
    if (t && typeof t === "object") t = t.content;
    if (typeof t === "string" && t.length > 0) vars[k] = t;
  }
  return { ...vars, ...(c.extra || {}) };
}

function renderFamily(config, family) {
  let s = 0;
  for (const ch of family) s = (s * 31 + ch.charCodeAt(0)) & 0xffff;
  return [...conversations(family), ...random.conversations(s + 1, 25)].map((c) => {
    const src = templateOf(config, c.tools !== undefined);
    return { ...c, ...render(src, chatVars(config, c)) };
  });
}

const families = fs.readdirSync(dataDir)
  .filter((f) => f.endsWith(".tokenizer_config.json"))
  .map((f) => f.replace(".tokenizer_config.json", ""));
for (const family of families.sort()) {
  const config = JSON.parse(fs.readFileSync(path.join(dataDir, `${family}.tokenizer_config.json`), "utf8"));
  write(`${family}.expected.json`, { family, cases: renderFamily(config, family) });
}

for (const model of ["llama3", "qwen3"]) {
  const file = path.join(modelsDir, model, "tokenizer_config.json");
  if (!fs.existsSync(file)) {
    console.log(`skipped ${model}: ${file} not found`);
    continue;
  }
  const config = JSON.parse(fs.readFileSync(file, "utf8"));
  write(`${model}-real.expected.json`, { family: `${model}-real`, cases: renderFamily(config, `${model}-real`) });
}
