#!/bin/bash
# tools/whole_step.py (whole steps on one GPU against simulate --gpus=1) on
# the host: with measured figures replayed from a file, its simulated column
# is what simulate prints for a Llama config written here from the same
# shape, its error is simulated / measured - 1, a kernel table adds a
# column; bad input is one line on stderr, exit 2. tools/torch_step.py
# compiles and refuses bad shapes before it needs PyTorch or a GPU.
set -u
whole="$1" torch_step="$2" simulate="$3" table="$4"
fail=0
T="$TEST_TMPDIR"
check() {  # check NAME EXPECTED_RC PATTERN CMD...: exit code; for 2, one stderr line matching;
           # for 1, a FAILED line on stdout matching
  local name="$1" want="$2" pat="$3"
  shift 3
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$T/out" "$T/err"; fail=1; return
  fi
  if [[ $want -eq 2 ]] && { [[ $(wc -l <"$T/err") -ne 1 ]] || ! grep -q -- "$pat" "$T/err"; }; then
    echo "FAIL $name: want one line on stderr matching '$pat', got:"; cat "$T/err"; fail=1; return
  fi
  if [[ $want -eq 1 ]] && ! grep -q -- "^FAILED: .*$pat" "$T/out"; then
    echo "FAIL $name: want a FAILED line matching '$pat', got:"; cat "$T/out"; fail=1; return
  fi
  echo "ok   $name: $(head -c 160 "$T/err")"
}

# The simulated step of two shapes, from configs written here (tiny8 and
# llama-3b of tools/whole_step.py SHAPES).
sim_ms() {  # sim_ms LAYERS HIDDEN HEADS KV FFN VOCAB SEQ BATCH [simulate flags]
  printf '{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": %d, "hidden_size": %d,
    "num_attention_heads": %d, "num_key_value_heads": %d, "intermediate_size": %d,
    "vocab_size": %d, "tie_word_embeddings": false}' "$1" "$2" "$3" "$4" "$5" "$6" >"$T/cfg.json"
  "$simulate" --hf-config="$T/cfg.json" --gpus=1 --seq="$7" --global-batch="$8" \
    --micro-batch="$8" --policy=ddp --recompute-layers=0 --json "${@:9}" | tail -n 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["policies"][0]["step_time_s"] * 1e3)'
}
tiny=$(sim_ms 8 1024 16 4 2816 32000 1024 8)
big=$(sim_ms 28 3072 24 8 8192 128256 2048 1)
tiny_k=$(sim_ms 8 1024 16 4 2816 32000 1024 8 --kernel-table="$table")
echo "simulated here: tiny8 $tiny ms, llama-3b $big ms, tiny8 with the table file $tiny_k ms"

# Measured = 2x simulated: every error is -50%.
python3 - "$tiny" "$big" >"$T/measured.jsonl" <<'PY'
import json, sys
t, b = map(float, sys.argv[1:])
print(json.dumps({"name": "tiny8", "step_ms": 2 * t, "params": 1, "tokens": 8192}))
print(json.dumps({"name": "llama-3b", "step_ms": 2 * b}))
PY
check replay 0 "" python3 "$whole" --simulate="$simulate" --measured="$T/measured.jsonl" \
  --shapes=tiny8,llama-3b --kernel-table="$table" --json="$T/rows.json"
cat "$T/out"
python3 - "$T/rows.json" "$tiny" "$big" "$tiny_k" <<'PY' || { echo "FAIL replay: rows"; fail=1; }
import json, sys
rows = json.load(open(sys.argv[1]))
tiny, big, tiny_k = map(float, sys.argv[2:])
assert [r["name"] for r in rows] == ["tiny8", "llama-3b"], rows
for r, want in zip(rows, (tiny, big)):
    assert abs(r["simulated_ms_shipped"] - want) <= 1e-9 * want, (r, want)
    assert abs(r["error_shipped"] + 0.5) < 1e-9, r
    assert r["simulated_ms_measured"] > 0, r
assert abs(rows[0]["simulated_ms_measured"] - tiny_k) <= 1e-9 * tiny_k, rows[0]
assert big > tiny > 0
PY
grep -q "shipped table: 2 shapes, mean |error| 50.0%" "$T/out" ||
  { echo "FAIL replay: summary line"; fail=1; }

# Bad input.
printf '{"name": "tiny8", "step_ms": -1}\n' >"$T/neg.jsonl"
printf '{"name": "tiny8", "step_ms": true}\n' >"$T/bool.jsonl"
printf '{"name": "tiny8", "step_ms": 5}\nnot json\n' >"$T/garbage.jsonl"
printf '{"name": "tiny8", "step_ms": 5}\n' >"$T/one.jsonl"
printf 'not a table' >"$T/bad_table.json"
w=(python3 "$whole" --simulate="$simulate")
check no-file 2 "cannot read" "${w[@]}" --measured="$T/none.jsonl"
check negative 2 '"step_ms" must be a number of at least 0.001, got -1' "${w[@]}" --measured="$T/neg.jsonl" --shapes=tiny8
check boolean 2 '"step_ms" must be a number of at least 0.001, got true' "${w[@]}" --measured="$T/bool.jsonl" --shapes=tiny8
check not-json 2 "line 2: not JSON" "${w[@]}" --measured="$T/garbage.jsonl"
check missing-row 2 "no row for llama-1b, llama-3b" "${w[@]}" --measured="$T/one.jsonl"
check unknown-shape 2 "unknown llama-9b" "${w[@]}" --measured="$T/one.jsonl" --shapes=tiny8,llama-9b
check no-table 2 "no file" "${w[@]}" --measured="$T/one.jsonl" --shapes=tiny8 --kernel-table="$T/none.json"
check bad-table 1 "tiny8: simulate exit 2: simulate: kernel table" "${w[@]}" --measured="$T/one.jsonl" --shapes=tiny8 --kernel-table="$T/bad_table.json"

# Measuring through --torch-step (a stand-in here: PyTorch's step needs a
# GPU): its JSON line is read; a shape whose step fails is named on a
# FAILED line, the others are still compared, exit 1.
cat >"$T/stub_step.py" <<'PY'
import json, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
if args["name"] == "llama-1b":
    print("torch_step: llama-1b does not fit on this GPU: out of memory", file=sys.stderr)
    sys.exit(2)
print("warming up")
print(json.dumps({"name": args["name"], "step_ms": 123.0, "params": 7,
                  "tokens": int(args["seq"]) * int(args["batch"]), "gpu": "stand-in"}))
PY
check stub-step 1 "llama-1b: torch_step exit 2: torch_step: llama-1b does not fit" python3 "$whole" --simulate="$simulate" --torch-step="$T/stub_step.py" \
  --json="$T/stub.json"
python3 - "$T/stub.json" "$tiny" "$big" <<'PY' || { echo "FAIL stub-step: rows"; fail=1; }
import json, sys
rows = json.load(open(sys.argv[1]))
tiny, big = map(float, sys.argv[2:])
assert [r["name"] for r in rows] == ["tiny8", "llama-3b"], rows
for r, want in zip(rows, (tiny, big)):
    assert r["measured_ms"] == 123.0 and r["gpu"] == "stand-in", r
    assert abs(r["error_shipped"] - (want / 123.0 - 1)) < 1e-9, (r, want)
PY
printf '{"name": "tiny8", "step_ms": 5, "tokens": 4096}\n' >"$T/wrong_tokens.jsonl"
check wrong-tokens 2 "measured with 4096 tokens per step, the shape has 8192" \
  python3 "$whole" --simulate="$simulate" --measured="$T/wrong_tokens.jsonl" --shapes=tiny8
check bad-flag 2 "unrecognized arguments" python3 "$whole" --simulate="$simulate" \
  --measured="$T/one.jsonl" --no-such-flag

# torch_step.py: compiles; refuses bad shapes before importing PyTorch; with
# a good one it needs PyTorch and a GPU, and says which is missing.
python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$torch_step" ||
  { echo "FAIL torch_step: does not compile"; fail=1; }
ok=(--layers=2 --hidden=64 --heads=4 --kv-heads=2 --ffn=128 --vocab=256 --seq=16 --batch=2)
check zero-layers 2 "--layers must be positive, got 0" python3 "$torch_step" "${ok[@]}" --layers=0
check kv-heads 2 "not a multiple of --kv-heads" python3 "$torch_step" "${ok[@]}" --kv-heads=3
check bad-flag 2 "unrecognized arguments" python3 "$torch_step" "${ok[@]}" --no-such-flag
check odd-head-dim 2 "must be even for RoPE" python3 "$torch_step" "${ok[@]}" --hidden=60 --heads=4 --kv-heads=4
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check no-gpu 2 "PyTorch is not importable\|no CUDA device" python3 "$torch_step" "${ok[@]}"
fi

[[ $fail -eq 0 ]] && echo PASS
exit $fail
