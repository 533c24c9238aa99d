// Chats as OpenAI's clients send them (content null on a turn that only calls tools, content as
// a list of parts, tool-call arguments as JSON text, tool results with tool_call_id), brought
// into the shape Hugging Face templates expect with vLLM's rules (chat_utils: content null or
// missing -> "", text parts joined by "\n", tool_calls null or [] dropped, arguments parsed, ""
// or null -> {}) and rendered with @huggingface/jinja, for tests/e2e/test_e2e_chat.c to compare
// with what pagellm's library renders from the same OpenAI-shaped messages.
//
//   tests/data/templates/openai_messages.expected.json
//
// Each family names the template (a fixture of tests/data/templates, or the real
// tokenizer_config.json of ../shared/models/<model>) and the tokenizer the C test loads from
// the models folder, whose bos/eos tokens the render gets (as pagellm passes them). A case
// the rules refuse (a part that is not text) is recorded as {"error": message}.
//
// Run: cd tests/oracle && npm ci && node gen_chat_messages_fixtures.mjs [MODELS_DIR]
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.join(here, "..", "data", "templates");
const modelsDir = process.argv[2] || process.env.PAGELLM_TEST_MODELS ||
  path.join(here, "..", "..", "..", "shared", "models");

// vLLM's rules, written again here from their description (pagellm's are in
// engine/chat_messages.c).
function prepare(messages) {
  return messages.map((m, i) => {
    const out = { ...m };
    if (out.content === null || out.content === undefined) out.content = "";
    else if (Array.isArray(out.content)) {
      out.content = out.content.map((p, k) => {
        if (p.type !== "text" || typeof p.text !== "string")
          throw new Error(`messages[${i}].content[${k}]: only text parts are supported`);
        return p.text;
      }).join("\n");
    }
    if (out.tool_calls === null || (Array.isArray(out.tool_calls) && out.tool_calls.length === 0))
      delete out.tool_calls;
    else if (Array.isArray(out.tool_calls)) {
      out.tool_calls = out.tool_calls.map((c) => {
        if (!c.function) return c;
        const f = { ...c.function };
        if (f.arguments === null || f.arguments === undefined || f.arguments === "") f.arguments = {};
        else if (typeof f.arguments === "string") {
          try { f.arguments = JSON.parse(f.arguments); } catch { /* kept as text */ }
        }
        return { ...c, function: f };
      });
    }
    return out;
  });
}

const weather = {
  type: "function",
  function: {
    name: "get_current_weather",
    description: "Get the current weather in a given location",
    parameters: {
      type: "object",
      properties: { location: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["location"],
    },
  },
};
const search = {
  type: "function",
  function: { name: "web_search", description: "Search the web", parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] } },
};
const tools = [weather, search];
const u1 = { role: "user", content: "What is the weather in Paris?" };
const call = (id, args) => ({ id, type: "function", function: { name: "get_current_weather", arguments: args } });
const result = (id, content) => ({ role: "tool", tool_call_id: id, content });

function cases(family) {
  const id = family.startsWith("mistral") ? "abcDEF123" : "call_8f2e1c";
  const id2 = family.startsWith("mistral") ? "xyz987ABC" : "call_77aa01";
  const extra = family.startsWith("llama-3") ? { date_string: "26 Jul 2024" } : undefined;
  const list = [
    { name: "content_parts", messages: [{ role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: "world \u00e9" }] }], add_generation_prompt: true },
    { name: "null_content_answer", messages: [u1, { role: "assistant", content: null }, { role: "user", content: "Again?" }], add_generation_prompt: true },
    { name: "tool_calls_null", messages: [u1, { role: "assistant", content: "Sunny.", tool_calls: null }, { role: "user", content: "Thanks" }], add_generation_prompt: true },
    { name: "error_image_part", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }], add_generation_prompt: true },
  ];
  if (family === "llama3-real") return list; // its template knows no tools
  list.push(
    { name: "tool_round_trip", messages: [u1, { role: "assistant", content: null, tool_calls: [call(id, "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}")] }, result(id, "21.5 \u00b0C")], tools, add_generation_prompt: true },
    { name: "tool_call_no_content_empty_args", messages: [u1, { role: "assistant", tool_calls: [call(id, "")] }, result(id, "{\"temperature\": 21.5}")], tools, add_generation_prompt: true },
    { name: "tool_call_then_answer", messages: [u1, { role: "assistant", content: null, tool_calls: [call(id, "{\"location\":\"Paris\"}")] }, result(id, "sunny"), { role: "assistant", content: [{ type: "text", text: "It is sunny." }] }, { role: "user", content: "And tomorrow?" }], tools, add_generation_prompt: true },
  );
  if (!family.startsWith("llama-3")) // Llama 3.1/3.2 allow one call per message
    list.push({ name: "parallel_calls", messages: [u1, { role: "assistant", content: null, tool_calls: [call(id, "{\"location\": \"Paris\"}"), call(id2, "{\"location\": \"Lyon\"}")] }, result(id, "sunny"), result(id2, "rain")], tools, add_generation_prompt: true });
  if (family === "qwen3-real")
    list.push({ name: "reasoning_then_call", messages: [u1, { role: "assistant", content: null, reasoning_content: "I should call the tool.", tool_calls: [call(id, "{\"location\": \"Paris\"}")] }, result(id, "sunny")], tools, add_generation_prompt: true });
  return list.map((c) => (extra ? { ...c, extra } : c));
}

function render(src, special, c) {
  try {
    const vars = { messages: prepare(c.messages), add_generation_prompt: c.add_generation_prompt, ...special };
    if (c.tools !== undefined) vars.tools = c.tools;
    return { expect: new Template(src).render({ ...vars, ...(c.extra || {}) }) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

// The bos/eos text pagellm's tokenizer gives (engine/chat.c passes only these two).
function special(config) {
  const out = {};
  for (const k of ["bos_token", "eos_token"]) {
    let t = config[k];
    if (t && typeof t === "object") t = t.content;
    if (typeof t === "string" && t.length > 0) out[k] = t;
  }
  return out;
}

const read = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const fixture = (name) => read(path.join(dataDir, `${name}.tokenizer_config.json`)).chat_template;
const real = (model) => path.join(modelsDir, model, "tokenizer_config.json");
const families = [];
for (const model of ["llama3", "qwen3"]) {
  if (!fs.existsSync(real(model))) {
    console.log(`skipped ${model}: ${real(model)} not found`);
    continue;
  }
  const cfg = read(real(model));
  families.push({ family: `${model}-real`, tokenizer: model, template: cfg.chat_template, special: special(cfg) });
  if (model === "llama3") {
    for (const f of ["llama-3.1-8b-instruct", "llama-3.2-3b-instruct"])
      families.push({ family: f, tokenizer: "llama3", template: fixture(f), special: special(cfg) });
  } else {
    families.push({ family: "qwen2.5-3b-instruct", tokenizer: "qwen3", template: fixture("qwen2.5-3b-instruct"), special: special(cfg) });
  }
}
// the Llama 2 SentencePiece model of the models folder: <s> and </s>
families.push({ family: "mistral-7b-instruct-v0.3", tokenizer: "tokenizer.model", template: fixture("mistral-7b-instruct-v0.3"), special: { bos_token: "<s>", eos_token: "</s>" } });

const out = {
  generator: "tests/oracle/gen_chat_messages_fixtures.mjs (@huggingface/jinja 0.5.11)",
  families: families.map((f) => ({
    family: f.family,
    tokenizer: f.tokenizer,
    template: f.template,
    cases: cases(f.family).map((c) => ({ ...c, ...render(f.template, f.special, c) })),
  })),
};
const file = path.join(dataDir, "openai_messages.expected.json");
fs.writeFileSync(file, JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${path.relative(process.cwd(), file)}`);
