// tests/oracle/bench_tokenizer.mjs - encode throughput of the oracle, @lenml/tokenizers 3.7.2
// (transformers.js' tokenizers), on the same text and in the same way as
// bench/internal/tokenizer/bench_tokenizer: the file repeated (joined by "\n") to at least
// MIN_BYTES, encoded whole (no special tokens) repeatedly for SECONDS, best of the repeats in
// CPU time (process.cpuUsage: user + system; node runs the encode on one thread) and wall time.
//
//   cd tests/oracle && npm ci
//   node bench_tokenizer.mjs TOKENIZER_DIR TEXT_FILE [SECONDS=2] [MIN_BYTES=1000000]
//   e.g. node bench_tokenizer.mjs ../../../shared/models/llama3 /usr/share/common-licenses/GPL-3
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, textFile, secondsArg, minArg] = process.argv.slice(2);
if (!dir || !textFile) {
  console.error("usage: node bench_tokenizer.mjs TOKENIZER_DIR TEXT_FILE [SECONDS] [MIN_BYTES]");
  process.exit(2);
}
const seconds = Number(secondsArg ?? 2), minBytes = Number(minArg ?? 1000000);
const t0 = performance.now();
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const loadS = (performance.now() - t0) / 1000;

const unit = fs.readFileSync(textFile);
let parts = [unit], bytes = unit.length;
while (bytes < minBytes) {
  parts.push(Buffer.from("\n"), unit);
  bytes += unit.length + 1;
}
const text = Buffer.concat(parts).toString("utf8");

let bestCpu = Infinity, bestWall = Infinity, ids = 0, reps = 0;
const start = performance.now();
do {
  const c0 = process.cpuUsage(), w0 = performance.now();
  ids = tok.encode(text, { add_special_tokens: false }).length;
  const c = process.cpuUsage(c0), w = (performance.now() - w0) / 1000;
  bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
  bestWall = Math.min(bestWall, w);
} while (++reps < 3 || (performance.now() - start) / 1000 < seconds);

console.log(`oracle=@lenml/tokenizers 3.7.2\nnode=${process.version}\ntokenizer=${dir}`);
console.log(`load_s=${loadS.toFixed(3)}\ntext=${textFile}\ntext_bytes=${bytes}\nids=${ids}`);
console.log(`encode_cpu_s=${bestCpu.toFixed(4)}\nencode_wall_s=${bestWall.toFixed(4)}`);
console.log(`encode_MB_per_s=${(bytes / bestCpu / 1e6).toFixed(2)}`);
console.log(`encode_wall_MB_per_s=${(bytes / bestWall / 1e6).toFixed(2)}`);
