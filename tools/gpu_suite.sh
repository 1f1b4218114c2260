#!/usr/bin/env bash
# baton's GPU suite, run from a bundle made by tools/gpu_bundle.sh on a GPU
# machine without Bazel (docs/gpu.md). Parts run in priority order:
#   figure/, check/  the GPU figures still owed, one short pass each, and the
#                    checks that are not gtest cases; first the stream test
#                    that hung on 2026-11-22, with a 60 s per-case deadline
#   plain/           every test binary with GPU cases (tests.txt: gpu)
#   sanitizer/probe, memcheck/
#                    compute-sanitizer memcheck of the GPU unit tests that
#                    link a CUDA source changed since the last measured run
#                    (memcheck.txt, written at bundle time)
#   racecheck/       attention, rmsnorm, cross_entropy under racecheck
#   bench/           the full benches, the kernel table, whole steps
#   host/            the test binaries without GPU cases (CI runs them too)
#
#   run_gpu_suite.sh [--budget=SECONDS [--call=1|2 [--plan=SECONDS]]] [--only=REGEX]
#                    [--dry-run]
#
# --budget=S  stop cleanly before S seconds: a part starts only when its
#             expected time (times.tsv) fits what is left less a reserve
#             of 10 s for the summary, and runs under `timeout` with at
#             most what is left (and at most max(2 x expected, expected +
#             60 s)), so an overrun cannot eat the next call.
# --call=N    the plan splits the parts over two calls of P seconds each
#             (first fit, in priority order); --call=1 runs call 1's parts,
#             --call=2 every part call 1 does not hold, in order, while
#             they fit S. Without --call, every part that still fits runs.
# --plan=P    the calls' length in the plan (default S): call 2 usually
#             gets less time than call 1 (--budget=200 --plan=540 --call=2).
# --only=RE   only the parts whose id matches the extended regex.
# --dry-run   print the plan (each part's expected time and its source)
#             and exit; needs no GPU.
#
# Prints each part as it ends, then what was skipped for time, the FAILED
# lines, the figures (also logs/figures.txt), and last one line
# `N passed, M failed, K skipped` (gtest cases, plus one case per check/
# part; a binary that dies or times out without its XML counts as one
# failure, named). Exit status 1 if anything failed. logs/times.tsv gets
# each part's measured time in times.tsv's format.
#
# Environment: LOGS (default ./logs beside this script), SANITIZER
# (compute-sanitizer path), BATON_TEST_DEADLINE_S (per test case, default
# 120; 10x under the sanitizers), NVIDIA_SMI (default nvidia-smi).
set -uo pipefail
prog=run_gpu_suite
die2() { echo "$prog: $*" >&2; exit 2; }

budget="" call="" plan="" dry=0 only="" seen=" "
for arg in "$@"; do
  key="${arg%%=*}"
  case "$seen" in *" $key "*) die2 "$key given twice" ;; esac
  seen+="$key "
  case "$arg" in
    --budget=*) budget="${arg#--budget=}" ;;
    --call=*) call="${arg#--call=}" ;;
    --plan=*) plan="${arg#--plan=}" ;;
    --only=*) only="${arg#--only=}" ;;
    --dry-run) dry=1 ;;
    --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die2 "unknown argument '$arg' (--budget=SECONDS, --call=1|2, --plan=SECONDS, --only=REGEX, --dry-run, --help)" ;;
  esac
done
given() { [[ "$seen" == *" $1 "* ]]; }
if given --budget; then
  [[ "$budget" =~ ^[0-9]{1,6}$ ]] && [ $((10#$budget)) -ge 1 ] ||
    die2 "--budget must be whole seconds in [1, 999999], got '$budget'"
  budget=$((10#$budget))
fi
if given --call; then
  [[ "$call" =~ ^[12]$ ]] || die2 "--call must be 1 or 2, got '$call'"
  [ -n "$budget" ] || die2 "--call needs --budget (the plan it picks from splits the parts by the budget)"
fi
if given --plan; then
  [[ "$plan" =~ ^[0-9]{1,6}$ ]] && [ $((10#$plan)) -ge 1 ] ||
    die2 "--plan must be whole seconds in [1, 999999], got '$plan'"
  [ -n "$budget" ] || die2 "--plan needs --budget"
  plan=$((10#$plan))
fi
plan="${plan:-$budget}"
if given --only; then
  [ -n "$only" ] || die2 "--only needs a regex"
  grep -qE -- "$only" <<< "" 2> /dev/null; [ $? -eq 2 ] && die2 "--only: '$only' is not an extended regex"
fi

here="$(cd "$(dirname "$0")" && pwd)"
for f in tests.txt memcheck.txt times.tsv; do
  [ -f "$here/$f" ] || die2 "no $f beside $0: run the copy in a bundle (tools/gpu_bundle.sh DIR)"
done
line=$(awk -F'\t' 'NF && !(NF == 2 && ($2 == "gpu" || $2 == "host")) { print NR; exit }' "$here/tests.txt")
[ -z "$line" ] || die2 "tests.txt line $line: want PATH<TAB>gpu|host"
reserve=10

# --- expected times -------------------------------------------------------
declare -A est_s est_src
n=0
while IFS=$'\t' read -r key secs src rest; do
  n=$((n + 1))
  case "$key" in ''|'#'*) continue ;; esac
  [[ "$secs" =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ -n "$src" ] && [ -z "${rest:-}" ] ||
    die2 "times.tsv line $n: want KEY<TAB>SECONDS<TAB>SOURCE, got '$key $secs $src'"
  whole="${secs%%.*}"; frac="${secs#"$whole"}"; frac="${frac#.}"
  whole=$((10#$whole))
  [[ "$frac" =~ [1-9] ]] && whole=$((whole + 1))
  [ "$whole" -lt 1 ] && whole=1
  est_s[$key]=$whole
  est_src[$key]="$src"
done < "$here/times.tsv"

# expect ID: sets E (whole seconds) and S (where the figure comes from).
expect() {
  local id="$1" t="${1#*/}"
  if [ -n "${est_s[$id]+x}" ]; then E=${est_s[$id]}; S="${est_src[$id]}"; return; fi
  case "$id" in
    plain/*|host/*)
      if [ -n "${est_s[test:$t]+x}" ]; then E=${est_s[test:$t]}; S="${est_src[test:$t]}"
      else E=5; S="est: no time recorded for this test"; fi ;;
    memcheck/*) expect "plain/$t"; S="est: 10 s + 4 x its plain $E s (no sanitizer time logged yet)"; E=$((10 + 4 * E)) ;;
    racecheck/*) expect "plain/$t"; S="est: 15 s + 8 x its plain $E s (no sanitizer time logged yet)"; E=$((15 + 8 * E)) ;;
    *) E=30; S="est: no time recorded" ;;
  esac
}

# --- the parts, in priority order -----------------------------------------
# Lower floors first (the CUDA code lives there), tests/ (end to end) last.
floor_sort() {
  awk '{ split($0, p, "/"); r = index(" runtime memory ops comm cli scheduler optim parallel sim examples bench tests ", " " p[1] " ");
         printf "%04d %s\n", r == 0 ? 999 : r, $0 }' | sort | cut -d' ' -f2-
}
mapfile -t gpu_tests < <(awk -F'\t' '$2 == "gpu" { print $1 }' "$here/tests.txt" | floor_sort)
mapfile -t host_tests < <(awk -F'\t' '$2 == "host" { print $1 }' "$here/tests.txt" | floor_sort)
# memcheck: attention first (its forward read shared memory out of bounds on
# 2026-11-22), the other ops next (most of the changed kernels), then the rest.
mapfile -t mc_tests < <(grep -v '^#' "$here/memcheck.txt" | grep . | floor_sort |
                        awk '{ print ($0 == "ops/attention_test" ? 0 : $0 ~ /^ops\// ? 1 : 2), NR, $0 }' |
                        sort -k1,1n -k2,2n | cut -d' ' -f3-)
has_test() { grep -q -x -F -- "$1" < <(cut -f1 "$here/tests.txt"); }

ids=(figure/stream_wait_hang figure/inproc_1MiB figure/event_handoff figure/graph_replay
     figure/cudnn_attention figure/train_tiny_8block figure/torch_peer_8block
     check/train_tiny_cuda_reference)
for t in "${gpu_tests[@]}"; do ids+=("plain/$t"); done
ids+=(sanitizer/probe)
for t in "${mc_tests[@]}"; do ids+=("memcheck/$t"); done
for t in ops/attention_test ops/rmsnorm_test ops/cross_entropy_test; do
  has_test "$t" && ids+=("racecheck/$t")
done
ids+=(bench/collectives bench/ops bench/kernel_table bench/whole_steps)
for t in "${host_tests[@]}"; do ids+=("host/$t"); done
if [ -n "$only" ]; then
  mapfile -t ids < <(printf '%s\n' "${ids[@]}" | grep -E -- "$only")
  [ ${#ids[@]} -gt 0 ] || die2 "--only='$only' matches no part (see --dry-run)"
fi

exp_of=() src_of=() call_of=()
for i in "${!ids[@]}"; do expect "${ids[$i]}"; exp_of[$i]=$E; src_of[$i]="$S"; call_of[$i]=1; done
ncalls=1
if [ -n "$budget" ]; then
  ncalls=2
  for i in "${!ids[@]}"; do call_of[$i]=0; done
  for c in 1 2; do
    left=$((plan - reserve))
    for i in "${!ids[@]}"; do
      if [ "${call_of[$i]}" -eq 0 ] && [ "${exp_of[$i]}" -le "$left" ]; then
        call_of[$i]=$c; left=$((left - exp_of[$i]))
      fi
    done
  done
fi

commit="$(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
print_plan() {
  local c i cnt sum
  if [ -n "$budget" ]; then
    echo "$prog: plan for 2 calls of $plan s (each keeps $reserve s for its summary); bundle of $commit"
    [ "$plan" -ne "$budget" ] && echo "this call: --budget=$budget"
  else
    echo "$prog: plan for one call without a budget; bundle of $commit"
  fi
  grep '^# ' "$here/memcheck.txt" | head -3 | sed 's/^# /memcheck.txt: /'
  for c in $(seq 1 $ncalls) 0; do
    cnt=0 sum=0
    for i in "${!ids[@]}"; do
      [ "${call_of[$i]}" -eq "$c" ] && cnt=$((cnt + 1)) && sum=$((sum + exp_of[$i]))
    done
    if [ "$c" -eq 0 ]; then
      [ "$cnt" -eq 0 ] && continue
      echo "not planned (no room in $ncalls calls): $cnt parts, expected $sum s"
    else
      echo "call $c: $cnt parts, expected $sum s${budget:+ of $((plan - reserve))}"
    fi
    for i in "${!ids[@]}"; do
      [ "${call_of[$i]}" -eq "$c" ] &&
        printf '  %3d  %-42s %4d s  %s\n' $((i + 1)) "${ids[$i]}" "${exp_of[$i]}" "${src_of[$i]}"
    done
  done
  echo "sources: 'log 2026-11-22' = ../shared/gpu/h100_tests_2026-11-22.log (one H100 80GB);" \
       "'host' = the same binary on the 2-core development machine; 'est' = an estimate, its basis given"
}
if [ $dry -eq 1 ]; then print_plan; exit 0; fi

# shellcheck source=tools/gpu_suite_run.sh
. "$here/gpu_suite_run.sh"
