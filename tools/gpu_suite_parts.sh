# The GPU suite's parts (sourced by tools/gpu_suite_run.sh; the bundle
# carries it beside run_gpu_suite.sh). run_part ID runs one part from bin/
# under the part's deadline (tmo) and returns 0 ok, 1 failed, 3 skipped (it
# could not run here, detail says why) or 124 timed out; it sets detail and
# appends the part's figures to logs/figures.txt (fig).

# The stream test that hung on 2026-11-22 (FINDINGS.md): it runs first,
# alone, with a short per-case deadline; plain/runtime/device_test leaves it
# out.
hang_case='*WaitCapturesTheRecordCurrentAtTheTimeOfTheWait/cuda'
# train_tiny's 8-block shape, as ../shared/peers/torch_llama.py (peers/).
tiny8=(--layers=8 --hidden=1024 --heads=16 --kv-heads=4 --ffn=2816 --vocab=32000 --seq=1024
       --batch=8)

part_stream_wait_hang() {
  run_gtest figure runtime/device_test "$hang_case" 60 || return
  [ "$last_passed" -gt 0 ] && return 0
  detail="the case did not run on the GPU (the test saw none): $detail"
  return 1
}

# Per-call cost at 1 MiB and the shared-device limit (at 256 MiB), inproc
# on device memory, 2 and 8 ranks.
part_inproc_1MiB() {
  local out="$logs/figure_inproc_1MiB.txt" one="$logs/figure_inproc_1MiB.one" n c r row lim rc=0
  : > "$out"
  for n in 2 8; do
    for c in all_gather reduce_scatter all_reduce; do
      tmo ./bench/collectives --backend=inproc --device=cuda --nranks=$n --collective=$c \
        -b 1M -e 256M -f 256 > "$one" 2>&1
      r=$?
      { echo "=== inproc cuda $c n=$n (exit $r)"; cat "$one"; } >> "$out"
      if timed_out $r; then detail="timed out in $c n=$n ($out)"; return 124; fi
      row=$(awk '$1 == 1048576 { printf "%s us out-of-place, %s us in-place", $6, $10 }' "$one")
      lim=$(awk '$1 == 268435456 { printf "256 MiB busbw %s GB/s", $8 }' "$one")
      lim="$lim; $(grep -m1 '^# Limit bandwidth' "$one" | sed 's/^# //')"
      if [ $r -ne 0 ] || [ -z "$row" ]; then
        rc=1; fig "inproc $c n=$n: not measured (exit $r, $out)"; continue
      fi
      fig "inproc $c n=$n: 1 MiB $row (aim <= $([ $n -eq 2 ] && echo 20 || echo 40) us); $lim"
    done
  done
  [ $rc -eq 0 ] && detail="6 runs ($out)" || detail="a run failed: $(why "$one") ($out)"
  rm -f "$one"
  return $rc
}

part_event_handoff() {
  local out="$logs/figure_event_handoff.txt" r line
  tmo ./bench/runtime --benchmark_filter=Cuda > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  grep -E '^BM_Cuda' "$out" | awk '{ printf "runtime %s: %s %s\n", $1, $2, $3 }' >> "$logs/figures.txt"
  line=$(grep -m1 '^CUDA event handoff on GPU timestamps' "$out")
  fig "${line:-CUDA event handoff on GPU timestamps: missing} (aim <= 10 us)"
  [ $r -eq 0 ] && [ -n "$line" ] && [[ "$line" != *"not measured"* ]] && { detail="$out"; return 0; }
  detail="exit $r: $(why "$out") ($out)"; return 1
}

# Eager vs CUDA-graph replay of a step (host time per step).
part_graph_replay() {
  local out="$logs/figure_graph_replay.txt" r rows
  tmo ./bench/scheduler --model=tiny --ranks=8 --issue-steps=20 --cuda > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  rows=$(awk '/^# CUDA graph/ { on = 1; next }
              on && NF == 6 && $2 ~ /^[0-9]+$/ && $3 > 0 {
                printf "graph %s (%s nodes): host us per step eager %s, replay %s (replay/eager %.3f, aim <= 0.05); GPU us eager %s, replay %s\n",
                       $1, $2, $3, $5, $5 / $3, $4, $6 }' "$out")
  detail="$out"
  if [ $r -ne 0 ] || [ -z "$rows" ]; then
    detail="exit $r: $(why "$out") ($out)"; fig "graph replay: not measured ($detail)"; return 1
  fi
  fig "$rows"
}

# cuDNN attention (bf16) forward and backward at every shipped shape; the
# figures keep sequence 4096.
part_cudnn_attention() {
  local out="$logs/figure_attention.txt" r rows
  tmo ./bench/ops --device=cuda --op=attention --min-time=0.05 > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  rows=$(awk '$1 == "attention" && $4 == "s4096" {
                printf "attention %s %s %s %s %s: %s us, %s %s (torch on an H100: %s us)\n",
                       $2, $3, $4, $5, $6, $7, $8, $9, $11 }' "$out")
  detail="$out"
  if [ $r -ne 0 ] || [ -z "$rows" ]; then
    detail="exit $r: $(why "$out") ($out)"; fig "attention at seq 4096: not measured ($detail)"; return 1
  fi
  fig "$rows"
  fig "(aim: forward >= 400 TFLOP/s on an H100)$(grep -m1 -i 'cudnn' "$out" | sed 's/^/; /')"
}

part_train_tiny_8block() {
  local out="$logs/figure_train_tiny_8block.txt" r line
  tmo ./examples/train_tiny "${tiny8[@]}" --steps=10 --dtype=bf16 --device=cuda --backend=nccl \
    --nranks=1 --json > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  line=$(grep -m1 '^time per step' "$out")
  baton_tps=$(json_field "$out" tokens_per_s)
  detail="$out"
  if [ $r -ne 0 ] || [ -z "$line" ]; then
    detail="exit $r: $(why "$out") ($out)"; fig "train_tiny 8-block: not measured ($detail)"; return 1
  fi
  fig "train_tiny 8-block bf16, nccl 1 rank, batch 8 x 1024: $line"
}

part_torch_peer_8block() {
  local out="$logs/figure_torch_peer_8block.txt" r line torch_tps
  if ! has_torch; then detail="no PyTorch with CUDA here"; return 3; fi
  tmo python3 "$here/peers/torch_llama.py" 8 > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  line=$(grep -m1 '^torch eager' "$out")
  detail="$out"
  if [ $r -ne 0 ] || [ -z "$line" ]; then
    detail="exit $r: $(why "$out") ($out)"; fig "torch peer 8-block: not measured ($detail)"; return 1
  fi
  fig "torch peer (peers/torch_llama.py 8): $line"
  torch_tps=$(sed -n 's/.* \([0-9][0-9]*\) tokens\/s.*/\1/p' <<< "$line")
  if [ -n "$baton_tps" ] && [ -n "$torch_tps" ]; then
    fig "$(awk -v b="$baton_tps" -v t="$torch_tps" 'BEGIN { printf "train_tiny / torch eager, 8-block: %.2fx tokens/s (aim >= 0.8)", b / t }')"
  fi
}

# train_tiny sharded on CUDA against the unsharded run (a check: one case).
part_train_tiny_cuda_reference() {
  local out="$logs/check_train_tiny_cuda_reference.txt" r rel
  tmo ./examples/train_tiny --device=cuda --backend=inproc --nranks=4 --check-reference --json \
    > "$out" 2>&1
  r=$?
  rel=$(json_field "$out" max_rel_diff_vs_reference)
  if timed_out $r; then failed=$((failed + 1)); detail="($out)"; return 124; fi
  fig "train_tiny cuda inproc 4 ranks f32 vs unsharded: largest relative loss difference ${rel:-missing} (limit 1e-5; 1.05e-06 on 2026-11-22)"
  if [ $r -eq 0 ] && [ -n "$rel" ] && awk -v x="$rel" 'BEGIN { exit !(x <= 1e-5) }'; then
    passed=$((passed + 1)); detail="$rel"; return 0
  fi
  failed=$((failed + 1)); detail="exit $r, difference ${rel:-missing}: $(why "$out") ($out)"; return 1
}

# Whether compute-sanitizer runs here at all: memcheck over one CUDA case.
part_sanitizer_probe() {
  local log="$logs/sanitizer_probe.log" r
  if [ ! -x ./runtime/pinned_host_test ]; then
    detail="no runtime/pinned_host_test to probe with; the sanitizer parts run unprobed"; return 3
  fi
  tmo "$san" --tool memcheck --error-exitcode 86 ./runtime/pinned_host_test \
    --gtest_filter=PinnedHostTest.CudaRoundTrip > "$log" 2>&1
  r=$?
  if [ $r -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$log"; then
    detail="$("$san" --version 2> /dev/null | tail -1) runs here"; return 0
  fi
  if grep -q 'ERROR SUMMARY: [1-9]' "$log"; then
    detail="memcheck found errors in PinnedHostTest.CudaRoundTrip ($log)"; return 1
  fi
  san_off="compute-sanitizer refused by this machine: $(grep -m1 -E '^=+ *(Error|Internal|ERROR)' "$log" ||
    grep -m1 . "$log" || echo "exit $r") ($log)"
  detail="$san_off"
  return 3
}

part_bench_collectives() {
  local out="$logs/bench_collectives.txt" n c r rc=0
  : > "$out"
  for n in 2 4 8; do
    for c in all_gather reduce_scatter all_reduce; do
      echo "=== collectives inproc cuda $c n=$n" >> "$out"
      tmo ./bench/collectives --backend=inproc --device=cuda --nranks=$n --collective=$c \
        -b 1M -e 256M -f 4 >> "$out" 2>&1
      r=$?
      timed_out $r && { detail="timed out in $c n=$n ($out)"; return 124; }
      [ $r -eq 0 ] || { rc=1; detail="$c n=$n: exit $r"; }
    done
  done
  echo "=== collectives nccl 1 rank" >> "$out"
  tmo ./bench/collectives --backend=nccl --nranks=1 --collective=all_gather -b 1M -e 256M -f 4 \
    >> "$out" 2>&1
  r=$?
  timed_out $r && { detail="timed out in nccl ($out)"; return 124; }
  [ $r -eq 0 ] || { rc=1; detail="nccl: exit $r"; }
  awk '/^=== / { name = substr($0, 5) } /^# Peak busbw/ { print name ": " substr($0, 3) }' "$out" \
    >> "$logs/figures.txt"
  [ $rc -eq 0 ] && detail="$out" || detail="$detail and maybe more: $(why "$out") ($out)"
  return $rc
}

part_bench_ops() {
  local out="$logs/bench_ops.txt" r
  tmo ./bench/ops --device=cuda > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  detail="$(grep -cE '^[a-z_]+ +(fwd|bwd|loss|fused|step) ' "$out") rows ($out)"
  fig "bench/ops: $detail"
  [ $r -eq 0 ] && return 0
  detail="exit $r: $(why "$out") ($out)"; return 1
}

# The kernel table of this GPU, and the simulator pricing a step from it.
part_kernel_table() {
  local out="$logs/bench_kernels.txt" r
  tmo ./bench/kernels --device=cuda --out="$logs/kernels.json" > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  [ $r -eq 0 ] && [ -s "$logs/kernels.json" ] || { detail="exit $r: $(why "$out") ($out)"; return 1; }
  tmo ./examples/simulate --model=llama3-8b --gpus=8 --global-batch=64 --policy=baton \
    --kernel-table="$logs/kernels.json" >> "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  fig "simulate llama3-8b, 8 GPUs, with logs/kernels.json: $(grep -m1 '^baton ' "$out" | awk '{ print "step " $2 " s, MFU " $6 }')"
  detail="$out"
  [ $r -eq 0 ] && return 0
  detail="simulate: exit $r: $(why "$out") ($out)"; return 1
}

# Whole steps in PyTorch eager against simulate --gpus=1 (whole_step.py).
part_whole_steps() {
  local out="$logs/whole_step.txt" r table=()
  if ! has_torch; then detail="no PyTorch with CUDA here"; return 3; fi
  [ -s "$logs/kernels.json" ] && table=(--kernel-table="$logs/kernels.json")
  tmo python3 "$here/whole_step.py" --simulate=./examples/simulate \
    --torch-step="$here/torch_step.py" ${table[@]+"${table[@]}"} \
    --json="$logs/whole_step.json" > "$out" 2>&1
  r=$?
  timed_out $r && { detail="($out)"; return 124; }
  cat "$out" >> "$logs/figures.txt"
  detail="$out"
  [ $r -eq 0 ] && return 0
  detail="exit $r: $(why "$out") ($out)"; return 1
}

run_part() {
  local t="${1#*/}"
  case "$1" in
    figure/stream_wait_hang) part_stream_wait_hang ;;
    figure/inproc_1MiB) part_inproc_1MiB ;;
    figure/event_handoff) part_event_handoff ;;
    figure/graph_replay) part_graph_replay ;;
    figure/cudnn_attention) part_cudnn_attention ;;
    figure/train_tiny_8block) part_train_tiny_8block ;;
    figure/torch_peer_8block) part_torch_peer_8block ;;
    check/train_tiny_cuda_reference) part_train_tiny_cuda_reference ;;
    plain/runtime/device_test) run_gtest plain "$t" "-$hang_case" "$deadline" ;;
    plain/*|host/*) run_gtest "${1%%/*}" "$t" "" "$deadline" ;;
    sanitizer/probe) part_sanitizer_probe ;;
    memcheck/*|racecheck/*)  # cases named /host never reach a GPU
      run_gtest "${1%%/*}" "$t" '-*/host' $((deadline * 10)) \
        "$san" --tool "${1%%/*}" --error-exitcode 86 --print-limit 20 ;;
    bench/collectives) part_bench_collectives ;;
    bench/ops) part_bench_ops ;;
    bench/kernel_table) part_kernel_table ;;
    bench/whole_steps) part_whole_steps ;;
    *) detail="no such part"; return 1 ;;
  esac
}
