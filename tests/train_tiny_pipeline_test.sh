#!/bin/bash
# train_tiny --pp: 1F1B, interleaved and ZB-H1 pipeline stages executed against the unsharded
# one-rank run (losses and final parameters within 1e-5 relative, f32), on
# inproc threads alone and with FSDP2 sharding inside each stage, and on
# ucx processes with sharding inside the stages; a trace with the pipeline
# streams; bad input is one line on stderr, exit code 2.
source tests/simulate_cli_lib.sh  # bin (train_tiny), t, fail; run, bad, has
model=(--layers=2 --hidden=64 --heads=4 --kv-heads=2 --ffn=128 --vocab=128 --seq=32 --lr=3e-3
       --steps=20 --dtype=f32)
equal() {  # equal NAME PARAMS: within 1e-5 of the unsharded run, loss falls 30%
  reference_equal "$1" "$2" 0.7
}

run pp2 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --check-reference --json \
  --trace="$t/pp.json"
has pp2 '^final parameters: largest relative difference '
has pp2 '^pipeline bubble \(step 20, from the trace: .*stages [0-9.]+%, [0-9.]+%; 1F1B .* = 20.0%; the simulator on these stage graphs, block passes F = B = W: stages 20.0%, 20.0%$'
tail -n 1 "$t/out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
b, sim = j["stage_bubble"], j["sim_stage_bubble"]
assert len(b) == 2 and all(0 <= x < 1 for x in b), b
assert [round(x, 6) for x in sim] == [0.2, 0.2], sim
# The blocks saved activations in the plan: 1F1B stage s holds min(m, p-s)
# micro-batches of its one block.
saved, arena = j["stage_saved_activation_bytes"], j["stage_arena_bytes"]
assert len(saved) == 2 and saved[0] == 2 * saved[1] > 0, saved
assert all(a >= s for a, s in zip(arena, saved)), (arena, saved)' || { echo "FAIL pp2 stage_bubble"; fail=1; }
has pp2 '^pipeline saved activations in the plan \(blocks, in-flight micro-batches x one.s\): stage 0 0.38 MiB \(2.00 x 0.19 MiB; arena [0-9.]+ MiB\), stage 1 0.19 MiB \(1.00 x 0.19 MiB; arena [0-9.]+ MiB\)$'
equal pp2 1
python3 - "$t/pp.json" <<'PY' || { echo "FAIL trace"; fail=1; }
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
tracks = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
for rank in (0, 1):
    for stream in ("compute", "pp_send", "pp_recv"):
        assert (rank, stream) in tracks, (rank, stream, sorted(tracks))
slices = {(e["pid"], e["name"].split(" m")[0]) for e in events if e.get("ph") == "X"}
for want in ((0, "SEND act"), (0, "RECV grad"), (1, "RECV act"), (1, "SEND grad")):
    assert want in slices, (want, sorted(slices)[:20])
print("  trace: pipeline streams and send / receive slices on both ranks")
PY
run pp2-fsdp2 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=3 --policy=fsdp2 \
  --check-reference --json
equal pp2-fsdp2 1
run pp2-ucx 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=4 --batch=1 --policy=fsdp2 \
  --backend=ucx --check-reference --json
equal pp2-ucx 0

# --pp-gather=micro: each micro-batch's passes re-gather their units'
# buckets (FSDP inside the stages), under 1F1B and ZB-H1 (its weight pass
# gathers again).
run pp-gather-micro 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=4 --policy=fsdp2 \
  --pp-gather=micro --check-reference --json
has pp-gather-micro ', 2 data ranks per stage, buckets gathered per micro-batch pass \(--pp-gather=micro\)$'
equal pp-gather-micro 1
run zb-h1-gather-micro 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=3 --policy=fsdp2 \
  --pp-schedule=zb-h1 --pp-gather=micro --check-reference --json
equal zb-h1-gather-micro 1

# LoRA adapters on frozen base weights, 1F1B (2 micro-batches in flight on
# stage 0: each keeps its adapters' x a^T): the unsharded run's arithmetic.
run lora 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --lora-rank=4 --check-reference \
  --json
has lora '^unsharded 1-rank reference: largest relative loss difference 0 over 20 steps$'
reference_equal lora 1 0.95

# ZB-H1: each backward split into the input-gradient pass and the deferred
# weight-gradient pass, alone (bit for bit the unsharded run; with full
# and selective recompute too), with FSDP2 inside the stages, and on ucx processes.
run zb-h1 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --pp-schedule=zb-h1 \
  --check-reference --json --trace="$t/zb.json"
has zb-h1 '^pipeline bubble \(step 20, .*stages [0-9.]+%, [0-9.]+%; 1F1B .* = 20.0%; ZB-H1 with F = B = W \(p-1\)/\(3m\+p-1\) = 7.7%; the simulator on these stage graphs, .*: stages 7.7%, 7.7%$'
has zb-h1 '^pipeline: 2 stages of 1, 1 blocks .*zb-h1, 4 micro-batches'
has zb-h1 '^unsharded 1-rank reference: largest relative loss difference 0 over 20 steps$'
equal zb-h1 1
run zb-h1-recompute 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --pp-schedule=zb-h1 \
  --recompute=full --recompute-layers=all --check-reference --json
equal zb-h1-recompute 1
run zb-h1-selective 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --pp-schedule=zb-h1 \
  --recompute=selective --recompute-layers=all --check-reference --json
has zb-h1-selective '^unsharded 1-rank reference: largest relative loss difference 0 over 20 steps$'
equal zb-h1-selective 1
run zb-h1-fsdp2 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=3 --policy=fsdp2 \
  --pp-schedule=zb-h1 --check-reference --json
equal zb-h1-fsdp2 1
run zb-h1-ucx 0 "${model[@]}" --pp=2 --nranks=4 --micro-steps=4 --batch=1 --policy=fsdp2 \
  --backend=ucx --pp-schedule=zb-h1 --check-reference --json
equal zb-h1-ucx 0
run zb-h1-ucx-alone 0 "${model[@]}" --pp=2 --nranks=2 --micro-steps=4 --backend=ucx \
  --pp-schedule=zb-h1 --check-reference --json
equal zb-h1-ucx-alone 0

# Interleaved 1F1B: 2 model chunks per stage, FSDP2 over 2 data ranks inside.
run interleaved 0 "${model[@]/--layers=2/--layers=4}" --pp=2 --vpp=2 --pp-schedule=interleaved \
  --nranks=4 --micro-steps=4 --policy=fsdp2 --check-reference --json
has interleaved '^pipeline: 4 virtual stages of 1, 1, 1, 1 blocks .*interleaved, 4 micro-batches'
# The first stage's 4 warm-up chunk forwards and the first steady one.
has interleaved '^pipeline saved activations in the plan .*: stage 0 0.94 MiB \(2.50 x 0.38 MiB; .*stage 1 0.57 MiB \(1.50 x 0.38 MiB'
equal interleaved 1

# An explicit assignment and the FLOPs balance (3 blocks on 2 stages).
run pp-layers 0 "${model[@]/--layers=2/--layers=3}" --pp=2 --nranks=2 --micro-steps=2 \
  --pp-layers=1,2 --check-reference --json
has pp-layers '^pipeline: 2 stages of 1, 2 blocks \(--pp-layers=1,2\), 1f1b, 2 micro-batches'
equal pp-layers 1
run pp-flops 0 "${model[@]}" --pp=2 --nranks=2 --pp-layers=flops
has pp-flops '^pipeline: 2 stages of 1, 1 blocks \(--pp-layers=flops\)'
# A pipeline rank that dies or hangs: //tests:train_tiny_pipeline_faults_test.
bad not-dividing "is not a multiple of --pp=2" "${model[@]}" --pp=2 --nranks=3
bad more-stages "more than the model's 2 blocks" "${model[@]}" --pp=3 --nranks=3
bad interleaved-m "to be a multiple of --pp=2" "${model[@]/--layers=2/--layers=4}" --pp=2 \
  --vpp=2 --pp-schedule=interleaved --nranks=2 --micro-steps=3
bad interleaved-layers "blocks to be a multiple of --pp x --vpp = 4" \
  "${model[@]/--layers=2/--layers=6}" --pp=2 \
  --vpp=2 --pp-schedule=interleaved --nranks=2 --micro-steps=2
bad vpp-alone "--vpp=V > 1 and --pp-schedule=interleaved go together" "${model[@]}" --pp=2 \
  --vpp=2 --nranks=2
bad schedule "pipeline schedule must be" "${model[@]}" --pp=2 --nranks=2 --pp-schedule=gpipe
bad zb-h1-lora "zb-h1 with LoRA adapters does not run yet" "${model[@]}" --pp=2 --nranks=2 \
  --lora-rank=4 --pp-schedule=zb-h1
bad layers-count "want --pp=2 stages summing to the model's 2 blocks" "${model[@]}" --pp=2 \
  --nranks=2 --pp-layers=1,1,1
bad layers-zero "is not a block count" "${model[@]}" --pp=2 --nranks=2 --pp-layers=0,2
bad gather-value "--pp-gather must be step or micro" "${model[@]}" --pp=2 --nranks=2 \
  --pp-gather=bucket
bad gather-alone "--pp-gather needs --pp > 1" "${model[@]}" --nranks=2 --pp-gather=micro
bad layers-alone "--pp-layers splits the stages of --pp > 1" "${model[@]}" --pp-layers=flops
exit $fail
