#!/bin/bash
# tools/check_layers.py over this source tree (found through the runfile of
# README.md, a link into it): every include and BUILD label points down the
# floors of docs/architecture.md. Then over small fake trees: an upward
# include and an upward BUILD dependency are each named, exit 1.
set -u
check="$1" readme="$2"
root="$(dirname "$(readlink -f "$readme")")"
fail=0
if ! python3 "$check" "$root"; then
  echo "FAIL: the source tree has arrows pointing up (above)"; fail=1
fi
T="$TEST_TMPDIR"
fake() {  # fake DIR FILE CONTENT
  mkdir -p "$1/$(dirname "$2")"; touch "$1/WORKSPACE"; printf '%s\n' "$3" > "$1/$2"
}
fake "$T/a" scheduler/x.cc '#include "baton/ops/adamw.h"'
fake "$T/a" scheduler/y.cc '#include "baton/comm/communicator.h"'
fake "$T/b" bench/BUILD 'cc_binary(name = "b", deps = ["//examples:cli"])'
fake "$T/c" ops/testing/t.cc '#include "baton/scheduler/executor.h"'
fake "$T/d" ops/x.cc '#include "baton/parallel/context/split.h"'
for case in "a:scheduler/x.cc:1: scheduler/ includes ops/" "b:bench/BUILD:1: bench/ depends on examples/" \
            "c:ops/testing/t.cc:1: ops/ includes scheduler/" "d:ops/x.cc:1: ops/ includes parallel/"; do
  dir="${case%%:*}" want="${case#*:}"
  out="$(python3 "$check" "$T/$dir")"; rc=$?
  if [[ $rc -ne 1 ]] || ! grep -qF -- "$want" <<<"$out" || [[ $(wc -l <<<"$out") -ne 1 ]]; then
    echo "FAIL fake tree $dir: exit $rc, want 1 and one line '$want...', got:"; echo "$out"; fail=1
  else
    echo "ok   fake tree $dir: $out"
  fi
done
python3 "$check" /nonexistent 2>"$T/err"; rc=$?
if [[ $rc -ne 2 ]]; then echo "FAIL: a missing root gives exit $rc, want 2"; fail=1; fi
exit $fail
