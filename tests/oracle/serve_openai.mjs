// The official OpenAI client library (npm "openai", pinned in package.json) against
// `pagellm serve`: what an application written for OpenAI's API does, it must be able to do
// here. Run by tests/server/test_openai.py, which starts the server (stories260K, an API key,
// a chat template) and passes its address:
//
//   node serve_openai.mjs BASE_URL MODEL API_KEY
//
// Prints one line per check and exits 0 when all pass, 1 at the first failure. The server's
// template writes tools with Hermes' <tool_call> marker, so tool calls are read as "hermes";
// constrained outputs (forced tool calls, response_format) are checked with ajv against their
// schemas.
import OpenAI from "openai";
import Ajv from "ajv";

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

function check(cond, what, detail) {
  if (!cond) {
    console.log(`FAIL: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
}

async function collect(stream) {
  const texts = {}, finishes = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const piece = c.delta ? c.delta.content : c.text;
      texts[c.index] = (texts[c.index] ?? "") + (piece ?? "");
      if (c.finish_reason) (finishes[c.index] ??= []).push(c.finish_reason);
    }
  }
  return { texts, finishes, usage, chunks };
}

const WEATHER = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const CAT = {
  type: "object",
  properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 30 },
                indoor: { type: "boolean" } },
  required: ["name", "age", "indoor"],
  additionalProperties: false,
};
const ajv = new Ajv({ strict: false });
const validate = (schema, value) => ajv.validate(schema, value);

const checks = {
  async models() {
    const list = [];
    for await (const m of client.models.list()) list.push(m);
    check(list.length === 1 && list[0].id === model && list[0].object === "model", "models", list);
  },

  async completion_and_stream() {
    const body = { model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 };
    const whole = await client.completions.create(body);
    check(whole.object === "text_completion" && whole.choices.length === 1, "shape", whole);
    const c = whole.choices[0];
    check(c.finish_reason === "length" && c.text.length > 0, "finish", c);
    check(whole.usage.completion_tokens === 24 &&
          whole.usage.total_tokens === whole.usage.prompt_tokens + 24, "usage", whole.usage);
    const s = await collect(await client.completions.create({ ...body, stream: true,
                                                              stream_options: { include_usage: true } }));
    check(s.texts[0] === c.text, "stream joins to the whole text", [s.texts[0], c.text]);
    check(JSON.stringify(s.finishes) === JSON.stringify({ 0: ["length"] }), "one finish", s.finishes);
    check(s.usage && s.usage.completion_tokens === 24, "stream usage", s.usage);
  },

  async n_and_seed() {
    const body = { model, prompt: "Lily", max_tokens: 12, temperature: 1.0, seed: 42, n: 3 };
    const a = await client.completions.create(body);
    const b = await client.completions.create(body);
    check(a.choices.length === 3 && a.choices.map((x) => x.index).join() === "0,1,2", "n", a.choices);
    check(a.choices.map((x) => x.text).join("|") === b.choices.map((x) => x.text).join("|"),
          "a seed repeats", [a.choices, b.choices]);
    const s = await collect(await client.completions.create({ ...body, stream: true }));
    check([0, 1, 2].every((i) => s.texts[i] === a.choices[i].text), "streamed n = 3", s.texts);
  },

  async stop() {
    const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 80,
                                                temperature: 0, stop: ["."] });
    const c = r.choices[0];
    check(c.finish_reason === "stop" && !c.text.includes("."), "stop string", c);
  },

  async completion_logprobs() {
    const r = await client.completions.create({ model, prompt: "The cat", max_tokens: 6,
                                                temperature: 0, logprobs: 2 });
    const l = r.choices[0].logprobs;
    check(l.tokens.length === 6 && l.token_logprobs.length === 6 && l.top_logprobs.length === 6 &&
          l.text_offset.length === 6, "logprobs lists", l);
    check(l.tokens.join("") === r.choices[0].text, "tokens join to the text", l.tokens);
    check(l.top_logprobs.every((t) => Object.keys(t).length <= 2), "top 2", l.top_logprobs);
  },

  async chat() {
    const messages = [{ role: "system", content: "Tell a story." }, { role: "user", content: "Once" }];
    const r = await client.chat.completions.create({ model, messages, max_completion_tokens: 16,
                                                     temperature: 0, logprobs: true, top_logprobs: 3 });
    check(r.object === "chat.completion" && r.choices[0].message.role === "assistant", "chat", r);
    check(r.usage.completion_tokens === 16, "chat usage", r.usage);
    const content = r.choices[0].logprobs.content;
    check(content.length === 16 && content.every((x) => x.top_logprobs.length === 3),
          "chat logprobs", content);
    check(content.map((x) => x.token).join("") === r.choices[0].message.content, "chat tokens", content);
    const s = await collect(await client.chat.completions.create({
      model, messages, max_completion_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true } }));
    check(s.texts[0] === r.choices[0].message.content, "chat stream", [s.texts[0], r.choices[0]]);
    check(s.usage.completion_tokens === 16, "chat stream usage", s.usage);
    const n2 = await client.chat.completions.create({ model, messages, max_tokens: 8, n: 2,
                                                      temperature: 0 });
    check(n2.choices.length === 2 && n2.choices[0].message.content === n2.choices[1].message.content,
          "greedy n = 2", n2.choices);
  },

  async tool_calls() {
    const weather = { type: "function", function: { name: "get_weather", strict: true, parameters: WEATHER } };
    const now = { type: "function", function: { name: "now", strict: true, parameters: { type: "object", properties: {} } } };
    const messages = [{ role: "user", content: "What is the weather like?" }];
    const body = { model, messages, tools: [weather, now], tool_choice: "required", temperature: 0,
                   max_completion_tokens: 400 };
    // parse(): the arguments of strict tools come back parsed
    const r = await client.chat.completions.parse(body);
    const c = r.choices[0];
    check(c.finish_reason === "tool_calls" && c.message.content === null, "a forced call", c);
    const calls = c.message.tool_calls;
    check(calls.length >= 1 && calls.every((t) => t.type === "function" && t.id.startsWith("call_")),
          "tool calls", calls);
    for (const t of calls) {
      const params = t.function.name === "get_weather" ? WEATHER : now.function.parameters;
      check(t.function.name === "get_weather" || t.function.name === "now", "a known function", t);
      check(validate(params, t.function.parsed_arguments), "arguments valid against the schema", t);
      check(JSON.stringify(JSON.parse(t.function.arguments)) === JSON.stringify(t.function.parsed_arguments),
            "parsed arguments", t);
    }
    // streamed: the client's stream helper assembles the deltas into the same calls
    const stream = client.chat.completions.stream(body);
    const final = await stream.finalChatCompletion();
    const got = final.choices[0].message.tool_calls;
    check(final.choices[0].finish_reason === "tool_calls", "streamed finish", final.choices[0]);
    check(got.length === calls.length && got.every((t, i) => t.function.name === calls[i].function.name &&
          t.function.arguments === calls[i].function.arguments && t.id.startsWith("call_")),
          "streamed calls equal the whole response's", [got, calls]);
    // a named function; one call only
    const named = await client.chat.completions.create({ ...body, tool_choice: { type: "function", function: { name: "now" } } });
    const nc = named.choices[0].message.tool_calls;
    check(nc.length >= 1 && nc.every((t) => t.function.name === "now" && validate(now.function.parameters,
          JSON.parse(t.function.arguments))), "named function", nc);
    const one = await client.chat.completions.create({ ...body, parallel_tool_calls: false });
    check(one.choices[0].message.tool_calls.length === 1, "parallel_tool_calls false", one.choices[0]);
    // the history an agent sends next: the calls, content null, and the results
    const next = [...messages, { role: "assistant", content: null, tool_calls: calls.map((t) =>
      ({ id: t.id, type: "function", function: { name: t.function.name, arguments: t.function.arguments } })) },
      ...calls.map((t) => ({ role: "tool", tool_call_id: t.id, content: "sunny, 21 C" }))];
    const after = await client.chat.completions.create({ model, messages: next, tools: [weather, now],
                                                         max_completion_tokens: 8, temperature: 0 });
    check(after.choices[0].message.role === "assistant", "the history is taken", after.choices[0]);
  },

  async structured_outputs() {
    const body = { model, messages: [{ role: "user", content: "Describe a cat." }], temperature: 0,
                   max_completion_tokens: 400,
                   response_format: { type: "json_schema", json_schema: { name: "cat", strict: true, schema: CAT } } };
    const r = await client.chat.completions.parse(body);
    const m = r.choices[0].message;
    check(r.choices[0].finish_reason === "stop" && validate(CAT, m.parsed), "parsed structured output", m);
    const stream = client.chat.completions.stream(body);
    const final = await stream.finalChatCompletion();
    // (the stream helper parses only zod formats: the content is compared)
    check(final.choices[0].message.content === m.content &&
          JSON.stringify(JSON.parse(final.choices[0].message.content)) === JSON.stringify(m.parsed),
          "streamed structured output", [final.choices[0].message, m]);
    // json_object: any object (stories260K may fill a string until max_tokens cuts it)
    const obj = await client.chat.completions.create({ ...body, response_format: { type: "json_object" } });
    const oc = obj.choices[0];
    check(/^\s*\{/.test(oc.message.content) && (oc.finish_reason === "length" ||
          (oc.finish_reason === "stop" && !Array.isArray(JSON.parse(oc.message.content)))),
          "json_object", oc);
    const bad = { ...body, response_format: { type: "json_schema", json_schema: { name: "x", schema:
      { type: "object", properties: { a: { not: {} } } } } } };
    try {
      await client.chat.completions.create(bad);
      check(false, "a schema with an unsupported keyword is refused");
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.param === "response_format" &&
            e.message.includes("/properties/a"), "the refusal names the part", { status: e.status, message: e.message, param: e.param });
    }
  },

  async errors() {
    const expect = async (fn, Cls, status, what) => {
      try {
        await fn();
      } catch (e) {
        check(e instanceof Cls && e.status === status, what, { name: e.constructor.name, status: e.status,
                                                               message: e.message });
        return e;
      }
      check(false, `${what}: no error`);
    };
    await expect(() => client.completions.create({ model: "no-such-model", prompt: "a" }),
                 OpenAI.NotFoundError, 404, "unknown model");
    const e = await expect(() => client.completions.create({ model, prompt: "a", temperature: -1 }),
                           OpenAI.BadRequestError, 400, "bad temperature");
    check(e.param === "temperature", "the field is named", e.error);
    const wrong = new OpenAI({ baseURL, apiKey: apiKey + "x", maxRetries: 0 });
    await expect(() => wrong.models.list(), OpenAI.AuthenticationError, 401, "wrong key");
  },
};

for (const [name, fn] of Object.entries(checks)) {
  await fn();
  console.log(`ok: ${name}`);
}
