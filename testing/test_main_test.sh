#!/usr/bin/env bash
# The test main's deadline: a test case that runs past BATON_TEST_DEADLINE_S
# fails the binary with a line naming it; passing cases are untouched.
set -uo pipefail
probe="$1"
fail() { echo "FAIL: $*"; exit 1; }

out=$(BATON_TEST_DEADLINE_S=1 "$probe" --gtest_filter=Probe.Passes 2>&1)
[ $? -eq 0 ] || fail "Probe.Passes failed under the deadline: $out"

start=$(date +%s)
out=$(BATON_TEST_DEADLINE_S=1 "$probe" --gtest_filter=Probe.SleepsPastTheDeadline 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || fail "a test past its deadline exited 0"
echo "$out" | grep -q '\[ DEADLINE \] Probe.SleepsPastTheDeadline ran past 1 s' ||
  fail "no line naming the test: $out"
[ $took -lt 5 ] || fail "the deadline did not cut the test short (${took} s)"

out=$(BATON_TEST_DEADLINE_S=soon "$probe" --gtest_filter=Probe.Passes 2>&1)
[ $? -eq 0 ] || fail "a bad BATON_TEST_DEADLINE_S broke the run: $out"
echo "$out" | grep -q 'not a positive whole number' || fail "bad value not reported: $out"
echo PASS
