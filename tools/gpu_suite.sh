#!/usr/bin/env bash
# baton's GPU suite, run from a bundle made by tools/gpu_bundle.sh, on a GPU
# machine without Bazel (the bundle carries its non-system libraries):
#
#   ./run_gpu_suite.sh             # logs and gtest XML under ./logs
#   ./run_gpu_suite.sh --phases=plain,memcheck --tests='^ops/'
#
# --phases=LIST   which of plain, memcheck, racecheck, bench, wholestep run
#                 (default all five); a GPU machine lent by the call (e.g. 10
#                 minutes a command) takes the suite in a few such calls.
# --tests=REGEX   only the test binaries whose path (as in tests.txt, e.g.
#                 ops/attention_test) matches the extended regex.
#
# 1. every test binary once plainly (GPU cases skip where no GPU is seen);
# 2. with a GPU and compute-sanitizer: every test binary under
#    `compute-sanitizer --tool memcheck`, and the ops with shared-memory
#    kernels (attention, rmsnorm, cross_entropy) under racecheck too;
# 3. with a GPU: the GPU benches (runtime, inproc on device memory with
#    2/4/8 ranks, nccl with 1 rank; //bench:ops; //bench:kernels writing
#    logs/kernels.json, then simulate pricing a step from that table;
#    scheduler --cuda: eager vs CUDA-graph replay);
# 4. with a GPU and PyTorch: whole training steps of three Llama shapes in
#    PyTorch eager (torch_step.py) against simulate --gpus=1, with the
#    shipped kernel table and with logs/kernels.json where step 3 wrote it
#    (whole_step.py; rows in logs/whole_step.json).
# Ends with one line `N passed, M failed, K skipped` (test cases, from gtest's
# XML; a binary that dies without its XML counts as one failure, named),
# then the bench figures. Exit status 1 if anything failed.
#
# Environment: BATON_TEST_DEADLINE_S (per test case, default 300; 10x under
# the sanitizers), LOGS (default ./logs), SANITIZER (compute-sanitizer path).
set -uo pipefail
phases="plain,memcheck,racecheck,bench,wholestep"
filter=""
for arg in "$@"; do
  case "$arg" in
    --phases=*) phases="${arg#--phases=}" ;;
    --tests=*) filter="${arg#--tests=}" ;;
    *) echo "run_gpu_suite: unknown argument '$arg' (--phases=LIST, --tests=REGEX)" >&2
       exit 2 ;;
  esac
done
for ph in ${phases//,/ }; do
  case "$ph" in
    plain|memcheck|racecheck|bench|wholestep) ;;
    *) echo "run_gpu_suite: unknown phase '$ph' in --phases (plain, memcheck, racecheck, bench, wholestep)" >&2
       exit 2 ;;
  esac
done
want() { [[ ",$phases," == *",$1,"* ]]; }
here="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$here/lib/ucx"
deadline="${BATON_TEST_DEADLINE_S:-300}"
logs="${LOGS:-$here/logs}"
mkdir -p "$logs"
cd "$here/bin"  # tests find examples/train_tiny relative to here

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
fi
san="${SANITIZER:-$(command -v compute-sanitizer || true)}"
[ -z "$san" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
  san=/usr/local/cuda/bin/compute-sanitizer

passed=0 failed=0 skipped=0
failures=()

# count XML -> "passed failed skipped"
count_xml() {
  python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
p = f = s = 0
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if tc.get("result") == "skipped" or tc.find("skipped") is not None:
        s += 1
    elif tc.find("failure") is not None or tc.find("error") is not None:
        f += 1
    else:
        p += 1
print(p, f, s)
PY
}

# run TAG TEST [prefix...]: one test binary, counted.
run() {
  local tag="$1" test="$2"; shift 2
  local name="${test//\//_}" xml="$logs/$tag/${test//\//_}.xml"
  mkdir -p "$logs/$tag"
  rm -f "$xml"
  local d="$deadline"
  [ "$tag" != plain ] && d=$((deadline * 10))
  local start=$SECONDS
  BATON_TEST_DEADLINE_S="$d" "$@" "./$test" --gtest_output="xml:$xml" \
    > "$logs/$tag/$name.log" 2>&1
  local rc=$?
  local p=0 f=0 s=0
  if [ -s "$xml" ]; then read -r p f s < <(count_xml "$xml"); fi
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    failures+=("$tag $test: exit $rc ($(grep -m1 -E 'DEADLINE|ERROR SUMMARY|Aborted|Segmentation' "$logs/$tag/$name.log" || echo "see $logs/$tag/$name.log"))")
  elif [ "$f" -gt 0 ]; then
    failures+=("$tag $test: $f failed ($logs/$tag/$name.log)")
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-9s %-40s %4d passed %3d failed %4d skipped  %4ds\n' \
    "$tag" "$test" "$p" "$f" "$s" $((SECONDS - start))
}

mapfile -t tests < <(grep -E -- "${filter:-.}" "$here/tests.txt")
if [ -n "$filter" ] && [ ${#tests[@]} -eq 0 ]; then
  echo "run_gpu_suite: no test in tests.txt matches --tests='$filter'" >&2
  exit 2
fi
if want plain; then
  for t in "${tests[@]}"; do run plain "$t"; done
fi

if { want memcheck || want racecheck; } && { [ $gpu -eq 0 ] || [ -z "$san" ]; }; then
  echo "memcheck/racecheck: not run ($([ $gpu -eq 1 ] && echo 'no compute-sanitizer' || echo 'no GPU'))"
elif { want memcheck || want racecheck; }; then
  if want memcheck; then
    for t in "${tests[@]}"; do
      run memcheck "$t" "$san" --tool memcheck --error-exitcode 86 --print-limit 20
    done
  fi
  if want racecheck; then
    for t in ops/attention_test ops/rmsnorm_test ops/cross_entropy_test; do
      printf '%s\n' "${tests[@]}" | grep -qx "$t" || continue
      [ -x "$t" ] && run racecheck "$t" "$san" --tool racecheck --error-exitcode 86 --print-limit 20
    done
  fi
fi

bench="$logs/bench.txt"
: > "$bench"
if [ $gpu -eq 1 ] && want bench; then
  ./bench/runtime --benchmark_filter=Cuda >> "$bench" 2>&1 ||
    failures+=("bench runtime: exit $?")
  for n in 2 4 8; do
    for c in all_gather reduce_scatter all_reduce; do
      ./bench/collectives --backend=inproc --device=cuda --nranks=$n \
        --collective=$c -b 1M -e 256M -f 4 >> "$bench" 2>&1 ||
        failures+=("bench collectives inproc $c $n ranks: exit $?")
    done
  done
  ./bench/collectives --backend=nccl --nranks=1 --collective=all_gather \
    -b 1M -e 256M -f 4 >> "$bench" 2>&1 ||
    failures+=("bench collectives nccl 1 rank: exit $?")
  # Every op against the device's copy rate / cuBLAS (last line JSON), then
  # the kernel table of this GPU and the simulator reading it.
  ./bench/ops --device=cuda >> "$bench" 2>&1 || failures+=("bench ops: exit $?")
  ./bench/kernels --device=cuda --out="$logs/kernels.json" >> "$bench" 2>&1 ||
    failures+=("bench kernels: exit $?")
  ./examples/simulate --model=llama3-8b --gpus=8 --global-batch=64 --policy=baton \
    --kernel-table="$logs/kernels.json" >> "$bench" 2>&1 ||
    failures+=("simulate --kernel-table with the measured table: exit $?")
  ./bench/scheduler --model=tiny --ranks=8 --issue-steps=20 --cuda >> "$bench" 2>&1 ||
    failures+=("bench scheduler --cuda: exit $?")
fi

# Whole steps on this GPU against the simulator (issue: validation).
whole="$logs/whole_step.txt"
: > "$whole"
if want wholestep; then
  if [ $gpu -eq 0 ]; then
    echo "whole steps: not run (no GPU)" > "$whole"
  elif ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "whole steps: not run (no PyTorch with CUDA)" > "$whole"
  else
    table=()
    [ -s "$logs/kernels.json" ] && table=(--kernel-table="$logs/kernels.json")
    python3 "$here/whole_step.py" --simulate=./examples/simulate \
      --torch-step="$here/torch_step.py" ${table[@]+"${table[@]}"} --json="$logs/whole_step.json" \
      > "$whole" 2>&1 || failures+=("whole_step: exit $? (see $whole)")
  fi
fi

for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed, $skipped skipped"
if [ $gpu -eq 1 ] && want bench; then
  grep -vE '^#  |^# (minBytes|Using|out-of-place)|^-{5}|^Run on|^CPU|^  L[0-9]|^Load Average' "$bench"
else
  echo "benches: not run ($([ $gpu -eq 1 ] && echo 'not in --phases' || echo 'no GPU'))"
fi
want wholestep && cat "$whole"
[ "$failed" -eq 0 ] && [ ${#failures[@]} -eq 0 ]
