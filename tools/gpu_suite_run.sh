# Sourced by run_gpu_suite.sh (tools/gpu_suite.sh) once it has planned the
# parts (ids, exp_of, call_of, budget, call, reserve, here): runs them in
# order within the budget, then prints the summary. Not a program of its
# own; the bundle carries it beside run_gpu_suite.sh.

export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$here/lib/ucx"
deadline="${BATON_TEST_DEADLINE_S:-120}"
[[ "$deadline" =~ ^[0-9]{1,5}$ ]] && [ "$deadline" -ge 1 ] ||
  die2 "BATON_TEST_DEADLINE_S must be whole seconds in [1, 99999], got '$deadline'"
logs="${LOGS:-$here/logs}"
mkdir -p "$logs" 2> /dev/null || die2 "cannot create LOGS=$logs"
logs="$(cd "$logs" && pwd)"
: > "$logs/figures.txt"
: > "$logs/times.tsv"
cd "$here/bin" 2> /dev/null || die2 "no bin/ in the bundle $here"

smi="${NVIDIA_SMI:-nvidia-smi}"
gpu=0 gpu_name="no GPU"
if "$smi" -L > /dev/null 2>&1; then
  gpu=1
  gpu_name="$("$smi" -L | head -1 | sed 's/^GPU [0-9]*: //; s/ (UUID.*//')"
  gpu_name="${gpu_name:-a GPU that nvidia-smi -L does not name}"
fi
san="${SANITIZER:-$(command -v compute-sanitizer || true)}"
[ -z "$san" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && san=/usr/local/cuda/bin/compute-sanitizer
san_off=""  # why sanitizer parts cannot run here ("" while they can)
[ -z "$san" ] && san_off="no compute-sanitizer here"

passed=0 failed=0 skipped=0
failures=() skipped_time=() skipped_other=()
n_ran=0 n_ok=0
start=$SECONDS part_end=0 detail="" baton_tps="" last_passed=0

fig() { printf '%s\n' "$*" >> "$logs/figures.txt"; }

# tmo CMD...: CMD under timeout up to the running part's end (124 past it).
tmo() {
  local rem=$((part_end - SECONDS))
  [ "$rem" -ge 1 ] || return 124
  timeout -k 5 "$rem" "$@"
}
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

# count_xml FILE -> "passed failed skipped" (gtest's XML)
count_xml() {
  python3 - "$1" << 'PY'
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

# run_gtest TAG TEST FILTER DEADLINE [PREFIX...]: one test binary, counted.
# Returns 0 when every case passed, 124 on timeout, else 1; sets detail.
run_gtest() {
  local tag="$1" test="$2" filter="$3" dl="$4"; shift 4
  local name="${test//\//_}"
  local xml="$logs/$tag/$name.xml" log="$logs/$tag/$name.log"
  mkdir -p "$logs/$tag"
  rm -f "$xml"
  if [ ! -x "./$test" ]; then
    failed=$((failed + 1)); detail="no binary bin/$test in the bundle"; return 1
  fi
  local args=("--gtest_output=xml:$xml")
  [ -n "$filter" ] && args+=("--gtest_filter=$filter")
  BATON_TEST_DEADLINE_S="$dl" tmo "$@" "./$test" "${args[@]}" > "$log" 2>&1
  local rc=$? p=0 f=0 s=0
  [ -s "$xml" ] && read -r p f s < <(count_xml "$xml")
  detail="$p passed, $f failed, $s skipped"
  if timed_out $rc; then
    rc=124; f=$((f + 1))
    detail="timed out in $(grep '^\[ RUN' "$log" | tail -1 | sed 's/^\[ RUN *\] //') ($log)"
  elif [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    detail="exit $rc: $(grep -m1 -E 'DEADLINE|Invalid|Race|ERROR SUMMARY|Aborted|Segmentation|error while loading' "$log" || echo "see $log")"
  elif [ "$f" -gt 0 ]; then
    detail="$f failed ($log)"
  elif [ -n "$filter" ] && [ $((p + s)) -eq 0 ]; then
    f=1; detail="--gtest_filter=$filter matched no case"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  last_passed=$p
  [ $rc -eq 124 ] && return 124
  [ "$f" -eq 0 ]
}

# json_field FILE KEY: KEY of the JSON object on FILE's last line.
json_field() {
  tail -1 "$1" | python3 -c 'import json, sys; v = json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else v)' "$2" 2> /dev/null
}
# why FILE: the first line of FILE that says what went wrong, else its last.
why() {
  grep -m1 -iE 'error|unavailable|failed|not measured|refused|no such|denied|out of memory' "$1" 2> /dev/null ||
    tail -1 "$1" 2> /dev/null
}
has_torch() { python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2> /dev/null; }

. "$here/gpu_suite_parts.sh"

# --- run ------------------------------------------------------------------
for i in "${!ids[@]}"; do
  id="${ids[$i]}" exp="${exp_of[$i]}"
  [ "$call" = 1 ] && [ "${call_of[$i]}" -ne 1 ] && continue
  [ "$call" = 2 ] && [ "${call_of[$i]}" -eq 1 ] && continue
  case "$id" in
    host/*) ;;
    *) if [ $gpu -eq 0 ]; then skipped_other+=("no GPU|$id"); continue; fi ;;
  esac
  case "$id" in
    sanitizer/*|memcheck/*|racecheck/*)
      if [ -n "$san_off" ]; then skipped_other+=("$san_off|$id"); continue; fi ;;
  esac
  left=999999
  [ -n "$budget" ] && left=$((budget - (SECONDS - start) - reserve))
  if [ "$exp" -gt "$left" ]; then
    skipped_time+=("$id (expected $exp s, $((left > 0 ? left : 0)) s left)"); continue
  fi
  cap=$((2 * exp > exp + 60 ? 2 * exp : exp + 60))
  [ "$id" = figure/stream_wait_hang ] && cap=80  # its 60 s case deadline + start
  part_end=$((SECONDS + (cap < left ? cap : left)))
  t0=$SECONDS detail=""
  run_part "$id"
  r=$?
  dt=$((SECONDS - t0))
  case $r in
    0) st=ok; n_ok=$((n_ok + 1)) ;;
    3) st=skipped; skipped_other+=("$detail|$id") ;;
    124) st=TIMEOUT; failures+=("$id: timed out after $dt s (expected $exp s): $detail") ;;
    *) st=FAILED; failures+=("$id: $detail") ;;
  esac
  [ $r -ne 3 ] && n_ran=$((n_ran + 1))
  printf '[%4d s] %-40s %-7s %4d s (exp %d)  %s\n' $((SECONDS - start)) "$id" "$st" "$dt" "$exp" "$detail"
  case "$id" in plain/*|host/*) key="test:${id#*/}" ;; *) key="$id" ;; esac
  printf '%s\t%d\t%s\n' "$key" "$dt" "run $(date -u +%F) on $gpu_name ($st)" >> "$logs/times.tsv"
done

# --- summary ----------------------------------------------------------------
echo "== $prog: $((SECONDS - start)) s${budget:+ of --budget=$budget}${call:+, call $call of 2}" \
     "on $gpu_name: $n_ran parts ran ($n_ok ok), ${#skipped_time[@]} skipped for time," \
     "${#skipped_other[@]} skipped otherwise; logs in $logs"
if [ "$call" = 1 ]; then
  later=0
  for i in "${!ids[@]}"; do [ "${call_of[$i]}" -ne 1 ] && later=$((later + 1)); done
  [ $later -gt 0 ] && echo "$later parts are left for --call=2 (--budget=S --plan=$plan --call=2)"
fi
for s in "${skipped_time[@]+"${skipped_time[@]}"}"; do echo "skipped for time: $s"; done
# One line per reason: "skipped (REASON): ID ID ...".
printf '%s\n' "${skipped_other[@]+"${skipped_other[@]}"}" | awk -F'|' 'NF > 1 {
    if (!($1 in ids)) order[++n] = $1
    ids[$1] = ids[$1] " " $2 }
  END { for (i = 1; i <= n; i++) print "skipped (" order[i] "):" ids[order[i]] }' 
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "== figures ($logs/figures.txt)"
if [ -s "$logs/figures.txt" ]; then cat "$logs/figures.txt"; else echo "none measured in this run"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ ${#failures[@]} -eq 0 ]
