#!/usr/bin/env bash
# Fuzzes the loaders and parsers with libFuzzer: scripts/fuzz.sh [SECONDS [TARGET...]]
#   SECONDS  per target (default 20); TARGET names (default: all of them)
#   env FUZZ_BUILD_DIR  build directory (default build-fuzz)
# Configures a clang build with ASan+UBSan (UB fatal) and -fsanitize=fuzzer-no-link on the
# library (coverage), builds tests/fuzz, writes the seed corpora (fuzz_seeds; tokenizer seeds
# trained with spm_train), then runs each target on its corpus. A crash, sanitizer report,
# leak, timeout or out-of-memory fails the run; the reproducer lands in
# BUILD/fuzz-artifacts/. New corpus entries accumulate in BUILD/fuzz-corpus/TARGET, so later
# runs start where earlier ones stopped. Ends with one "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_llama2c fuzz_gguf fuzz_safetensors fuzz_hf_index fuzz_tokenizer
  fuzz_tokenizer_json fuzz_prompts fuzz_config fuzz_fields fuzz_template fuzz_sse fuzz_server
  fuzz_plan fuzz_grammar fuzz_schema fuzz_logits fuzz_kvevents fuzz_reply)
dir="${FUZZ_BUILD_DIR:-build-fuzz}"

if [ ! -f "$dir/build.ninja" ]; then
  flags="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all"
  CC=clang CXX=clang++ meson setup "$dir" -Dfuzz=true -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dc_args="$flags" -Dcpp_args="$flags" >"$dir.setup.log" 2>&1 ||
    { cat "$dir.setup.log"; echo "fuzz: meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
  rm -f "$dir.setup.log"
fi
exes=()
for t in "${targets[@]}"; do exes+=("tests/fuzz/$t"); done
ninja -C "$dir" -j2 "${exes[@]}" tests/fuzz/fuzz_seeds >/dev/null ||
  { ninja -C "$dir" -j1 "${exes[@]}" tests/fuzz/fuzz_seeds; echo "0 passed, 1 failed"; exit 1; }

seeds="$dir/fuzz-seeds"
rm -rf "$seeds"
"$dir/tests/fuzz/fuzz_seeds" "$seeds" >/dev/null || { echo "fuzz: seeds failed"; exit 1; }
mkdir -p "$seeds/tokenizer"
train() { # name, extra spm_train flags
  local name="$1"; shift
  python3 tests/data/train_tokenizer.py "$(command -v spm_train)" "$seeds/tokenizer/$name.model" \
    --input=tests/data/tok_corpus.txt --split_digits=true --unk_id=0 --pad_id=-1 \
    --normalization_rule_name=identity "$@"
}
# tok512-like (the shape of ../shared/models/tok512.model: 512 pieces, BOS 1, EOS 2) and a few
# variants; rare characters are dropped (coverage < 1) so the byte pieces fit small vocabularies
train tok512 --vocab_size=512 --model_type=bpe --bos_id=1 --eos_id=2 --byte_fallback=true \
  --character_coverage=0.98 || exit 1
train uni300 --vocab_size=300 --model_type=unigram --bos_id=1 --eos_id=2 \
  --character_coverage=0.99 || exit 1
train nobos --vocab_size=260 --model_type=bpe --bos_id=-1 --eos_id=-1 \
  --character_coverage=0.99 --user_defined_symbols='<sep>' || exit 1
cp "$dir"/tests/tokenizer/tok_*.model "$seeds/tokenizer/" 2>/dev/null || true
# chat templates: the fixtures' real templates and construct cases
python3 - "$seeds/template" <<'PY' || { echo "fuzz: template seeds failed"; exit 1; }
import glob, json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
srcs = [json.load(open(f))["chat_template"] for f in sorted(glob.glob("tests/data/templates/*.tokenizer_config.json"))]
srcs += [c["template"] for c in json.load(open("tests/data/templates/constructs.json"))["cases"]]
for i, s in enumerate(srcs):
    open(os.path.join(out, "t%03d" % i), "w", encoding="utf-8").write(s)
PY
# tokenizer.json seeds: the committed Llama-2 style conversions and small ones that between
# them use every supported component
mkdir -p "$seeds/tokenizer_json"
cp tests/fuzz/tokenizer_json/*.json "$seeds/tokenizer_json/"
for d in tok512_hf tok512_meta; do cp "tests/data/$d/tokenizer.json" "$seeds/tokenizer_json/$d.json"; done
# bench serve's streamed responses: the committed ones (first byte: the read size)
mkdir -p "$seeds/sse"
cp tests/fuzz/sse/* "$seeds/sse/"
# request bodies for the server's parser (first byte: which endpoint)
mkdir -p "$seeds/server"
cp tests/fuzz/server/*.txt "$seeds/server/"
# grammars (GBNF, a NUL, output bytes) and schemas / regexes (first byte: which)
for d in grammar schema; do mkdir -p "$seeds/$d"; cp tests/fuzz/$d/* "$seeds/$d/"; done
# pagellm perplexity's saved-logits files (tools/ppl_logits.h): small valid ones
mkdir -p "$seeds/logits"
python3 - "$seeds/logits" <<'PY'
import os, struct, sys
out = sys.argv[1]
for i, (vocab, ctx, windows) in enumerate([(3, 4, 1), (5, 6, 2), (2, 2, 3), (7, 9, 1)]):
    first = ctx // 2
    rows = windows * (ctx - 1 - first)
    b = b"PLLOGITS" + struct.pack("<6I", 1, vocab, ctx, windows, first, 0)
    b += struct.pack("<%di" % (windows * ctx), *[(k * 7) % vocab for k in range(windows * ctx)])
    b += struct.pack("<%df" % (rows * vocab), *[-1.0 - k for k in range(rows * vocab)])
    open(os.path.join(out, "l%d" % i), "wb").write(b)
PY
# --kv-events-config texts (first byte even) and event lists for the encoder (odd)
mkdir -p "$seeds/kvevents"
cp tests/fuzz/kvevents/* "$seeds/kvevents/"
# chat replies for the reply parsers (byte 0: the syntaxes, byte 1: the piece size)
mkdir -p "$seeds/reply"
cp tests/fuzz/reply/* "$seeds/reply/"
# the engine behind fuzz_prompts tokenizes text prompts with the tok512-like model
export PL_FUZZ_TOKENIZER="$(realpath "$seeds/tokenizer/tok512.model")"

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
pass=0 fail=0
summary=()
for t in "${targets[@]}"; do
  corpus="$dir/fuzz-corpus/$t"
  art="$dir/fuzz-artifacts"
  mkdir -p "$corpus" "$art"
  case "$t" in
    fuzz_llama2c) sd=llama2c ;; fuzz_gguf) sd=gguf ;; fuzz_safetensors) sd=safetensors ;; fuzz_hf_index) sd=hf_index ;;
    fuzz_tokenizer) sd=tokenizer ;; fuzz_tokenizer_json) sd=tokenizer_json ;;
    fuzz_prompts) sd=prompts ;; fuzz_config) sd=config ;; fuzz_fields) sd=fields ;;
    fuzz_template) sd=template ;; fuzz_sse) sd=sse ;; fuzz_server) sd=server ;;
    fuzz_plan) sd=plan ;;
    fuzz_grammar) sd=grammar ;; fuzz_schema) sd=schema ;;
    fuzz_logits) sd=logits ;;
    fuzz_kvevents) sd=kvevents ;;
    fuzz_reply) sd=reply ;;
    *) echo "fuzz: unknown target $t"; fail=$((fail + 1)); continue ;;
  esac
  log="$dir/fuzz-$t.log"
  extra=()
  [ "$t" = fuzz_template ] && extra=(-dict=tests/fuzz/template.dict)
  [ "$t" = fuzz_server ] && extra=(-dict=tests/fuzz/server.dict)
  "$dir/tests/fuzz/$t" "${extra[@]}" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$art/$t-" \
    "$corpus" "$seeds/$sd" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[^ ]+')
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
    summary+=("PASS $t: ${execs:-?} executions, ${last:-?}")
  else
    fail=$((fail + 1))
    summary+=("FAIL $t (exit $rc): see $log; reproducer in $art/")
    grep -E 'ERROR|SUMMARY|runtime error|fuzz_|Test unit written' "$log" | head -20
  fi
done
printf '%s\n' "${summary[@]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
