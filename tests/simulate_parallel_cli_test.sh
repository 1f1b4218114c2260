#!/bin/bash
# simulate with tensor, context and pipeline parallelism: the issue's two
# acceptance commands print the step time, MFU, each stage's memory and the
# bubble; ZB-H1, the kernel stacks, JSON and the pictures of a pipeline;
# bad combinations are one line on stderr, exit code 2.
source tests/simulate_cli_lib.sh  # bin, t, fail; run, bad, has
stages() {  # stages NAME N: the last output has N stage rows
  local n
  n=$(grep -cE '^[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9]+ +[0-9.]+ +\(' "$t/out")
  [[ $n -eq $2 ]] || { echo "FAIL $1: $n stage rows, want $2"; cat "$t/out"; fail=1; }
}

j405=(--model=llama3-405b --cluster=h100 --gpus=16384 --seq=8192 --global-batch=2048 --tp=8 --pp=16)
run accept-405b 0 "${j405[@]}" --pp-schedule=1f1b
has accept-405b '^baton +[0-9.]+ .*% .*(yes|NO)$'
has accept-405b '^# pipeline: bubble [0-9.]+% '
stages accept-405b 16
cat "$t/out"
run accept-70b 0 --model=llama3-70b --cluster=h100 --gpus=1024 --seq=8192 --global-batch=1024 \
  --tp=8 --pp=8 --vpp=5 --pp-schedule=interleaved
has accept-70b '^# mesh: pp=8 dp_replicate=1 dp_shard=16 hpz=1 cp=1 tp=8; 64 micro-batches'
has accept-70b '^# pipeline: bubble [0-9.]+% '
stages accept-70b 8
cat "$t/out"
run zb 0 "${j405[@]}" --pp-schedule=zb-h1 --sp --json
stages zb 16
tail -n 1 "$t/out" | python3 -c '
import json, sys
row = json.load(sys.stdin)["policies"][0]
p = row["pipeline"]
assert len(p["stages"]) == 16 and 0 < p["bubble"] < 1, p
assert all(s["peak_memory_bytes"] > 0 for s in p["stages"]), p
print("zb-h1 step", row["step_time_s"], "bubble", p["bubble"])' || { echo "FAIL zb json"; fail=1; }

# Context parallelism, overlapped TP, the kernel stacks, pictures.
small=(--model=llama3-8b --cluster=h100 --gpus=16 --seq=32768 --global-batch=8)
run cp 0 "${small[@]}" --tp=4 --sp --tp-overlap --cp=2 --pp=2 --trace="$t/pp.json" --svg="$t/pp.svg"
has cp '^# mesh: pp=2 dp_replicate=1 dp_shard=1 hpz=1 cp=2 tp=4'
python3 - "$t/pp.json" <<'PY' || { echo "FAIL trace"; fail=1; }
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
procs = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
assert procs == {"stage 0 (its ranks are alike)", "stage 1 (its ranks are alike)"}, procs
assert any(e.get("ph") == "X" and e["name"].startswith("SEND") for e in ev)
PY
grep -q 'stage 1 compute' "$t/pp.svg" || { echo "FAIL svg: no stage lanes"; fail=1; }
run compiled-fp8 0 "${small[@]}" --tp=8 --sp --kernel-stack=compiled --gemm-dtype=fp8
has compiled-fp8 '^# kernel stack: compiled, fp8 GEMMs'
bad fp8-a100 'no FP8 tensor cores' --cluster=a100 --gemm-dtype=fp8
bad stack-name '--kernel-stack must be eager or compiled' --kernel-stack=jit

# Bad combinations: one line, exit 2.
bad tp-heads 'must divide the model' --model=llama3-8b --gpus=24 --global-batch=24 --tp=3
bad tp-kv-heads 'KV heads' --model=llama3-70b --gpus=16 --global-batch=16 --tp=16 --tp-across-nodes
bad tp-node 'larger than a node' --model=llama2-7b --gpus=16 --global-batch=16 --tp=16
bad pp-layers 'more than the model' --model=tiny --gpus=8 --global-batch=8 --pp=8
bad mesh-gpus 'does not divide it' --model=llama3-8b --gpus=16 --global-batch=16 --tp=8 --pp=3
bad sp-alone '--sp and --tp-overlap need --tp' --sp
bad vpp-alone '--vpp needs --pp-schedule=interleaved' --vpp=2 --pp=2 --pp-schedule=1f1b
bad interleaved-m 'multiple of --pp' --model=llama3-8b --gpus=4 --global-batch=6 --pp=4 --vpp=2
bad cp-seq '2 x --cp' --model=llama3-8b --gpus=2 --global-batch=2 --seq=8191 --cp=2
bad schedule-name 'pipeline schedule must be' --pp=2 --pp-schedule=gpipe
bad tune-mesh '--tune searches the mesh' --tune --tp=2

if [[ $fail -ne 0 ]]; then echo FAILED; exit 1; fi
echo PASSED
