#!/bin/bash
# simulate --tune, --policy-out and --policy-file: the tuned policy file
# reproduces the tuner's step time exactly, the same input gives the same
# answer, and bad input (policy files, groups, flag combinations) is one
# line on stderr naming the problem, exit code 2.
source tests/simulate_cli_lib.sh  # bin, t, fail; run, bad, has
job=(--model=llama3-8b --gpus=32 --seq=4096 --global-batch=128)

run tune 0 "${job[@]}" --tune --policy-out="$t/best.json" --json
grep -q '^# tune: .* configurations simulated' "$t/out" || { echo "FAIL tune: no summary"; fail=1; }
grep -q '^1 ' "$t/out" || { echo "FAIL tune: no rank 1 row"; fail=1; }
tail -n 1 "$t/out" >"$t/tune.json"
grep -v '^# tune:\|^# wrote' "$t/out" | sed '$d' >"$t/tune1.txt"
run tune-again 0 "${job[@]}" --tune --json
grep -v '^# tune:' "$t/out" | sed '$d' >"$t/tune2.txt"
cmp -s "$t/tune1.txt" "$t/tune2.txt" || { echo "FAIL deterministic:"; diff "$t/tune1.txt" "$t/tune2.txt"; fail=1; }

# The written policy runs as tuned: same step time, bit for bit.
run policy-file 0 "${job[@]}" --policy-file="$t/best.json" --json
tail -n 1 "$t/out" >"$t/file.json"
python3 - "$t/tune.json" "$t/file.json" <<'PY' || { echo "FAIL reproduce"; fail=1; }
import json, sys
tuned = json.load(open(sys.argv[1]))["best"][0]
ran = json.load(open(sys.argv[2]))["policies"][0]
assert tuned["step_time_s"] == ran["step_time_s"], (tuned, ran)
assert tuned["peak_memory_bytes"] == ran["peak_memory_bytes"], (tuned, ran)
assert ran["policy"] == "tuned" and ran["fits"], ran
print("reproduced", ran["step_time_s"])
PY

# The target case: llama3-70b on 1,024 H100s (elapsed printed, not asserted).
run tune-70b 0 --model=llama3-70b --cluster=h100 --gpus=1024 --global-batch=1024 --tune
grep '^# tune:' "$t/out"

# Issue 34: the memory techniques only when allowed. llama3-8b on 2 GPUs
# of 24 GiB: plain, then --allow=adamw8bit,lora,nf4 (the best has LoRA
# rank 16 and is faster); its policy file runs as tuned.
small=(--model=llama3-8b --gpus=2 --seq=2048 --global-batch=8 --cluster-file="$t/gpu24.json")
echo '{"memory_gib": 24}' >"$t/gpu24.json"
run tune-plain 0 "${small[@]}" --tune --json
grep -q 'lora=\|optimizer=adamw8bit\|base=nf4' "$t/out" && { echo "FAIL tune-plain: a technique not allowed"; fail=1; }
tail -n 1 "$t/out" >"$t/plain.json"
run tune-allow 0 "${small[@]}" --tune --allow=adamw8bit,lora,nf4 --policy-out="$t/lora.json" --json
has tune-allow '^1 .* lora=16'
tail -n 1 "$t/out" >"$t/allow.json"
run tune-allow-file 0 "${small[@]}" --policy-file="$t/lora.json" --json
tail -n 1 "$t/out" >"$t/allow_file.json"
python3 - "$t/plain.json" "$t/allow.json" "$t/allow_file.json" <<'PY' || { echo "FAIL tune-allow"; fail=1; }
import json, sys
plain, allow = (json.load(open(p))["best"][0] for p in sys.argv[1:3])
ran = json.load(open(sys.argv[3]))["policies"][0]
assert allow["fits"] and allow["step_time_s"] < plain["step_time_s"], (plain, allow)
assert ran["step_time_s"] == allow["step_time_s"], (allow, ran)
print("allowed LoRA: %.3f s a step against %.3f s" % (allow["step_time_s"], plain["step_time_s"]))
PY
bad allow-unknown '--allow: unknown technique "fp8"' "${small[@]}" --tune --allow=lora,fp8
bad allow-alone '--allow names techniques --tune may choose; it needs --tune' "${small[@]}" --allow=lora
bad allow-nf4-alone 'nf4 freezes the base weights, so it needs LoRA' "${small[@]}" --tune --allow=nf4
bad tune-offload '--tune chooses the offload' "${small[@]}" --tune --offload=params

# Bad input.
bad tune-and-policy '--tune' "${job[@]}" --tune --policy=baton
bad tune-and-recompute '--tune' "${job[@]}" --tune --recompute-layers=3
bad policy-out-alone '--policy-out needs --tune' "${job[@]}" --policy-out="$t/x.json"
bad file-and-policy '--policy-file' "${job[@]}" --policy-file="$t/best.json" --policy=baton
bad file-missing 'policy file' "${job[@]}" --policy-file="$t/missing.json"
echo '{"preset": "baton", "forward_prefech": 2}' >"$t/p1.json"
bad file-unknown-field '"forward_prefech"' "${job[@]}" --policy-file="$t/p1.json"
echo '{"forward_prefetch": "2"}' >"$t/p2.json"
bad file-mistyped '"forward_prefetch"' "${job[@]}" --policy-file="$t/p2.json"
echo '{"reduce_dtype": "fp8"}' >"$t/p3.json"
bad file-dtype '"reduce_dtype"' "${job[@]}" --policy-file="$t/p3.json"
echo '{"shard_group": 3}' >"$t/p4.json"
bad file-shard-divides 'shard_group = 3 does not divide' "${job[@]}" --policy-file="$t/p4.json"
echo '{"shard_group": 8, "hpz_group": 16}' >"$t/p5.json"
bad file-hpz-larger 'hpz_group = 16 is larger than the shard group' "${job[@]}" --policy-file="$t/p5.json"
echo '{"micro_steps": 3}' >"$t/p6.json"
bad file-micro-steps '"micro_steps"' "${job[@]}" --policy-file="$t/p6.json"
echo '{"recompute_blocks": 99}' >"$t/p7.json"
bad file-recompute '"recompute_blocks"' "${job[@]}" --policy-file="$t/p7.json"
bad flag-shard-divides 'shard_group = 3 does not divide' "${job[@]}" --policy=baton --shard-group=3
bad flag-hpz-larger 'hpz_group = 16 is larger than the shard group' "${job[@]}" --policy=baton --shard-group=8 --hpz-group=16
echo '{"memory_gib": 5}' >"$t/small.json"
bad tune-nothing-fits 'no configuration' "${job[@]}" --tune --cluster-file="$t/small.json" --policy-out="$t/none.json"
exit $fail
