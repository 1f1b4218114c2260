#!/bin/bash
# examples/checkpoint_bench.py (docs/checkpoints.md, "Figures") on the micro
# model: it prints every figure line and a JSON line with one entry per
# save; bad usage is one line on stderr, exit 2.
set -u
bench="$1" train_tiny="$2"
T="$TEST_TMPDIR"
fail=0
python3 "$bench" --train-tiny="$train_tiny" --dir="$T/b" --steps=8 --save-every=3 \
  -- --model=micro --seq=16 --batch=1 >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -ne 0 ]]; then echo "FAIL: exit $rc"; cat "$T/out" "$T/err"; exit 1; fi
for pat in "^model: micro" "^save of step 3: " "^save of step 6: " "write [0-9]* MB/s" \
           "^dd (bs=4M conv=fsync" "^step time: .* exposed"; do
  grep -q -- "$pat" "$T/out" || { echo "FAIL: no line matching '$pat'"; fail=1; }
done
python3 - "$T/out" <<'PY' || fail=1
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert [s["step"] for s in j["saves"]] == [3, 6], j["saves"]
for s in j["saves"]:
    assert s["bytes"] > 0 and 0 <= s["copied_ms"] <= s["written_ms"] <= s["done_ms"], s
assert j["dd_mb_s"] > 0 and j["baseline_step_ms"] > 0, j
print("ok   json:", len(j["saves"]), "saves")
PY
python3 "$bench" --dir="$T/b" 2>"$T/err" >/dev/null
rc=$?
if [[ $rc -ne 2 || $(wc -l <"$T/err") -ne 1 ]]; then echo "FAIL: usage: exit $rc"; cat "$T/err"; fail=1; fi
python3 "$bench" --train-tiny="$train_tiny" --dir="$T/b" --steps=4 --save-every=4 2>"$T/err" >/dev/null
rc=$?
if [[ $rc -ne 2 ]] || ! grep -q "save-every must be less" "$T/err"; then echo "FAIL: save-every"; fail=1; fi
[[ $fail -eq 0 ]] && echo "ok   checkpoint_bench"
exit $fail
