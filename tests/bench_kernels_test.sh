#!/bin/bash
# //bench:kernels end to end on the host runtime: it writes a kernel table,
# sim/kernel_table parses it and `simulate --calibration` (and
# --kernel-table) accept it and price the step from it; //bench:ops runs and
# ends with one JSON line; bad flags to both are one line on stderr, exit 2.
set -u
kernels="$1" ops="$2" simulate="$3"
fail=0
T="$TEST_TMPDIR"
check() {  # check NAME EXPECTED_RC BINARY ARGS...
  local name="$1" want="$2" bin="$3"
  shift 3
  "$bin" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$T/err"; fail=1; return
  fi
  if [[ $want -eq 2 ]] && [[ $(wc -l <"$T/err") -ne 1 ]]; then
    echo "FAIL $name: want one line on stderr, got:"; cat "$T/err"; fail=1; return
  fi
  echo "ok   $name: $(head -c 160 "$T/err")"
}

# A small table: the micro model, two attention lengths, two AdamW sizes.
small=(--device=host --model=micro --tokens=32 --seqs=16,32 --attention-tokens=32
       --adamw-params=4096,16384 --min-time=0.002)
check kernels 0 "$kernels" "${small[@]}" --out="$T/k.json"
tail -n 1 "$T/out" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["bench"] == "kernels" and s["gpu"] == "host CPU", s
assert s["gemm"] > 0 and s["sdpa"] == 2 and s["adamw"] == 2 and s["elementwise"] == 5, s
' || { echo "FAIL kernels: summary line"; fail=1; }
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
for k in ("gpu", "provenance", "launch_overhead_us", "copy_gbps", "gemm", "sdpa", "elementwise", "adamw"):
    assert k in t, k
assert {r["op"] for r in t["elementwise"]} == {"rmsnorm", "swiglu", "cross_entropy", "rotary", "embedding"}
assert all(r["s"] > 0 for r in t["gemm"]) and all(r["bwd_s"] > 0 for r in t["sdpa"])
' "$T/k.json" || { echo "FAIL kernels: table fields"; fail=1; }

# The simulator takes it, both ways, and prices the step from it: a CPU's
# kernels make the step far slower than the shipped H100 table's.
sim=(--model=tiny --gpus=2 --global-batch=2 --seq=256 --policy=baton --json)
check simulate-h100 0 "$simulate" "${sim[@]}"
tail -n 1 "$T/out" > "$T/h100.json"
check simulate-calibration 0 "$simulate" "${sim[@]}" --calibration="$T/k.json"
grep -q '^# kernel table: host CPU' "$T/out" || { echo "FAIL calibration: no kernel table header"; fail=1; }
tail -n 1 "$T/out" > "$T/cpu.json"
check simulate-kernel-table 0 "$simulate" "${sim[@]}" --kernel-table="$T/k.json"
python3 -c '
import json, sys
h = json.load(open(sys.argv[1]))["policies"][0]["step_time_s"]
c = json.load(open(sys.argv[2]))["policies"][0]["step_time_s"]
assert c > 20 * h, (h, c)
' "$T/h100.json" "$T/cpu.json" || { echo "FAIL calibration: step time not from the table"; fail=1; }

check ops 0 "$ops" --device=host --op=rmsnorm,adamw --min-time=0.002
tail -n 1 "$T/out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
rows = {(r["op"], r["pass"]) for r in d["ops"]}
assert rows == {("rmsnorm", "fwd"), ("rmsnorm", "bwd"), ("adamw", "step")}, rows
assert d["copy_gbps"] > 0 and d["gemm_tflops"] > 0
assert all(r["seconds"] > 0 and r["ratio"] > 0 and r["gbps"] > 0 for r in d["ops"]), d
' || { echo "FAIL ops: last line"; fail=1; }

check kernels-no-out 2 "$kernels" --device=host
check kernels-device 2 "$kernels" --device=tpu --out="$T/x.json"
check kernels-tokens 2 "$kernels" --tokens=0 --out="$T/x.json"
check kernels-seqs 2 "$kernels" --seqs=48 --attention-tokens=64 --out="$T/x.json"
check kernels-model 2 "$kernels" --model=llama9 --out="$T/x.json"
check kernels-min-time 2 "$kernels" --min-time=0 --out="$T/x.json"
check kernels-unwritable 2 "$kernels" --out=/nonexistent/dir/k.json
check kernels-unknown 2 "$kernels" --warp=9 --out="$T/x.json"
check ops-op 2 "$ops" --op=conv
check ops-dtype 2 "$ops" --dtype=f16
exit $fail
