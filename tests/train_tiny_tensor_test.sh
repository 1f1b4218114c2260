#!/bin/bash
# train_tiny --tp: tensor parallelism executed against the unsharded one-rank
# run (losses and final parameters within 1e-5 relative, f32): TP 2 and 4
# (4 with --kv-heads=4; the embedding and the head vocabulary-parallel with
# the parallel cross-entropy; also tied), with and without --tp-overlap (bit for bit the
# same), alone and with FSDP2 sharding of each tensor rank's
# slice over the data ranks, with selective recompute, inside 1F1B pipeline
# stages (3D; the blocks' saved activations of the slice, and with --sp of the
# sequence shard, planned per stage; and under zb-h1, with --sp --tp-overlap
# too, bit for bit the 1F1B run), and on ucx processes; --sp (sequence parallelism) likewise
# within 1e-5 for TP 2 and 4 (the embedding and head vocabulary-parallel,
# their sums reduce-scattered to and gathered from the sequence shards),
# with FSDP2, in 1F1B stages and on ucx, and
# with --tp-overlap (the gathers and reduce-scatters decomposed around the
# GEMMs) bit for bit the run with AG-TP / RS-TP nodes;
# bad input is one line on stderr, exit code 2.
# --lr=1e-3: AdamW's first updates g / (|g| + eps) amplify the all-reduces'
# summation-order rounding where |g| ~ eps (at 3e-3 the parameters differ
# by up to 2e-5 after one step while the losses agree to 1e-7).
source tests/simulate_cli_lib.sh  # bin (train_tiny), t, fail; run, bad, has
model=(--layers=2 --hidden=64 --heads=4 --ffn=128 --vocab=128 --seq=32 --lr=1e-3
       --steps=20 --dtype=f32)
# chunks NAME TRACE TP: --tp-overlap's chunk spans in the trace: at least
# tp chunk transfers per block part and step on each rank's tensor track,
# the chunk GEMMs on its compute track, pipelined chunk by chunk as the
# events order them (deterministic, unlike overlap in time on 2 busy cores,
# which is printed, not asserted): a reduce-scatter's or all-reduce's chunk
# j starts after chunk j's GEMM ended; a gather's GEMM on another rank's
# row block c starts after block c's broadcast ended.
chunks() {
  python3 - "$2" "$3" <<'PY' || { echo "FAIL $1 chunk trace"; fail=1; }
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
tp, parts = int(sys.argv[2]), 2 * 2  # attention and MLP of each of the 2 blocks
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
spans = [e for e in events if e.get("ph") == "X" and " chunk " in e["name"]]
transfers = [e for e in spans if not e["name"].startswith("GEMM")]
gemms = [e for e in spans if e["name"].startswith("GEMM")]
assert {tracks[(e["pid"], e["tid"])] for e in transfers} == {"tensor"}, "transfers off the tensor track"
assert {tracks[(e["pid"], e["tid"])] for e in gemms} == {"compute"}, "GEMMs off the compute track"
steps = {e["args"]["step"] for e in spans}
end = lambda e: e["ts"] + e["dur"]
pairs = 0
for rank in range(tp):
    for step in steps:
        n = sum(e["pid"] == rank and e["args"]["step"] == step for e in transfers)
        assert n >= tp * parts, (rank, step, n)
    ts = sorted((e for e in transfers if e["pid"] == rank), key=lambda e: e["ts"])
    cs = sorted((e for e in gemms if e["pid"] == rank), key=lambda e: e["ts"])
    assert len(ts) == len(cs), (rank, len(ts), len(cs))
    i = 0
    while i < len(ts):  # one decomposed collective: chunks 0.. of one kind
        kind, j = ts[i]["name"].split(" ")[0], i + 1
        while j < len(ts) and ts[j]["name"].split(" ")[0] == kind and ts[j]["args"]["chunk"] > 0:
            j += 1
        xs, gs = ts[i:j], cs[i:j]
        for x in xs:
            if kind == "AG":  # the GEMM on block c after its broadcast
                if x["args"]["chunk"] == rank: continue
                g = [g for g in gs if g["args"]["chunk"] == x["args"]["chunk"]]
                assert len(g) == 1 and g[0]["ts"] >= end(x) - 1e-3, (rank, x, g)
            else:  # chunk j's transfer after its GEMM
                g = gs[x["args"]["chunk"]]
                assert g["args"]["chunk"] == x["args"]["chunk"] and x["ts"] >= end(g) - 1e-3, (rank, x, g)
        i = j
    pairs += sum(a["ts"] < end(b) and b["ts"] < end(a) for a in ts for b in cs)
print(f"  trace: {len(transfers)} chunk transfers on the tensor tracks, {len(gemms)} chunk GEMMs"
      f" on the compute tracks in chunk order; {pairs} pairs overlapping in time")
PY
}
same() {  # same NAME FILE [WHAT]: the --json line's losses and parameter difference are
  # FILE's (WHAT names FILE's run; default the one with the graph's collective nodes)
  local what="the run with the graph's collective nodes"
  if [ $# -ge 3 ]; then what=$3; fi
  python3 - "$2" "$t/out" "$what" <<'PY' ||
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a["losses"] == b["losses"], (a["losses"], b["losses"])
assert a["max_param_rel_diff_vs_reference"] == b["max_param_rel_diff_vs_reference"]
print("  bit for bit the losses and parameters of " + sys.argv[3])
PY
    { echo "FAIL $1 differs"; fail=1; }
}
saved() {  # saved NAME SP: the --json line's planned saved activations per 1F1B stage
  # (--pp=2, 4 micro-batches: stage s holds min(m, p - s) = 2, 1) are blocks of the TP 2
  # slice's sizes (2 of 4 heads, 1 of 2 KV heads, FFN 64 of 128), with SP=1 x1 and the
  # norms' statistics of the 32-token sequence shard (llama_trainer.h, SavedActivationBytes)
  tail -n 1 "$t/out" | python3 -c '
import json, sys
T, H, Q, KV, F, e = 64, 64, 32, 16, 64, 4
R = T // 2 if sys.argv[1] == "1" else T
up = lambda n: (n + 255) // 256 * 256
block = sum(up(n) for n in [T * H * e, T * Q * e, T * KV * e, T * KV * e, T * Q * e, R * H * e,
                            T * H * e, T * F * e, T * F * e, T * F * e, R * 4, T * 2 * 4, R * 4])
got = json.loads(sys.stdin.read())["stage_saved_activation_bytes"]
assert got == [2 * block, block], (got, block)
print("  saved activations planned: stage 0 2 x %d bytes, stage 1 1 x %d" % (block, block))' "$2" ||
    { echo "FAIL $1 saved activations"; fail=1; }
}
equal() {  # equal NAME PARAMS: within 1e-5 of the unsharded run, loss falls 15%, TP 2 or 4
  reference_equal "$1" "$2" 0.85
  tail -n 1 "$t/out" | python3 -c '
import json, sys
assert json.loads(sys.stdin.read())["tensor_parallel"] in (2, 4)' ||
    { echo "FAIL $1: not tensor-parallel"; fail=1; }
}

run tp2 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=2 --check-reference --json \
  --trace="$t/tp.json"
has tp2 '^tensor parallel: 2 ranks \(per rank 2 of 4 heads, 1 of 2 KV heads, FFN 64 of 128; vocabulary 64 of 128; norms replicated\), 1 data ranks$'
has tp2 '^final parameters: largest relative difference '
has tp2 '^tensor all-reduces exposed \(step 20, from the trace: compute waiting on AR-TP\): mean [0-9.]+ ms, largest [0-9.]+ ms per rank'
# Beside it the simulator's figure for the same graph (sim/tensor_exposure.h),
# a finite number on the h100 preset's costs.
has tp2 '^simulator, same graph: exposed tensor communication [0-9]+\.[0-9]+ ms per step \(waiting on tensor nodes [0-9]+\.[0-9]+ ms, inside the nodes [0-9]+\.[0-9]+ ms, of a [0-9]+\.[0-9]+ ms simulated step; the simulator.s h100 node costs, not this host.s\)$'
equal tp2 1
python3 - "$t/tp.json" <<'PY' || { echo "FAIL trace"; fail=1; }
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
for rank in (0, 1):
    assert (rank, "tensor") in {(p, n) for (p, _), n in tracks.items()}, sorted(tracks.items())
on = {}  # slice name prefix -> the tracks it ran on
for e in events:
    if e.get("ph") == "X":
        on.setdefault(e["name"].split(" ")[0], set()).add(tracks.get((e["pid"], e["tid"])))
assert on.get("AR-TP") == {"tensor"}, on.get("AR-TP")
print("  trace: the tensor track on both ranks, AR-TP slices on it only")
PY
# --tp-overlap: the same sums, bit for bit.
cp "$t/out" "$t/tp2.out"
run tp2-overlap 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=2 --tp-overlap --check-reference \
  --json --trace="$t/tpo.json"
equal tp2-overlap 1
chunks tp2-overlap "$t/tpo.json" 2
same tp2-overlap "$t/tp2.out"
run tp2-fsdp2 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=4 --policy=fsdp2 --check-reference \
  --json
equal tp2-fsdp2 1
run tp2-recompute 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=2 --micro-steps=2 \
  --recompute=selective --check-reference --json
equal tp2-recompute 1
run tp4 0 "${model[@]}" --kv-heads=4 --tp=4 --nranks=4 --check-reference --json
equal tp4 1
cp "$t/out" "$t/tp4.out"
run tp4-overlap 0 "${model[@]}" --kv-heads=4 --tp=4 --nranks=4 --tp-overlap --check-reference \
  --json
equal tp4-overlap 1
same tp4-overlap "$t/tp4.out"
run tp4-fsdp2 0 "${model[@]}" --kv-heads=4 --tp=4 --nranks=8 --policy=fsdp2 --check-reference \
  --json
equal tp4-fsdp2 1
# Tied embeddings: the head reads the embedding's vocabulary rows.
cat > "$t/tied.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
 "tie_word_embeddings": true, "rms_norm_eps": 1e-5, "rope_theta": 10000}
JSON
run tp2-tied-fsdp2 0 --hf-config="$t/tied.json" --seq=32 --lr=1e-3 --steps=20 --dtype=f32 \
  --tp=2 --nranks=4 --policy=fsdp2 --check-reference --json
equal tp2-tied-fsdp2 1
# 3D: TP inside 1F1B pipeline stages, with fsdp2 inside each (tensor, stage).
run tp2-pp2 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 \
  --check-reference --json
has tp2-pp2 '^pipeline: 2 stages of 1, 1 blocks .*, 1 data ranks per stage, buckets gathered once per step$'
has tp2-pp2 '^pipeline saved activations in the plan \(blocks, in-flight micro-batches x one.s\): stage 0 0.24 MiB \(2.00 x 0.12 MiB; arena [0-9.]+ MiB\), stage 1 0.12 MiB \(1.00 x 0.12 MiB; arena [0-9.]+ MiB\)$'
saved tp2-pp2 0
equal tp2-pp2 1
# ZB-H1 in the TP stages: each block part's weight pass deferred, the sums
# in 1F1B's order (bit for bit its losses and parameters).
cp "$t/out" "$t/tp2-pp2.out"
run tp2-pp2-zb 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 \
  --pp-schedule=zb-h1 --check-reference --json
has tp2-pp2-zb '^pipeline: 2 stages of 1, 1 blocks .*zb-h1, 4 micro-batches'
has tp2-pp2-zb '^pipeline saved activations in the plan \(blocks, in-flight micro-batches x one.s\): stage 0 0.35 MiB \(3.00 x 0.12 MiB; arena [0-9.]+ MiB\), stage 1 0.24 MiB \(2.00 x 0.12 MiB; arena [0-9.]+ MiB\)$'
equal tp2-pp2-zb 1
same tp2-pp2-zb "$t/tp2-pp2.out" "the 1F1B run"
run tp2-pp2-fsdp2 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=8 --micro-steps=3 \
  --policy=fsdp2 --check-reference --json
equal tp2-pp2-fsdp2 1
run tp2-pp2-ucx 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 \
  --backend=ucx --check-reference --json
equal tp2-pp2-ucx 0
run tp2-ucx 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=4 --batch=1 --policy=fsdp2 \
  --backend=ucx --check-reference --json
equal tp2-ucx 0
# --sp: norms, residual stream and loss on sequence shards, AG-TP / RS-TP
# nodes on the tensor stream instead of AR-TP. The simulator's figure beside
# the measured one priced by a calibration (--sim-calibration): an
# all-gather at 0.001 GB/s busbw makes each of the step's 8 AG-TP nodes of
# 16 KiB take 8.2 ms, so the simulated nodes' exposure passes 50 ms.
cat >"$t/ag.json" <<'JSON'
{"collective": "all_gather", "results": [
  {"size": 4096, "out_of_place": {"busbw_gbps": 0.001}},
  {"size": 1048576, "out_of_place": {"busbw_gbps": 0.001}}]}
JSON
run tp2-sp 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=2 --sp --check-reference --json \
  --trace="$t/sp.json" --sim-calibration="$t/ag.json"
has tp2-sp '^simulator, same graph: exposed tensor communication [0-9]+\.[0-9]+ ms per step .*; compute from the h100 kernel table, measured busbw for all_gather \(h100 NVLink.s otherwise\) \(--sim-calibration\)\)$'
has tp2-sp '^tensor parallel: 2 ranks \(per rank 2 of 4 heads, 1 of 2 KV heads, FFN 64 of 128; vocabulary 64 of 128; norms replicated, run on sequence shards of 32 of 64 tokens\), 1 data ranks$'
has tp2-sp '^tensor collectives exposed \(step 20, compute stream\): waiting on AG-TP / RS-TP nodes mean [0-9.]+ ms \(from the trace\), inside the nodes mean [0-9.]+ ms \(the input gradients'"'"' reduce-scatters, the gradient all-reduces\); total mean [0-9.]+ ms, largest [0-9.]+ ms per rank$'
equal tp2-sp 1
tail -n 1 "$t/out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["sequence_parallel"]
# The in-node reduce-scatters are timed on each rank (host work around them).
assert len(j["tp_inner_ms"]) == 2 and min(j["tp_inner_ms"]) > 0, j["tp_inner_ms"]
sim = j["sim_tp_exposure"]
assert len(sim) == 1 and 50 < sim[0]["nodes_ms"] <= sim[0]["total_ms"] < sim[0]["step_ms"], sim' ||
  { echo "FAIL tp2-sp: not sequence-parallel, no in-node times, or no calibrated simulator figure"; fail=1; }
python3 - "$t/sp.json" <<'PY' || { echo "FAIL sp trace"; fail=1; }
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
on = {}
for e in events:
    if e.get("ph") == "X":
        on.setdefault(e["name"].split(" ")[0], set()).add(tracks.get((e["pid"], e["tid"])))
assert on.get("AG-TP") == {"tensor"} and on.get("RS-TP") == {"tensor"}, on
assert "AR-TP" not in on, on
print("  trace: AG-TP and RS-TP slices on the tensor track, no AR-TP")
PY
cp "$t/out" "$t/tp2-sp.out"
run tp2-sp-overlap 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=2 --sp --tp-overlap \
  --check-reference --json --trace="$t/spo.json"
equal tp2-sp-overlap 1
chunks tp2-sp-overlap "$t/spo.json" 2
same tp2-sp-overlap "$t/tp2-sp.out"
run tp4-sp 0 "${model[@]}" --kv-heads=4 --tp=4 --nranks=4 --sp --check-reference --json
equal tp4-sp 1
cp "$t/out" "$t/tp4-sp.out"
run tp4-sp-overlap 0 "${model[@]}" --kv-heads=4 --tp=4 --nranks=4 --sp --tp-overlap \
  --check-reference --json
equal tp4-sp-overlap 1
same tp4-sp-overlap "$t/tp4-sp.out"
run tp2-sp-fsdp2 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=4 --policy=fsdp2 --micro-steps=2 \
  --sp --check-reference --json
equal tp2-sp-fsdp2 1
run tp2-sp-pp2 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 --sp \
  --check-reference --json
saved tp2-sp-pp2 1
equal tp2-sp-pp2 1
cp "$t/out" "$t/tp2-sp-pp2.out"
run tp2-sp-pp2-overlap 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 \
  --sp --tp-overlap --check-reference --json
equal tp2-sp-pp2-overlap 1
same tp2-sp-pp2-overlap "$t/tp2-sp-pp2.out"
# ZB-H1 with --sp --tp-overlap: the norms' partial weight gradients summed
# over the tensor group after the last weight pass; bit for bit 1F1B's.
run tp2-sp-pp2-zb 0 "${model[@]}" --kv-heads=2 --tp=2 --pp=2 --nranks=4 --micro-steps=4 \
  --sp --tp-overlap --pp-schedule=zb-h1 --check-reference --json
equal tp2-sp-pp2-zb 1
same tp2-sp-pp2-zb "$t/tp2-sp-pp2.out" "the 1F1B --sp run"
run tp2-sp-ucx 0 "${model[@]}" --kv-heads=2 --tp=2 --nranks=4 --batch=1 --policy=fsdp2 \
  --backend=ucx --sp --check-reference --json
equal tp2-sp-ucx 0

bad heads "--tp=3 does not divide the model's 4 heads" "${model[@]}" --tp=3 --nranks=3
bad kv-heads "--tp=4 does not divide the model's 2 KV heads" "${model[@]}" --kv-heads=2 \
  --tp=4 --nranks=4
bad ffn "--tp=4 does not divide the model's 126 FFN width" "${model[@]/--ffn=128/--ffn=126}" \
  --kv-heads=4 --tp=4 --nranks=4
bad vocab "--vocab=130 not divisible by --tp=4" "${model[@]/--vocab=128/--vocab=130}" \
  --kv-heads=4 --tp=4 --nranks=4
bad vocab-sp "--vocab=130 not divisible by --tp=4" "${model[@]/--vocab=128/--vocab=130}" \
  --kv-heads=4 --tp=4 --nranks=4 --sp
bad more-than-ranks "--tp=4 is more than the 2 ranks" "${model[@]}" --tp=4 --nranks=2
bad not-dividing "--nranks=3 is not a multiple of --tp=2" "${model[@]}" --tp=2 --nranks=3
bad overlap-alone "--tp-overlap needs --tp > 1" "${model[@]}" --tp-overlap
bad sp-alone "--sp (sequence parallelism) needs --tp > 1" "${model[@]}" --sp
bad sp-tokens "--sp shards each rank's --seq x --batch = 34 tokens over --tp=4, which does not" \
  "${model[@]/--seq=32/--seq=34}" --kv-heads=4 --tp=4 --nranks=4 --batch=1 --sp
bad sp-full-recompute "--sp with full recompute does not run yet" "${model[@]}" --tp=2 \
  --nranks=2 --sp --recompute=full --recompute-layers=all
bad not-dividing-3d "--nranks=6 is not a multiple of --tp=2 x --pp=2" "${model[@]}" --tp=2 \
  --pp=2 --nranks=6
bad adamw8bit "--optimizer=adamw8bit is not run with --tp or --pp yet" "${model[@]}" --tp=2 \
  --nranks=2 --optimizer=adamw8bit
bad lora "--tp with LoRA adapters or NF4 base weights does not run yet" "${model[@]}" --tp=2 \
  --nranks=2 --lora-rank=4
bad sim-calibration-alone "--sim-calibration prices the simulator's figure" "${model[@]}" \
  --tp=2 --nranks=2 --sim-calibration="$t/ag.json"
echo '{"collective": "all_gather", "results": [1]}' >"$t/bad-ag.json"
bad sim-calibration-file "results[0] must be an object" "${model[@]}" --tp=2 --nranks=2 \
  --trace="$t/bad.json" --sim-calibration="$t/bad-ag.json"
exit $fail
