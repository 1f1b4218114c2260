#!/bin/bash
# ./bazelw run //examples:checkpoint_bench -- [ARGS...]: checkpoint_bench.py
# (docs/checkpoints.md, "Figures") with the train_tiny of this build.
# $1: the script, $2: train_tiny (the target's args); the rest: the
# bench's own arguments, passed on (--train-tiny is given here).
set -u
script="$1" train_tiny="$2"
shift 2
for a in "$@"; do
  [[ $a == --train-tiny=* ]] && { echo "checkpoint_bench: --train-tiny is this build's; leave it out" >&2; exit 2; }
  [[ $a == -- ]] && break
done
exec python3 "$script" --train-tiny="$train_tiny" "$@"
