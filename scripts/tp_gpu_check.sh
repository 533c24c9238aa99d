#!/usr/bin/env bash
# Tensor parallelism on a machine with one NVIDIA GPU (docs/distributed.md): what this
# project's CPU-only machines cannot run. scripts/tp_gpu_check.sh [BUILD_DIR] (a CUDA build,
# default build; PAGELLM_TEST_MODELS must hold stories260K). Checks, each printed as it ends:
#   1. the build has NCCL and MPI (`pagellm --version`);
#   2. NCCL with one rank: `pagellm doctor comm` all-reduces on the GPU (the rank-order sum
#      kernel, the grouped sends and the stream wait) give the closed-form sums;
#   3. the engine with one NCCL rank (all-reduces and the logits gather on the device) gives
#      the greedy tokens of a plain `--backend cuda` run;
#   4. two processes sharing the GPU over MPI (`--distributed-backend mpi`: every all-reduce
#      staged through the host) give them too, and `doctor comm` over MPI checks its sums.
# Ends with "N passed, N failed"; exits non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
exe="$build/tools/pagellm"
models="${PAGELLM_TEST_MODELS:?set PAGELLM_TEST_MODELS to the directory holding stories260K.bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model=(-m "$models/stories260K.bin" --tokenizer "$models/tok512.model" --backend cuda)
printf '%s\n' '{"prompt": "Once upon a time", "max_tokens": 120}' \
  '{"prompt": "The little dog", "max_tokens": 80}' \
  '{"prompt_token_ids": [1, 400, 30, 261], "max_tokens": 60}' >"$tmp/prompts.jsonl"
gen=(generate "${model[@]}" --prompts "$tmp/prompts.jsonl" --json --temperature 0)
# the records' tokens and text (timings differ)
tokens() { python3 -c 'import json, sys
for l in sys.stdin:
    r = json.loads(l); print(r["index"], r["output_token_ids"], r["text"])' | sort; }

"$exe" --version | grep -q "nccl (" && "$exe" --version | grep -q "mpi (" &&
  ok "the build has MPI and NCCL: $("$exe" --version | tail -1)" ||
  bad "pagellm --version lists no nccl or no mpi: $("$exe" --version | tail -1)"

if mpirun -n 1 "$exe" doctor comm --backend cuda --distributed-backend nccl \
    --tensor-parallel-size 1 --max-bytes 16777216 >"$tmp/nccl1.txt" 2>&1; then
  ok "doctor comm, NCCL, one rank: $(grep -c ' yes$' "$tmp/nccl1.txt") sizes correct"
else
  bad "doctor comm, NCCL, one rank:"; cat "$tmp/nccl1.txt"
fi

"$exe" "${gen[@]}" 2>"$tmp/one.err" | tokens >"$tmp/one.txt" || { bad "plain cuda run"; cat "$tmp/one.err"; }
mpirun -n 1 "$exe" "${gen[@]}" --distributed-backend nccl --tensor-parallel-size 1 \
  2>"$tmp/nccl.err" | tokens >"$tmp/nccl.txt"
if [ -s "$tmp/one.txt" ] && cmp -s "$tmp/one.txt" "$tmp/nccl.txt"; then
  ok "generate, one NCCL rank: the plain run's tokens"
else
  bad "generate, one NCCL rank differs from the plain run"; diff "$tmp/one.txt" "$tmp/nccl.txt" | head; tail -5 "$tmp/nccl.err"
fi

mpirun -n 2 "$exe" "${gen[@]}" --distributed-backend mpi --tensor-parallel-size 2 \
  2>"$tmp/mpi.err" | tokens >"$tmp/mpi.txt"
if [ -s "$tmp/one.txt" ] && cmp -s "$tmp/one.txt" "$tmp/mpi.txt"; then
  ok "generate, two processes sharing the GPU over MPI: the plain run's tokens"
else
  bad "generate over MPI differs from the plain run (a near tie in f16 can flip a token)"
  diff "$tmp/one.txt" "$tmp/mpi.txt" | head; tail -5 "$tmp/mpi.err"
fi

if mpirun -n 2 "$exe" doctor comm --backend cuda --distributed-backend mpi \
    --tensor-parallel-size 2 --max-bytes 16777216 >"$tmp/mpi2.txt" 2>&1; then
  ok "doctor comm, MPI, two processes: $(grep -c ' yes$' "$tmp/mpi2.txt") sizes correct"
else
  bad "doctor comm, MPI, two processes:"; cat "$tmp/mpi2.txt"
fi
cat "$tmp/nccl1.txt" 2>/dev/null
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
