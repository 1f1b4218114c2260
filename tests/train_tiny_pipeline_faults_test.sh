#!/bin/bash
# A pipeline rank that dies (SIGKILL) or hangs (SIGSTOP) mid-run on ucx
# processes: 4 ranks, --pp=2 (ranks 0,1 stage 0; 2,3 stage 1), started by
# `launch --keep-going`, so no rank is stopped for another's failure. Every
# survivor fails on its own within a bound, exits 1, and its error line
# names the rank and its stage; a stopped rank gets a hang report.
source tests/simulate_cli_lib.sh  # bin (train_tiny), t, fail
launch="$2"
model=(--layers=2 --hidden=64 --heads=4 --kv-heads=2 --ffn=128 --vocab=128 --seq=32 --lr=3e-3
       --steps=1000000 --dtype=f32)
bound=30  # seconds from the signal to the last survivor's error (--timeout=3)

fault() {  # fault NAME SIGNAL RANK STAGE HOW: signal RANK after step 3; HOW: failed|went silent
  local name="$1" sig="$2" victim="$3" stage="$4" how="$5" out="$t/$1.out"
  : >"$out"  # before tail -f below reads it (the job's own redirect may come later)
  "$launch" --nproc=4 --keep-going --timeout=120 -- "$bin" "${model[@]}" --pp=2 --nranks=4 \
    --micro-steps=2 --batch=1 --policy=fsdp2 --backend=ucx --timeout=3 >"$out" 2>&1 &
  local job=$! pid="" c started=1
  timeout 60 tail -f -n +1 "$out" | grep -m1 -q 'step   3/' || started=0
  for c in $(pgrep -P "$job"); do
    if tr '\0' '\n' <"/proc/$c/environ" | grep -qx "RANK=$victim"; then pid=$c; fi
  done
  [[ -n $pid ]] && kill "-$sig" "$pid"
  local start=$SECONDS
  until [[ $(grep -c '^\[rank [0-9]\] train_tiny: rank ' "$out") -ge 3 ]] ||
        (( SECONDS - start > bound )); do sleep 0.2; done
  local took=$(( SECONDS - start ))
  [[ -n $pid && $sig == STOP ]] && kill -KILL "$pid"
  wait "$job"
  local bad="" r
  (( started )) || bad="no rank reached step 3 within 60s"
  [[ -z $pid ]] && bad="$bad; rank $victim not found"
  (( took > bound )) && bad="$bad; not every survivor failed within ${bound}s"
  # Every survivor names the victim and its stage. A stopped rank is found
  # by following who waits on whom, also through live ranks that wait on it
  # and have not timed out yet (they post their waits early); the hang
  # report's verdict names it as the one that did not report.
  local named="rank $victim \\(pipeline stage $stage\\) $how"
  for r in 0 1 2 3; do
    [[ $r == "$victim" ]] && continue
    grep -qE "^\[rank $r\] train_tiny: rank $r \(pipeline stage $(( r / 2 )) of 2\): [A-Z_]+: $named" "$out" ||
      bad="$bad; rank $r's error does not name ${named//\\/} "
    grep -qE "(^|launch: )rank $r exited with code 1$" "$out" || bad="$bad; rank $r did not exit 1"
  done
  [[ $sig == STOP ]] && ! grep -qE "^\[rank [0-3]\] verdict: rank $victim did not report" "$out" &&
    bad="$bad; no hang report whose verdict names rank $victim as the one that did not report"
  if [[ -n $bad ]]; then
    echo "FAIL $name:$bad"; grep -E 'train_tiny:|exited|killed|launch:' "$out" | cut -c1-300; fail=1
  else
    echo "ok   $name: ranks $(echo 0 1 2 3 | tr -d "$victim" | xargs | tr ' ' ,) failed within ${took}s, naming rank $victim (pipeline stage $stage)$([[ $sig == STOP ]] && echo " in the hang report")"
    grep -m1 "^\[rank $(( victim == 0 ? 1 : 0 ))\] train_tiny: " "$out" | cut -c1-200
  fi
}
fault killed KILL 3 1 "failed"
fault stopped STOP 1 0 "went silent"
exit $fail
