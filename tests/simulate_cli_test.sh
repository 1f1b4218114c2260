#!/bin/bash
# The simulate command: its default run, its JSON line, its pictures, and
# bad input (one line on stderr, exit code 2).
set -u
bin="$1"
fail=0
check() {  # check NAME EXPECTED_RC ARGS...
  local name="$1" want="$2"
  shift 2
  "$bin" "$@" >"$TEST_TMPDIR/out" 2>"$TEST_TMPDIR/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$TEST_TMPDIR/err"; fail=1; return
  fi
  if [[ $want -eq 2 ]]; then
    if [[ $(wc -l <"$TEST_TMPDIR/err") -ne 1 || ! -s "$TEST_TMPDIR/err" ]]; then
      echo "FAIL $name: want one line on stderr, got:"; cat "$TEST_TMPDIR/err"; fail=1; return
    fi
  fi
  echo "ok   $name: $(head -c 160 "$TEST_TMPDIR/err")"
}
check default 0
grep -q '^yafsdp ' "$TEST_TMPDIR/out" || { echo "FAIL default: no yafsdp row"; fail=1; }
check json 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton --json \
  --svg="$TEST_TMPDIR/step.svg" --trace="$TEST_TMPDIR/trace.json"
tail -n 1 "$TEST_TMPDIR/out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
p = d["policies"][0]
assert d["model"] == "llama3-8b" and d["gpus"] == 64, d
for k in ("policy", "step_time_s", "mfu", "exposed_comm_s", "peak_memory_bytes", "fits"):
    assert k in p, k
assert p["step_time_s"] > 0 and 0 < p["mfu"] < 1, p
' || { echo "FAIL json: last line"; fail=1; }
grep -q '<svg' "$TEST_TMPDIR/step.svg" || { echo "FAIL svg"; fail=1; }
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
assert any(e["ph"] == "X" for e in ev) and any(e["ph"] == "C" for e in ev)
' "$TEST_TMPDIR/trace.json" || { echo "FAIL trace"; fail=1; }
check unknown-model 2 --model=llama9-1t
check unknown-cluster 2 --cluster=tpu
check zero-gpus 2 --gpus=0
check negative-seq 2 --seq=-5
check batch-divides 2 --gpus=128 --global-batch=100
check micro-batch 2 --gpus=128 --global-batch=256 --micro-batch=3
check unknown-policy 2 --policy=megatron
check recompute 2 --recompute-layers=500
check unknown-flag 2 --warp=9
check hf-missing 2 --hf-config=/nonexistent/config.json
echo '{"architectures": ["GPT2LMHeadModel"]}' >"$TEST_TMPDIR/config.json"
check hf-unsupported 2 --hf-config="$TEST_TMPDIR/config.json"
echo '{"nic_gbps": 0}' >"$TEST_TMPDIR/cluster.json"
check cluster-file 2 --cluster-file="$TEST_TMPDIR/cluster.json"
printf '# Collective test starting: all_gather_perf\n  1048576 32768 float none -1 30.1 34.8 30.5 0 29.8 35.2 30.8 0\n 268435456 8388608 float none -1 1012 265 232 0 1010 265 232 0\n' >"$TEST_TMPDIR/ag.txt"
check calibration 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton \
  --calibration="$TEST_TMPDIR/ag.txt"
grep -q '^# calibration: all_gather from 2 measured sizes' "$TEST_TMPDIR/out" || { echo "FAIL calibration header"; fail=1; }
echo 'nothing here' >"$TEST_TMPDIR/bad.txt"
check calibration-bad 2 --calibration="$TEST_TMPDIR/bad.txt"
table='{"gpu": "test", "launch_overhead_us": 5,
 "gemm": [{"m": 4096, "n": 4096, "k": 4096, "s": 0.0004}],
 "sdpa": [{"batch": 1, "heads": 32, "kv_heads": 8, "seq": 8192, "head_dim": 128, "fwd_s": 0.004, "bwd_s": 0.01}],
 "elementwise": [{"op": "rmsnorm", "bytes_fwd": 67108864, "fwd_s": 5e-5, "bwd_s": 1e-4},
  {"op": "swiglu", "bytes_fwd": 270532608, "fwd_s": 3e-4, "bwd_s": 1e-3},
  {"op": "cross_entropy", "bytes_fwd": 262144000, "fwd_s": 1e-3, "bwd_s": 1.5e-3}],
 "adamw": [{"params": 16777216, "s": 3e-4}]}'
echo "$table" >"$TEST_TMPDIR/kernels.json"
check kernel-table 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton \
  --kernel-table="$TEST_TMPDIR/kernels.json"
grep -q '^# kernel table: test (1 GEMM shapes' "$TEST_TMPDIR/out" || { echo "FAIL kernel-table header"; fail=1; }
check kernel-table-via-calibration 0 --model=llama3-8b --gpus=64 --global-batch=64 \
  --policy=baton --calibration="$TEST_TMPDIR/kernels.json"
grep -q '^# kernel table: test' "$TEST_TMPDIR/out" || { echo "FAIL calibration kernel header"; fail=1; }
echo "${table/\"s\": 0.0004/\"s\": \"fast\"}" >"$TEST_TMPDIR/kernels_bad.json"
check kernel-table-type 2 --kernel-table="$TEST_TMPDIR/kernels_bad.json"
grep -q 'gemm\[0\]."s" must be a number, got string' "$TEST_TMPDIR/err" || { echo "FAIL kernel-table-type message"; fail=1; }
check kernel-table-type-calibration 2 --calibration="$TEST_TMPDIR/kernels_bad.json"
echo "${table/\"swiglu\"/\"gelu\"}" >"$TEST_TMPDIR/kernels_noop.json"
check kernel-table-missing-op 2 --model=llama3-8b --gpus=64 --global-batch=64 \
  --policy=baton --kernel-table="$TEST_TMPDIR/kernels_noop.json"
check kernel-table-missing 2 --kernel-table=/nonexistent/kernels.json
exit $fail
