#!/bin/bash
# //bench:collectives' command line (issue 16): sizes that would wrap, a
# non-finite step factor, duplicate and empty flags are refused with exit
# code 2 and a line naming the flag; a small valid run still works.
set -u
bin="$1"
fail=0
check() {  # check NAME SUBSTRING ARGS...: exit 2 and SUBSTRING on stderr
  local name="$1" want="$2"
  shift 2
  timeout 60 "$bin" "$@" >"$TEST_TMPDIR/out" 2>"$TEST_TMPDIR/err"
  local rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL $name: exit $rc, want 2"; cat "$TEST_TMPDIR/err"; fail=1; return
  fi
  if ! head -n 1 "$TEST_TMPDIR/err" | grep -qF -- "$want"; then
    echo "FAIL $name: first stderr line lacks \"$want\":"; cat "$TEST_TMPDIR/err"; fail=1; return
  fi
  echo "ok   $name: $(head -n 1 "$TEST_TMPDIR/err")"
}
check size-wraps "--minbytes needs a size up to 64G, got '17179869184G'" -b 17179869184G
check size-u64 "--maxbytes needs a size" -e 99999999999999999999
check size-over "--maxbytes needs a size up to 64G" --maxbytes=65G
check factor-nan "--stepfactor needs a number in [1, 1024], got 'nan'" -f nan
check factor-inf "--stepfactor needs a number in [1, 1024]" --stepfactor=inf
check factor-big "--stepfactor needs a number in [1, 1024]" -f 1e300
check dup-short "--iters is given more than once" -n 5 -n 6
check dup-mixed "--minbytes is given more than once" -b 1K --minbytes=2K
check empty "'--output_file=' needs a value" --output_file=
check missing "'-b' needs a value" -b
check nranks "--nranks needs an integer in [1, 4096], got '5000'" --nranks=5000
# Issue 29: the ranks it starts itself are bounded by the host (16 per CPU,
# scheduler/limits.h), the documented 4096 included below 256 CPUs.
if (( $(nproc) < 256 )); then
  check nranks-host "--nranks asks for 4096 ranks on this host; it runs at most $(( 16 * $(nproc) )) at once" --nranks=4096
  check nranks-host-ucx "ranks on this host" --backend=ucx --nranks=$(( 16 * $(nproc) + 1 ))
fi
# Issue 32: the send/recv ring needs a peer.
check sendrecv-one-rank "--collective=sendrecv needs --nranks >= 2" --collective=sendrecv --nranks=1
timeout 120 "$bin" --collective=sendrecv --backend=inproc --nranks=3 -b 1K -e 4K -f 2 -n 2 \
  >"$TEST_TMPDIR/out" 2>&1 || { echo "FAIL sendrecv run"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -q '^# Collective: sendrecv ' "$TEST_TMPDIR/out" || { echo "FAIL sendrecv: header"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -qE '^ *4096 +1024 +float +none +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +N/A' "$TEST_TMPDIR/out" || { echo "FAIL sendrecv: no checked 4096-byte row"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -q '^# Peak busbw / limit : [0-9]' "$TEST_TMPDIR/out" || { echo "FAIL sendrecv: no limit line"; cat "$TEST_TMPDIR/out"; fail=1; }
# The same ring on inproc's event protocol (its device-memory path, on host
# streams): checked rows, nothing wrong.
timeout 120 "$bin" --collective=sendrecv --backend=inproc --inproc_events=1 --nranks=3 -b 1K -e 4K -f 2 -n 2 \
  >"$TEST_TMPDIR/out" 2>&1 || { echo "FAIL sendrecv events run"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -q '^# Collective: sendrecv  backend: inproc (event protocol)' "$TEST_TMPDIR/out" || { echo "FAIL sendrecv events: header"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -qE '^ *4096 +1024 +float +none +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +N/A' "$TEST_TMPDIR/out" || { echo "FAIL sendrecv events: no checked 4096-byte row"; cat "$TEST_TMPDIR/out"; fail=1; }
timeout 120 "$bin" --collective=all_reduce --backend=inproc --nranks=2 -b 1K -e 4K -f 2 -n 2 \
  >"$TEST_TMPDIR/out" 2>&1 || { echo "FAIL valid run"; cat "$TEST_TMPDIR/out"; fail=1; }
grep -q '^ *4096 ' "$TEST_TMPDIR/out" || { echo "FAIL valid run: no 4096-byte row"; cat "$TEST_TMPDIR/out"; fail=1; }
exit $fail
