// The conversations each chat template is rendered with (gen_template_fixtures.mjs): every
// family gets the common ones (system or none, several turns, add_generation_prompt on and off,
// unicode, empty content, template-looking text), plus tools, tool calls and tool results in
// the shape its template expects, and the error cases its template raises on.
const weather = {
  type: "function",
  function: {
    name: "get_current_weather",
    description: "Get the current weather in a given location",
    parameters: {
      type: "object",
      properties: {
        location: { type: "string", description: "The city and state, e.g. San Francisco, CA" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["location"],
    },
  },
};
const search = {
  type: "function",
  function: {
    name: "web_search",
    description: "Search the web for \"anything\" \u2014 fast, in any language (\u65e5\u672c\u8a9e ok).",
    parameters: {
      type: "object",
      properties: {
        query: { type: "string" },
        max_results: { type: "integer", default: 5, minimum: 1.5 },
        safe: { type: "boolean", default: true },
      },
      required: ["query"],
    },
    return: { type: "string", description: "the results" },
  },
};
const tools = [weather, search];

const sys = { role: "system", content: "You are a helpful assistant.\nAnswer briefly." };
const u1 = { role: "user", content: "What is the capital of France?" };
const a1 = { role: "assistant", content: "The capital of France is Paris." };
const u2 = { role: "user", content: "And of Japan?" };
const a2 = { role: "assistant", content: "Tokyo." };
const u3 = { role: "user", content: "Thanks!" };
const unicode = {
  role: "user",
  content: "  Caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \u0645\u0631\u062d\u0628\u0627 \ud83d\ude00\ud83d\udc4d\ud83c\udffd e\u0301 \u00a0tab\there\n\n",
};
const templateish = { role: "user", content: "Literal {{ x }} {% if %} <|im_start|> [INST] </s> \\n" };

const common = [
  { name: "single_user_gen", messages: [u1], add_generation_prompt: true },
  { name: "single_user_nogen", messages: [u1], add_generation_prompt: false },
  { name: "system_multi_turn_gen", messages: [sys, u1, a1, u2, a2, u3], add_generation_prompt: true },
  { name: "system_multi_turn_nogen", messages: [sys, u1, a1, u2], add_generation_prompt: false },
  { name: "no_system_multi_turn", messages: [u1, a1, u2], add_generation_prompt: true },
  { name: "ends_with_assistant", messages: [u1, a1], add_generation_prompt: false },
  { name: "unicode_and_whitespace", messages: [sys, unicode, a1, unicode], add_generation_prompt: true },
  { name: "template_looking_text", messages: [templateish], add_generation_prompt: true },
  { name: "empty_content", messages: [{ role: "user", content: "" }], add_generation_prompt: true },
];

// Llama 3.1 / 3.2: one tool call per message, results as role "tool" (or "ipython").
function llamaToolCases(dated) {
  const extra = dated ? { date_string: "26 Jul 2024" } : undefined;
  const call = {
    role: "assistant",
    tool_calls: [{ type: "function", function: { name: "get_current_weather", arguments: { location: "Paris, France", unit: "celsius" } } }],
  };
  return [
    { name: "tools_in_user_message", messages: [sys, u1], tools, add_generation_prompt: true, extra },
    { name: "tools_in_system", messages: [u1], tools, add_generation_prompt: true, extra: { ...extra, tools_in_user_message: false } },
    { name: "tool_call_and_result", messages: [u1, call, { role: "tool", content: { temperature: 21.5, unit: "celsius" } }, { role: "assistant", content: "It is 21.5 \u00b0C." }], tools, add_generation_prompt: true, extra },
    { name: "tool_result_text_ipython", messages: [u1, call, { role: "ipython", content: "21.5 C" }], tools, add_generation_prompt: true, extra },
    { name: "custom_date", messages: [u1], add_generation_prompt: true, extra: { date_string: "01 Jan 2030" } },
    { name: "error_two_tool_calls", messages: [u1, { role: "assistant", tool_calls: [call.tool_calls[0], call.tool_calls[0]] }], tools, add_generation_prompt: false, extra },
    { name: "error_tools_without_messages", messages: [], tools, add_generation_prompt: true, extra },
  ];
}

function dated(cases) {
  // Llama 3.2 calls strftime_now() unless date_string is given: fix the date
  return cases.map((c) => ({ ...c, extra: { date_string: "26 Jul 2024", ...(c.extra || {}) } }));
}

// ChatML families (Qwen2.5, Qwen3): tool calls with arguments as an object or as a string.
function qwenToolCases() {
  const call = (args) => ({
    role: "assistant",
    content: "",
    tool_calls: [{ type: "function", function: { name: "get_current_weather", arguments: args } }],
  });
  const result = (text) => ({ role: "tool", content: text });
  return [
    { name: "tools_no_system", messages: [u1], tools, add_generation_prompt: true },
    { name: "tools_with_system", messages: [sys, u1], tools, add_generation_prompt: true },
    { name: "empty_tools_list", messages: [u1], tools: [], add_generation_prompt: true },
    { name: "tool_call_object_args", messages: [sys, u1, call({ location: "Paris, France" }), result("{\"temperature\": 21.5}"), { role: "assistant", content: "It is 21.5 \u00b0C in Paris." }, u3], tools, add_generation_prompt: true },
    { name: "tool_call_string_args", messages: [u1, call("{\"location\": \"Tokyo\"}"), result("rainy")], tools, add_generation_prompt: true },
    { name: "parallel_tool_calls", messages: [u1, { role: "assistant", content: "Let me check both.", tool_calls: [{ function: { name: "get_current_weather", arguments: { location: "Paris" } } }, { function: { name: "web_search", arguments: { query: "Paris events", max_results: 3 } } }] }, result("sunny"), result("a fair"), u2], tools, add_generation_prompt: true },
  ];
}

function qwen3ThinkingCases() {
  return [
    { name: "enable_thinking_false", messages: [u1], add_generation_prompt: true, extra: { enable_thinking: false } },
    { name: "enable_thinking_true", messages: [u1], add_generation_prompt: true, extra: { enable_thinking: true } },
    { name: "history_with_think_blocks", messages: [u1, { role: "assistant", content: "<think>\nThe user asks about France.\n</think>\n\nParis." }, u2, { role: "assistant", content: "<think>Japan...</think>Tokyo." }], add_generation_prompt: false },
    { name: "reasoning_content_field", messages: [u1, { role: "assistant", content: "Paris.", reasoning_content: "\nEasy one.\n" }, u2], add_generation_prompt: true },
    { name: "multi_step_tool_reasoning", messages: [u1, { role: "assistant", content: "<think>need tool</think>", tool_calls: [{ function: { name: "web_search", arguments: { query: "capital" } } }] }, { role: "tool", content: "<tool_response>x</tool_response>" }, { role: "assistant", content: "<think>\ngot it\n</think>\n\nParis." }], tools, add_generation_prompt: false },
    { name: "error_null_content", messages: [u1, { role: "assistant", content: null, tool_calls: [{ function: { name: "f", arguments: {} } }] }], add_generation_prompt: true },
  ];
}

function mistralCases() {
  const call = { role: "assistant", tool_calls: [{ id: "abcDEF123", type: "function", function: { name: "get_current_weather", arguments: { location: "Paris, France" } } }] };
  const result = { role: "tool", tool_call_id: "abcDEF123", content: "21.5 \u00b0C" };
  return [
    { name: "tools_last_user", messages: [u1, a1, u2], tools, add_generation_prompt: true },
    { name: "system_goes_to_last_user", messages: [sys, u1, a1, u2], tools, add_generation_prompt: false },
    { name: "tool_call_and_result", messages: [u1, call, result, { role: "assistant", content: "  It is 21.5 \u00b0C.  " }, u2], tools, add_generation_prompt: false },
    { name: "tool_result_object_content", messages: [u1, call, { role: "tool", tool_call_id: "abcDEF123", content: { content: "structured" } }], tools, add_generation_prompt: false },
    { name: "error_roles_not_alternating", messages: [u1, u2], add_generation_prompt: true },
    { name: "error_starts_with_assistant", messages: [a1, u1], add_generation_prompt: true },
    { name: "error_unknown_role", messages: [u1, { role: "narrator", content: "x" }], add_generation_prompt: true },
    { name: "error_tool_call_id_length", messages: [u1, { role: "assistant", tool_calls: [{ id: "short", function: { name: "f", arguments: {} } }] }], add_generation_prompt: true },
  ];
}

function tinyllamaCases() {
  return [
    { name: "unknown_role_skipped", messages: [u1, { role: "tool", content: "ignored" }, a1], add_generation_prompt: true },
    { name: "no_messages", messages: [], add_generation_prompt: true },
  ];
}

// Gemma 2 refuses a system role and non-alternating turns; Gemma 3 folds a system message
// into the first user turn and takes list contents (text parts; an image part as its marker).
function gemmaCases(three) {
  const parts = { role: "user", content: [{ type: "text", text: "  Describe " }, { type: "image" }, { type: "text", text: "this.  " }] };
  return [
    { name: "error_roles_not_alternating", messages: [u1, u2], add_generation_prompt: true },
    { name: "error_starts_with_assistant", messages: [a1, u1], add_generation_prompt: true },
    { name: "no_messages", messages: [], add_generation_prompt: true },
    ...(three ? [{ name: "list_content", messages: [sys, parts], add_generation_prompt: true },
                 { name: "system_list_content", messages: [{ role: "system", content: [{ type: "text", text: "Be brief." }] }, u1], add_generation_prompt: true }] : []),
  ];
}

// Phi-3: unknown roles are skipped; without add_generation_prompt the text ends with EOS;
// Phi-3.5 skips an empty system message.
function phi3Cases() {
  return [
    { name: "unknown_role_skipped", messages: [u1, { role: "tool", content: "ignored" }, a1], add_generation_prompt: false },
    { name: "empty_system", messages: [{ role: "system", content: "" }, u1], add_generation_prompt: true },
    { name: "no_messages", messages: [], add_generation_prompt: true },
  ];
}

export function conversations(family) {
  switch (family) {
    case "llama-3.1-8b-instruct":
      return [...common, ...llamaToolCases(false)];
    case "llama-3.2-3b-instruct":
      return dated([...common, ...llamaToolCases(true)]);
    case "qwen2.5-3b-instruct":
      return [...common, ...qwenToolCases(), { name: "no_messages", messages: [], add_generation_prompt: true }];
    case "mistral-7b-instruct-v0.3":
      return [...common, ...mistralCases()];
    case "tinyllama-1.1b-chat-v1.0":
      return [...common, ...tinyllamaCases()];
    case "llama3-real":
      return [...common, { name: "no_messages", messages: [], add_generation_prompt: true }];
    case "qwen3-real":
      return [...common, ...qwenToolCases(), ...qwen3ThinkingCases()];
    case "gemma-2-2b-it":
      return [...common, ...gemmaCases(false)];
    case "gemma-3-1b-it":
      return [...common, ...gemmaCases(true)];
    case "phi-3-mini-4k-instruct":
    case "phi-3.5-mini-instruct":
      return [...common, ...phi3Cases()];
    default:
      throw new Error(`no conversations for ${family}`);
  }
}
