# Shared by the command-line tests of simulate and train_tiny (sourced):
# `bin` (the program, the test's first argument), `t` (scratch), `fail`,
# and the checks run, bad, has, and train_tiny's reference_equal.
# A check prints "ok NAME" or "FAIL NAME ..." and sets fail=1.
set -u
bin="$1"
t="$TEST_TMPDIR"
fail=0
run() {  # run NAME EXPECTED_RC ARGS...
  local name="$1" want="$2"
  shift 2
  "$bin" "$@" >"$t/out" 2>"$t/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$t/err"; fail=1; return 1
  fi
  if [[ $want -eq 2 && ( $(wc -l <"$t/err") -ne 1 || ! -s "$t/err" ) ]]; then
    echo "FAIL $name: want one line on stderr, got:"; cat "$t/err"; fail=1; return 1
  fi
  echo "ok   $name: $(head -c 200 "$t/err")"
}
bad() {  # bad NAME SUBSTRING ARGS...: exit 2 naming SUBSTRING
  local name="$1" want="$2"
  shift 2
  run "$name" 2 "$@" || return
  grep -qF -- "$want" "$t/err" || { echo "FAIL $name: stderr lacks \"$want\""; fail=1; }
}
has() {  # has NAME PATTERN: the last output matches PATTERN (grep -E)
  grep -qE -- "$2" "$t/out" || { echo "FAIL $1: no line matching '$2'"; cat "$t/out"; fail=1; }
}
reference_equal() {  # reference_equal NAME PARAMS FALL: train_tiny's --json line (the last
  # output line): the loss difference from the unsharded run (and with PARAMS=1 the final
  # parameters') <= 1e-5 relative, 20 losses, the last below FALL x the first
  tail -n 1 "$t/out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
d, losses = j["max_rel_diff_vs_reference"], j["losses"]
assert d is not None and d <= 1e-5, ("losses", d)
if sys.argv[1] == "1":
    p = j["max_param_rel_diff_vs_reference"]
    assert p <= 1e-5, ("parameters", p)
assert len(losses) == 20 and losses[-1] < float(sys.argv[2]) * losses[0], losses
print("  losses %.6f -> %.6f, loss diff %.3g, parameter diff %s" % (
    losses[0], losses[-1], d, j.get("max_param_rel_diff_vs_reference")))' "$2" "$3" ||
    { echo "FAIL $1"; tail -n 3 "$t/out"; fail=1; }
}
