#!/bin/bash
# The simulate command: its default run, its JSON line, its pictures, and
# bad input (one line on stderr, exit code 2).
source tests/simulate_cli_lib.sh  # bin, t, fail; run, bad, has
run default 0
grep -q '^yafsdp ' "$t/out" || { echo "FAIL default: no yafsdp row"; fail=1; }
run json 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton --json \
  --svg="$t/step.svg" --trace="$t/trace.json"
tail -n 1 "$t/out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
p = d["policies"][0]
assert d["model"] == "llama3-8b" and d["gpus"] == 64, d
for k in ("policy", "step_time_s", "mfu", "exposed_comm_s", "peak_memory_bytes", "fits"):
    assert k in p, k
assert p["step_time_s"] > 0 and 0 < p["mfu"] < 1, p
' || { echo "FAIL json: last line"; fail=1; }
grep -q '<svg' "$t/step.svg" || { echo "FAIL svg"; fail=1; }
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
assert any(e["ph"] == "X" for e in ev) and any(e["ph"] == "C" for e in ev)
' "$t/trace.json" || { echo "FAIL trace"; fail=1; }
run unknown-model 2 --model=llama9-1t
run unknown-cluster 2 --cluster=tpu
run zero-gpus 2 --gpus=0
run negative-seq 2 --seq=-5
run batch-divides 2 --gpus=128 --global-batch=100
run micro-batch 2 --gpus=128 --global-batch=256 --micro-batch=3
run unknown-policy 2 --policy=megatron
run recompute 2 --recompute-layers=500
run unknown-flag 2 --warp=9
run hf-missing 2 --hf-config=/nonexistent/config.json
echo '{"architectures": ["GPT2LMHeadModel"]}' >"$t/config.json"
run hf-unsupported 2 --hf-config="$t/config.json"
echo '{"nic_gbps": 0}' >"$t/cluster.json"
run cluster-file 2 --cluster-file="$t/cluster.json"
printf '# Collective test starting: all_gather_perf\n  1048576 32768 float none -1 30.1 34.8 30.5 0 29.8 35.2 30.8 0\n 268435456 8388608 float none -1 1012 265 232 0 1010 265 232 0\n' >"$t/ag.txt"
run calibration 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton \
  --calibration="$t/ag.txt"
grep -q '^# calibration: all_gather from 2 measured sizes' "$t/out" || { echo "FAIL calibration header"; fail=1; }
echo 'nothing here' >"$t/bad.txt"
run calibration-bad 2 --calibration="$t/bad.txt"
# Issue 16: hostile input ends with one line and exit 2, naming the problem.
printf '{"collective": "all_gather", "results": [{"size": "1048576", "out_of_place": {"busbw_gbps": 30}}]}' >"$t/c1.json"
bad calib-size-string 'results[0].size' --calibration="$t/c1.json"
printf '{"collective": "all_gather", "results": [{"size": 1, "out_of_place": {"busbw_gbps": 30}}, {"size": null, "out_of_place": {"busbw_gbps": 30}}]}' >"$t/c2.json"
bad calib-size-null 'results[1].size' --calibration="$t/c2.json"
printf '{"collective": "all_gather", "results": [{"size": 1048576, "out_of_place": 7}]}' >"$t/c3.json"
bad calib-oop 'results[0].out_of_place' --calibration="$t/c3.json"
printf '# Collective test starting: all_gather_perf\n  1048576 32768 float none -1 30.1 34.8 inf 0 29.8 35.2 30.8 0\n' >"$t/c4.txt"
bad calib-inf 'busbw inf' --calibration="$t/c4.txt"
python3 -c 'import sys; sys.stdout.write("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": " + "["*60000 + "]"*60000 + "}")' >"$t/deep.json"
bad config-deep 'nested deeper than 64' --hf-config="$t/deep.json"
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 16777216, "intermediate_size": 16777216, "vocab_size": 16777216, "num_attention_heads": 4096, "num_hidden_layers": 5000}' >"$t/huge.json"
bad config-overflow 'parameters' --hf-config="$t/huge.json"
echo '{"gpus_per_node": 4294967304}' >"$t/gpn.json"
bad cluster-wrap 'gpus_per_node" must be an integer in [1, 4096]' --cluster-file="$t/gpn.json"
echo '{"gpus_per_node": 8.5}' >"$t/gpn2.json"
bad cluster-fraction 'gpus_per_node' --cluster-file="$t/gpn2.json"
echo '{"nic_gbps": 1e-300}' >"$t/slow.json"
bad cluster-slow-nic 'nic_gbps" must be a number in' --cluster-file="$t/slow.json"
bad cluster-dir 'not a regular file' --cluster-file="$t"
# The slowest NIC a file may set still ends at once: a result or the
# simulator's refusal, never a hang.
echo '{"nic_gbps": 0.001}' >"$t/slow2.json"
timeout 60 "$bin" --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton --cluster-file="$t/slow2.json" >/dev/null 2>"$t/err"
rc=$?
[[ $rc -eq 0 || $rc -eq 2 ]] || { echo "FAIL slowest-nic: exit $rc"; fail=1; }
echo "ok   slowest-nic: exit $rc $(head -c 120 "$t/err")"
# The longest --seq the flag takes passes the simulated range and is refused.
bad seq-long 'simulated' --seq=16777216 --policy=baton
bad seq-over-limit '--seq needs an integer in [1, 16777216]' --seq=50000000
# Fast enough that a step rounds to 0 ns: refused, never "inf% MFU".
echo '{"peak_tflops": 1e6, "hbm_gbps": 1e6, "nvlink_gbps": 1e6, "nic_gbps": 1e6, "base_latency_us": 0, "nvlink_hop_us": 0, "net_hop_us": 0, "host_issue_us": 0}' >"$t/fast.json"
"$bin" --model=tiny --gpus=8 --global-batch=8 --seq=1 --cluster-file="$t/fast.json" --json >"$t/out" 2>"$t/err"
rc=$?
if [[ $rc -eq 0 ]]; then
  tail -n 1 "$t/out" | python3 -c '
import json, math, sys
d = json.loads(sys.stdin.read())
for p in d["policies"]:
    for k, v in p.items():
        assert not isinstance(v, float) or math.isfinite(v), (k, v)
        assert v is not None, k
' || { echo "FAIL fast-cluster: non-finite figure"; fail=1; }
  grep -q 'inf%' "$t/out" && { echo "FAIL fast-cluster: inf% MFU"; fail=1; }
elif [[ $rc -ne 2 ]] || ! grep -q 'positive, finite time' "$t/err"; then
  echo "FAIL fast-cluster: exit $rc"; cat "$t/err"; fail=1
fi
echo "ok   fast-cluster: exit $rc $(head -c 120 "$t/err")"
bad micro-steps-cap 'the limit is 4096' --model=tiny --gpus=1 --global-batch=1000000
bad step-units-cap 'unit-micro-steps' --model=llama3-405b --gpus=8 --global-batch=8192
bad gpus-over '--gpus needs an integer in [1, 1048576], got "99999999999"' --gpus=99999999999
bad batch-float '--global-batch needs a positive integer, got "1e12"' --global-batch=1e12
bad batch-over '--global-batch needs an integer in [1, 1073741824]' --global-batch=1000000000000
bad dup-flag '--gpus is given more than once' --gpus=8 --gpus=16
bad dup-switch '--json is given more than once' --json --json
bad compare-empty '--compare has an empty item' --compare=,
bad compare-hole '--compare has an empty item' --compare=baton,,ddp
bad policy-and-compare '--policy and --compare' --policy=baton --compare=ddp
bad trace-empty '--trace needs a value' --trace=
bad calib-empty '--calibration has an empty item' --calibration=,
bad model-and-hf '--model and --hf-config' --model=tiny --hf-config="$t/huge.json"
table='{"gpu": "test", "launch_overhead_us": 5,
 "gemm": [{"m": 4096, "n": 4096, "k": 4096, "s": 0.0004}],
 "sdpa": [{"batch": 1, "heads": 32, "kv_heads": 8, "seq": 8192, "head_dim": 128, "fwd_s": 0.004, "bwd_s": 0.01}],
 "elementwise": [{"op": "rmsnorm", "bytes_fwd": 67108864, "fwd_s": 5e-5, "bwd_s": 1e-4},
  {"op": "swiglu", "bytes_fwd": 270532608, "fwd_s": 3e-4, "bwd_s": 1e-3},
  {"op": "cross_entropy", "bytes_fwd": 262144000, "fwd_s": 1e-3, "bwd_s": 1.5e-3}],
 "adamw": [{"params": 16777216, "s": 3e-4}]}'
echo "$table" >"$t/kernels.json"
run kernel-table 0 --model=llama3-8b --gpus=64 --global-batch=64 --policy=baton \
  --kernel-table="$t/kernels.json"
grep -q '^# kernel table: test (1 GEMM shapes' "$t/out" || { echo "FAIL kernel-table header"; fail=1; }
run kernel-table-via-calibration 0 --model=llama3-8b --gpus=64 --global-batch=64 \
  --policy=baton --calibration="$t/kernels.json"
grep -q '^# kernel table: test' "$t/out" || { echo "FAIL calibration kernel header"; fail=1; }
echo "${table/\"s\": 0.0004/\"s\": \"fast\"}" >"$t/kernels_bad.json"
run kernel-table-type 2 --kernel-table="$t/kernels_bad.json"
grep -q 'gemm\[0\]."s" must be a number, got string' "$t/err" || { echo "FAIL kernel-table-type message"; fail=1; }
run kernel-table-type-calibration 2 --calibration="$t/kernels_bad.json"
echo "${table/\"swiglu\"/\"gelu\"}" >"$t/kernels_noop.json"
run kernel-table-missing-op 2 --model=llama3-8b --gpus=64 --global-batch=64 \
  --policy=baton --kernel-table="$t/kernels_noop.json"
run kernel-table-missing 2 --kernel-table=/nonexistent/kernels.json
# --attention-kernel (sim/compute_model.h AttentionKernelPreset): Triton
# FlashAttention is slower than the table's flash SDPA at a long sequence,
# and ALiBi drops the RoPE kernels; bad values are refused in one line.
mpt=(--model=llama2-13b --gpus=8 --global-batch=8 --seq=16384 --policy=fsdp1 --recompute-layers=all --json)
run attn-table 0 "${mpt[@]}" --attention-kernel=table
tail -n 1 "$t/out" >"$t/attn_table.json"
grep -q '^# attention kernel' "$t/out" && { echo "FAIL attn-table: header for the table's kernel"; fail=1; }
run attn-triton 0 "${mpt[@]}" --attention-kernel=triton
grep -q '^# attention kernel: triton (forward 25.0%, backward 17.5% of peak, head dim padded' "$t/out" || { echo "FAIL attn-triton header"; fail=1; }
tail -n 1 "$t/out" >"$t/attn_triton.json"
run attn-alibi 0 "${mpt[@]}" --attention-kernel=triton-alibi
grep -q 'ALiBi: no RoPE kernels' "$t/out" || { echo "FAIL attn-alibi header"; fail=1; }
tail -n 1 "$t/out" >"$t/attn_alibi.json"
python3 -c '
import json, sys
step = [json.load(open(p))["policies"][0]["step_time_s"] for p in sys.argv[1:]]
assert step[1] > 1.2 * step[0], step  # Triton attention at 16k: slower
assert step[2] < step[1], step        # no RoPE kernels
' "$t/attn_table.json" "$t/attn_triton.json" "$t/attn_alibi.json" || { echo "FAIL attention-kernel step times"; fail=1; }
bad attn-unknown 'unknown attention kernel "flash9"; kernels: table, triton, triton-alibi' --attention-kernel=flash9
bad attn-empty '--attention-kernel needs a value' --attention-kernel=
bad attn-twice '--attention-kernel is given more than once' --attention-kernel=table --attention-kernel=triton
echo '{"name": "mi300x"}' >"$t/mi300x.json"
bad attn-gpu 'published figures for the h100 and a100 clusters only, not "mi300x"' \
  --cluster-file="$t/mi300x.json" --attention-kernel=triton
# A head dim the kernel cannot run (Triton FlashAttention: up to 128) is
# refused before anything is simulated or printed, also under --tune.
printf '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 5120, "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 160, "intermediate_size": 13824, "vocab_size": 32000}' >"$t/hd160.json"
for mode in --policy=baton --tune; do
  bad "attn-head-dim $mode" 'runs head dims up to 128 (flash_attn_triton.py asserts d <= 128); the model'"'"'s is 160' \
    --hf-config="$t/hd160.json" --gpus=8 --global-batch=8 --attention-kernel=triton "$mode"
  [[ -s "$t/out" ]] && { echo "FAIL attn-head-dim $mode: printed before refusing"; fail=1; }
done
run attn-head-dim-table 0 --hf-config="$t/hd160.json" --gpus=8 --global-batch=8 --policy=baton
# Issue 34: the techniques' flags and --memory. Llama-2 70B QLoRA (rank
# 64, NF4 base, the base weights offloaded as Answer.AI did) fits two 24 GB
# GPUs; its --json carries the same W / A / G / O split.
cluster24="$(dirname "$0")/../sim/data/consumer_24gb.json"
run qlora-70b 0 --model=llama2-70b --cluster-file="$cluster24" --gpus=2 --seq=2048 \
  --global-batch=2 --lora-rank=64 --base-dtype=nf4 --offload=params --policy=baton --memory
grep -q 'memory per GPU (GiB): .* of 24 (fits); host ' "$t/out" ||
  { echo "FAIL qlora-70b: no fitting memory line"; cat "$t/out"; fail=1; }
run qlora-70b-json 0 --model=llama2-70b --cluster-file="$cluster24" --gpus=2 --seq=2048 \
  --global-batch=2 --lora-rank=64 --base-dtype=nf4 --offload=params --policy=baton --json
tail -n 1 "$t/out" | python3 -c '
import json, sys
p = json.loads(sys.stdin.read())["policies"][0]
m = p["memory"]
parts = ["weights", "activations", "gradients", "optimizer", "comm_buffers", "reserve"]
total = sum(m[k + "_bytes"] for k in parts)
assert abs(total - m["total_bytes"]) < 1 and abs(total - p["peak_memory_bytes"]) < 1, (m, p)
assert p["fits"] and m["host_weights_bytes"] > 0 and m["optimizer_bytes"] == 0, m
assert m["trainable_parameters"] < m["parameters"] / 50, m
' || { echo "FAIL qlora-70b-json"; fail=1; }
bad lora-rank-0 '--lora-rank needs a positive integer, got "0"' --lora-rank=0
bad lora-rank-big 'lora_rank = 9000 is larger than the matrix block0.wq [8192 x 8192]' \
  --lora-rank=9000 --policy=baton
bad lora-target 'unknown LoRA target "x"' --lora-rank=8 --lora-targets=q,x
bad nf4-trainable '--base-dtype=nf4 freezes the base weights in 4 bits' --base-dtype=nf4
bad lora-alpha-alone '--lora-alpha and --lora-targets need --lora-rank=N' --lora-alpha=8
printf '{"name": "x", "optimizer": "adamw8bit", "param_dtype": "f16"}' >"$t/p8.json"
bad adamw8bit-f16 'optimizer = adamw8bit keeps an fp32 master' --policy-file="$t/p8.json"
bad optimizer-bad '--optimizer: optimizer must be adamw or adamw8bit' --optimizer=sgd
exit $fail
