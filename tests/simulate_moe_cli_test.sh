#!/bin/bash
# simulate with a mixture of experts (docs/moe.md): the acceptance
# command prints the step time, tokens/s/GPU, MFU on active parameters, the
# exposed all-to-all and each stage's memory; --json carries the experts;
# the tuner names tp / ep / pp / vpp and its policy file runs the same step;
# bad MoE input is one line on stderr, exit code 2.
source tests/simulate_cli_lib.sh  # bin, t, fail; run, bad, has

run accept-v3 0 --model=deepseek-v3 --cluster=h800 --gpus=2048 --seq=4096 \
  --global-batch=15360 --pp=16 --ep=64 --json
has accept-v3 '^# deepseek-v3 \(671\.03B parameters, 37\.55B active\) on 2048 x h800'
has accept-v3 '^# mesh: pp=16 .* ep=64 edp=2; 120 micro-batches'
has accept-v3 '^baton +[0-9.]+ +[0-9.]+ .*% +[0-9]+ .*yes$'
has accept-v3 'experts: ep=64 etp=1 edp=2, 4 per rank, dispatcher alltoall; exposed all-to-all [0-9.]+ s; MFU on 37\.55B active'
n=$(grep -cE '^[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9]+ +[0-9.]+ +\(' "$t/out")
[[ $n -eq 16 ]] || { echo "FAIL accept-v3: $n stage rows, want 16"; fail=1; }
tail -n 1 "$t/out" | python3 -c '
import json, sys
row = json.load(sys.stdin)["policies"][0]
e = row["experts"]
assert e["ep"] == 64 and e["dispatcher"] == "alltoall", e
assert e["exposed_all_to_all_s"] > 0 and e["dispatch_buffers_bytes"] > 0, e
assert e["active_parameters"] == 37554968064 or abs(e["active_parameters"] / 37.55e9 - 1) < 1e-3, e
assert len(row["pipeline"]["stages"]) == 16
' || { echo "FAIL accept-v3: json"; fail=1; }

# The tuner over the experts' layout, and its file run again.
run tune-mixtral 0 --model=mixtral-8x7b --cluster=h100 --gpus=64 --seq=4096 --global-batch=256 \
  --tune --policy-out="$t/moe.json"
has tune-mixtral '^1 +[0-9.]+ .* tp=[0-9]+.* pp=[0-9]+ vpp=[0-9]+ .* ep=[0-9]+ etp=[0-9]+'
best=$(awk '$1 == "1" {print $2}' "$t/out")
grep -q '"expert_parallel"' "$t/moe.json" || { echo "FAIL tune-mixtral: no expert_parallel"; fail=1; }
run file-mixtral 0 --model=mixtral-8x7b --cluster=h100 --gpus=64 --seq=4096 --global-batch=256 \
  --policy-file="$t/moe.json"
has file-mixtral "^tuned +$best "

# Bad MoE input (tests/reliability_probes.sh "moe" holds the rest).
printf '%s' '{"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128, "num_local_experts": 2, "num_experts_per_tok": 3}' >"$t/cfg.json"
bad topk-config "moe top_k = 3 must be in [1, 2]" --hf-config="$t/cfg.json" --gpus=8 --global-batch=8 --seq=512
bad ep-experts "--ep=6 must divide the model's 8 experts" --model=mixtral-8x7b --gpus=12 --global-batch=12 --seq=512 --ep=6
bad ep-ranks "ep x etp = 32 does not divide the 16 ranks" --model=mixtral-8x7b --gpus=16 --global-batch=16 --seq=512 --ep=32
bad tune-ep '--tune searches the mesh' --model=mixtral-8x7b --gpus=16 --global-batch=16 --tune --ep=2

if [[ $fail -ne 0 ]]; then echo FAILED; exit 1; fi
echo PASSED
