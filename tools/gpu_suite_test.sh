#!/bin/bash
# The GPU suite's plan and budget on the host, over fake bundles: the dry
# run's two-call plan (the first call holds the stream test that hung, the
# per-call figures, the checks, every GPU test plainly and the memcheck of
# attention; no call is planned past its budget; a budget too small plans
# nothing), bad flags and a bad bundle (one line on stderr, exit 2), and a
# real run of fake test binaries: a part that overruns is killed at the
# budget, one that cannot fit is skipped for time, GPU parts are skipped
# without a GPU, and the count line comes last.
set -u
suite="$1" run="$2" parts="$3" times="$4"
T="$TEST_TMPDIR"
fail=0
bad() { echo "FAIL $*"; fail=1; }

# A bundle's suite files, and the test list of today's bundle.
make_bundle() {  # DIR
  mkdir -p "$1/bin"
  cp "$suite" "$1/run_gpu_suite.sh"
  cp "$run" "$parts" "$1/"
  cp "$times" "$1/times.tsv"
  echo "test" > "$1/COMMIT"
}
B="$T/bundle"
make_bundle "$B"
gpu_tests="runtime/device_test runtime/pinned_host_test runtime/stream_ops_test ops/adamw_test
  ops/attention_test ops/cross_entropy_test ops/cudnn_attention_test ops/embedding_test
  ops/linear_test ops/rmsnorm_test ops/rotary_test ops/swiglu_test ops/testing/test_util_test
  ops/zenflow_stream_test comm/inproc_test comm/nccl_test tests/train_tiny_test"
host_tests="runtime/status_test memory/arena_test ops/host_adamw_test comm/split_test
  scheduler/executor_test optim/zenflow_exec_test sim/parsers_fuzz_test sim/tune_test
  examples/llama_trainer_test tests/ucx_faults_test"
{ for t in $gpu_tests; do printf '%s\tgpu\n' "$t"; done
  for t in $host_tests; do printf '%s\thost\n' "$t"; done; } > "$B/tests.txt"
{ echo "# CUDA sources changed since c39d056: 13 changed, 1 removed; 14 GPU unit tests link them"
  for t in comm/inproc_test comm/nccl_test ops/adamw_test ops/attention_test \
           ops/cross_entropy_test ops/cudnn_attention_test ops/embedding_test ops/linear_test \
           ops/rmsnorm_test ops/rotary_test ops/swiglu_test ops/zenflow_stream_test \
           runtime/device_test runtime/stream_ops_test; do echo "$t"; done; } > "$B/memcheck.txt"

# --- the dry run ------------------------------------------------------------
if ! "$B/run_gpu_suite.sh" --budget=540 --dry-run > "$T/plan" 2> "$T/err"; then
  bad "--budget=540 --dry-run: exit $?"; cat "$T/err"
fi
[ -s "$T/err" ] && bad "--dry-run wrote to stderr: $(head -1 "$T/err")"
# Part lines as "CALL INDEX ID SECONDS SOURCE..." (CALL 0: not planned).
awk '/^call [0-9]+:/ { c = $2 + 0; next } /^not planned/ { c = 0; next }
     /^ +[0-9]+  / { print c, $1, $2, $3, ($4 == "s" && NF > 4) ? "src" : "nosrc" }' "$T/plan" > "$T/parts"
[ "$(wc -l < "$T/parts")" -gt 40 ] || bad "the plan lists $(wc -l < "$T/parts") parts"
grep -q ' nosrc$' "$T/parts" && bad "a part without a source: $(grep -m1 ' nosrc$' "$T/parts")"
[ "$(awk '$1 == 1 { print $3; exit }' "$T/parts")" = figure/stream_wait_hang ] ||
  bad "call 1 does not start with figure/stream_wait_hang"
want1="figure/stream_wait_hang figure/inproc_1MiB figure/event_handoff figure/graph_replay
  check/train_tiny_cuda_reference sanitizer/probe memcheck/ops/attention_test"
for t in $gpu_tests; do want1+=" plain/$t"; done
for id in $want1; do
  grep -q "^1 [0-9]* $id " "$T/parts" || bad "call 1 lacks $id"
done
for c in 1 2; do
  sum=$(awk -v c=$c '$1 == c { s += $4 } END { print s + 0 }' "$T/parts")
  said=$(sed -n "s/^call $c: [0-9]* parts, expected \([0-9]*\) s of 530$/\1/p" "$T/plan")
  [ "$sum" -le 530 ] || bad "call $c plans $sum s, past 540 - 10"
  [ "$sum" = "$said" ] || bad "call $c: its parts add to $sum s, its header says '$said'"
done
# Call 1 is a prefix of the priority order at least up to attention's memcheck.
awk '$1 == 1 { if ($2 != ++n) exit 1 } $3 == "memcheck/ops/attention_test" { exit !(n > 0) }' \
  "$T/parts" || bad "call 1 skips a part before memcheck/ops/attention_test"
# The tiers in priority order.
awk '{ split($3, p, "/"); r = index("figure check plain sanitizer memcheck racecheck bench host", p[1]);
       if (r < last) exit 1; last = r }' <(sort -k2,2n "$T/parts") ||
  bad "the parts are not in tier order: $(sort -k2,2n "$T/parts" | awk '{ print $3 }' | tr '\n' ' ')"

# A budget too small for anything plans nothing.
"$B/run_gpu_suite.sh" --budget=10 --dry-run > "$T/small" 2>&1 || bad "--budget=10 --dry-run: exit $?"
grep -q '^call 1: 0 parts, expected 0 s of 0$' "$T/small" || bad "--budget=10 plans something in call 1"
grep -q '^call 2: 0 parts' "$T/small" || bad "--budget=10 plans something in call 2"
grep -q '^not planned (no room in 2 calls): ' "$T/small" || bad "--budget=10 lists no unplanned parts"
# --call picks from the same plan; no budget plans one call with every part.
"$B/run_gpu_suite.sh" --budget=540 --call=1 --dry-run > "$T/plan1" 2>&1 || bad "--call=1 --dry-run: exit $?"
cmp -s "$T/plan" "$T/plan1" || bad "--call=1 --dry-run prints another plan"
"$B/run_gpu_suite.sh" --budget=200 --plan=540 --call=2 --dry-run > "$T/plan2" 2>&1 ||
  bad "--budget=200 --plan=540 --call=2 --dry-run: exit $?"
cmp -s <(grep '^ ' "$T/plan") <(grep '^ ' "$T/plan2") || bad "--plan=540 plans other calls than --budget=540"
"$B/run_gpu_suite.sh" --dry-run > "$T/all" 2>&1 || bad "--dry-run: exit $?"
grep -q '^call 2\|^not planned' "$T/all" && bad "without a budget the plan has a second call"
echo "ok   dry runs: $(grep -c '^1 ' "$T/parts") parts in call 1, $(grep -c '^2 ' "$T/parts") in call 2"

# --- bad flags and bad bundles ------------------------------------------------
one_line_2() {  # NAME PATTERN CMD...: exit 2, nothing on stdout, one stderr line
  local name="$1" pat="$2"
  shift 2
  "$@" > "$T/out" 2> "$T/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ -s "$T/out" ] || [ "$(wc -l < "$T/err")" -ne 1 ] ||
     ! grep -q -- "^run_gpu_suite: .*$pat" "$T/err"; then
    bad "$name: exit $rc, stdout $(wc -c < "$T/out") bytes, stderr: $(cat "$T/err")"
  else
    echo "ok   $name: $(cat "$T/err")"
  fi
}
S="$B/run_gpu_suite.sh"
one_line_2 "budget not a number" "--budget must be" "$S" --budget=abc --dry-run
one_line_2 "budget zero" "--budget must be" "$S" --budget=0 --dry-run
one_line_2 "budget empty" "--budget must be" "$S" --budget= --dry-run
one_line_2 "budget too large" "--budget must be" "$S" --budget=1234567 --dry-run
one_line_2 "call 3" "--call must be 1 or 2" "$S" --budget=540 --call=3 --dry-run
one_line_2 "call without budget" "--call needs --budget" "$S" --call=1 --dry-run
one_line_2 "plan not a number" "--plan must be" "$S" --budget=200 --plan=x --dry-run
one_line_2 "plan without budget" "--plan needs --budget" "$S" --plan=540 --dry-run
one_line_2 "unknown flag" "unknown argument '--phases=plain'" "$S" --phases=plain
one_line_2 "flag twice" "--dry-run given twice" "$S" --dry-run --dry-run
one_line_2 "bad regex" "not an extended regex" "$S" --only='(' --dry-run
one_line_2 "regex matching nothing" "matches no part" "$S" --only='^nothing$' --dry-run
E="$T/empty"
mkdir -p "$E"
cp "$suite" "$E/run_gpu_suite.sh"
one_line_2 "no bundle" "no tests.txt beside" "$E/run_gpu_suite.sh" --dry-run
make_bundle "$T/badtimes"
cp "$B/tests.txt" "$B/memcheck.txt" "$T/badtimes/"
printf 'bench/ops\tsoon\test: never\n' >> "$T/badtimes/times.tsv"
printf 'ops/x_test\tmaybe\n' >> "$T/badtimes/tests.txt"
one_line_2 "bad tests.txt" "tests.txt line [0-9]*: want PATH<TAB>gpu|host" "$T/badtimes/run_gpu_suite.sh" --dry-run
sed -i '$d' "$T/badtimes/tests.txt"
one_line_2 "bad times.tsv" "times.tsv line [0-9]*: want KEY" "$T/badtimes/run_gpu_suite.sh" --dry-run

# --- a run within a budget, no GPU ----------------------------------------------
R="$T/run"
make_bundle "$R"
printf 'x/a_pass_test\thost\nx/b_hang_test\thost\nx/c_big_test\thost\nops/attention_test\tgpu\n' \
  > "$R/tests.txt"
printf '# changed: ops/attention.cu\nops/attention_test\n' > "$R/memcheck.txt"
printf 'test:x/a_pass_test\t0.2\thost\ntest:x/b_hang_test\t1\thost\ntest:x/c_big_test\t100\thost\n' \
  > "$R/times.tsv"
mkdir -p "$R/bin/x"
cat > "$R/bin/x/a_pass_test" << 'EOF'
#!/bin/bash
for a; do case "$a" in --gtest_output=xml:*) xml="${a#--gtest_output=xml:}" ;; esac; done
printf '<testsuites><testsuite><testcase name="One"/><testcase name="Two"/></testsuite></testsuites>\n' > "$xml"
EOF
cat > "$R/bin/x/b_hang_test" << 'EOF'
#!/bin/bash
echo "[ RUN      ] Hang.Forever"
exec sleep 60
EOF
cp "$R/bin/x/a_pass_test" "$R/bin/x/c_big_test"
chmod +x "$R"/bin/x/*
t0=$SECONDS
NVIDIA_SMI=false LOGS="$T/logs" "$R/run_gpu_suite.sh" --budget=14 > "$T/ran" 2> "$T/err"
rc=$? dt=$((SECONDS - t0))
[ $rc -eq 1 ] || bad "the run: exit $rc, want 1 (a part timed out)"
[ $dt -le 14 ] || bad "the run took $dt s, past its 14 s budget"
grep -q '^\[ *[0-9]* s\] host/x/a_pass_test  *ok ' "$T/ran" || bad "a_pass_test did not run ok"
grep -q '^FAILED: host/x/b_hang_test: timed out after [0-9]* s (expected 1 s): timed out in Hang.Forever' \
  "$T/ran" || bad "the overrunning part is not named as timed out"
grep -q '^skipped for time: host/x/c_big_test (expected 100 s, [0-9]* s left)$' "$T/ran" ||
  bad "the part that cannot fit is not skipped for time"
grep -q '^skipped (no GPU): figure/stream_wait_hang .*plain/ops/attention_test .*memcheck/ops/attention_test' \
  "$T/ran" || bad "the GPU parts are not skipped for want of a GPU"
[ "$(tail -1 "$T/ran")" = "2 passed, 1 failed, 0 skipped" ] || bad "last line: $(tail -1 "$T/ran")"
grep -q "^test:x/a_pass_test	[0-9]*	run " "$T/logs/times.tsv" || bad "no measured time in logs/times.tsv"
[ -s "$T/err" ] && bad "the run wrote to stderr: $(head -1 "$T/err")"
echo "ok   run with --budget=14: exit $rc in $dt s; $(tail -1 "$T/ran")"
# Call 2 runs what call 1 of the plan does not hold (here: c_big, past its budget).
NVIDIA_SMI=false LOGS="$T/logs2" "$R/run_gpu_suite.sh" --budget=14 --call=2 > "$T/ran2" 2>&1
rc=$?
grep -q 'x/[ab]_' "$T/ran2" && bad "--call=2 ran a part of call 1: $(grep -m1 'x/[ab]_' "$T/ran2")"
grep -q '^skipped for time: host/x/c_big_test ' "$T/ran2" || bad "--call=2 did not consider c_big_test"
[ $rc -eq 0 ] && [ "$(tail -1 "$T/ran2")" = "0 passed, 0 failed, 0 skipped" ] ||
  bad "--call=2: exit $rc, last line $(tail -1 "$T/ran2")"
[ $fail -eq 0 ] || { echo "--- the runs:"; cat "$T/ran" "$T/ran2"; echo "--- the plan:"; cat "$T/plan"; }
exit $fail
