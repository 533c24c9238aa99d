// Validates constrained outputs with independent checkers: reads one JSON object per line
// from standard input, {"kind": "json", "schema": ..., "text": "..."} (JSON.parse, then ajv
// 2020-12 with ajv-formats) or {"kind": "regex", "regex": "...", "text": "..."} (a JavaScript
// RegExp matching the whole text), and prints one line per input: "ok" or "FAIL: why".
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import readline from "node:readline";

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  let out = "ok";
  if (c.kind === "json") {
    let v;
    try {
      v = JSON.parse(c.text);
    } catch (e) {
      out = `FAIL: not JSON (${e.message})`;
    }
    if (out === "ok") {
      const check = ajv.compile(c.schema);
      if (!check(v)) out = `FAIL: ${ajv.errorsText(check.errors)}`;
    }
  } else if (c.kind === "regex") {
    if (!new RegExp(`^(?:${c.regex})$`, "u").test(c.text)) out = "FAIL: no full match";
  } else {
    out = `FAIL: unknown kind ${c.kind}`;
  }
  console.log(out);
}
