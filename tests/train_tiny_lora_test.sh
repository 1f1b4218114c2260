#!/bin/bash
# train_tiny's LoRA (--lora-rank) and QLoRA (--base-dtype=nf4) fine-tuning
# of its seeded base (InitialParameter: the base is not trained first):
# 2 inproc ranks under fsdp2 and baton against the unsharded 1-rank run of
# the same global batch (--check-reference), fp32, 20 steps.
# - LoRA: every step's loss equals the unsharded one within 1e-5 relative
#   (only the reductions' summation order differs), only the adapters
#   train (16384 of 90432 parameters), and the loss falls: the mean of the
#   last 5 steps at least 5% under the mean of the first 5.
# - NF4 base: the same 1e-5: each shard packs whole 16384-element groups
#   (Sharding::block), so 1 and 2 ranks dequantize the same base weights
#   bit for bit and again only summation order differs; the first loss
#   differs from the fp32 base's (the base is quantized) by under 1%.
# - NF4 base with pipeline stages (--pp=2, 1F1B; each pass dequantizes
#   its stage's packings): alone, bit for bit the unsharded run; with
#   fsdp2 inside the stages re-gathering per pass (--pp-gather=micro),
#   within 1e-5 (summation order); final adapters too; the loss falls 5%.
# - Bad input: one line on stderr, exit 2.
source tests/simulate_cli_lib.sh  # bin (train_tiny here), t, fail; run, bad, has
model=(--layers=2 --hidden=64 --heads=4 --kv-heads=2 --ffn=128 --vocab=128 --seq=32 --lr=1e-2)
job=("${model[@]}" --steps=20 --nranks=2 --batch=2 --check-reference --json)

# check NAME [FIRST_LOSS_OF_THE_FP32_BASE]: the JSON line of the last run.
check() {
  tail -n 1 "$t/out" | python3 -c '
import json, sys
name, base = sys.argv[1], sys.argv[2]
j = json.loads(sys.stdin.read())
l, ref = j["losses"], j["reference_losses"]
errors = []
if len(l) != 20 or len(ref) != 20: errors.append("want 20 losses")
worst = max(abs(a - b) / abs(b) for a, b in zip(l, ref))
if worst > 1e-5 or j["max_rel_diff_vs_reference"] > 1e-5:
    errors.append("sharded vs unsharded %.3g > 1e-5" % worst)
if j["lora_rank"] != 8 or j["trainable_parameters"] != 16384:
    errors.append("lora_rank %s, trainable %s" % (j["lora_rank"], j["trainable_parameters"]))
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
if not last <= 0.95 * first: errors.append("loss mean %.4f -> %.4f: under 5%% lower" % (first, last))
if base:
    d = abs(l[0] - float(base)) / float(base)
    if j["base_dtype"] != "nf4" or not 0 < d < 0.01:
        errors.append("base %s, first loss %.6f vs the fp32 base %s" % (j["base_dtype"], l[0], base))
print("%s %s: loss mean of steps 1-5 %.4f, 16-20 %.4f; sharded vs unsharded %.2g"
      % ("FAIL" if errors else "ok  ", name, first, last, worst), "; ".join(errors))
sys.exit(1 if errors else 0)' "$1" "${2:-}" || fail=1
}
first_loss() { tail -n 1 "$t/out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["losses"][0])'; }

for policy in fsdp2 baton; do
  run "lora-$policy" 0 "${job[@]}" --policy=$policy --lora-rank=8 && check "lora-$policy"
  base=$(first_loss)
  run "nf4-$policy" 0 "${job[@]}" --policy=$policy --lora-rank=8 --base-dtype=nf4 &&
    check "nf4-$policy" "$base"
done
has lora-line '"base_dtype":"nf4"'
pp=("${model[@]}" --steps=20 --lora-rank=4 --base-dtype=nf4 --pp=2 --micro-steps=4
    --check-reference --json)
run nf4-pp 0 "${pp[@]}" --nranks=2
has nf4-pp '^unsharded 1-rank reference: largest relative loss difference 0 over 20 steps$'
has nf4-pp '"base_dtype":"nf4"'
reference_equal nf4-pp 1 0.95
run nf4-pp-fsdp2-micro 0 "${pp[@]}" --nranks=4 --policy=fsdp2 --pp-gather=micro
has nf4-pp-fsdp2-micro 'buckets gathered per micro-batch pass'
reference_equal nf4-pp-fsdp2-micro 1 0.95
run text 0 "${model[@]}" --steps=2 --lora-rank=4 --lora-targets=q,v --base-dtype=nf4
has lora-text '^lora: rank 4, alpha 16, targets q,v, base nf4: 1792 of 90432 parameters trained$'

bad bogus-target 'unknown LoRA target "bogus"' "${model[@]}" --lora-rank=8 --lora-targets=bogus
bad nf4-alone '--base-dtype=nf4 freezes the base weights' "${model[@]}" --base-dtype=nf4
bad rank-zero '--lora-rank needs a positive integer' "${model[@]}" --lora-rank=0
bad rank-above-matrix 'lora_rank = 40 is larger than the matrix block0.wk' "${model[@]}" --lora-rank=40
bad nf4-ddp 'all_reduce (DDP) keeps whole parameters' "${model[@]}" --lora-rank=8 --base-dtype=nf4 \
  --policy=ddp
bad lora-checkpoint 'checkpoints do not capture LoRA runs yet' "${model[@]}" --lora-rank=8 \
  --save-dir="$t/ckpt" --save-every=1
exit $fail
