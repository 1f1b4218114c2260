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
exit $fail
