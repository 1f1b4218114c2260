#!/usr/bin/env bash
# //python:torch_test: python/torch_test.py on one rank, then on two ranks
# (ucx processes started by the launcher) under each policy checked.
set -euo pipefail
script="$1"
launch="$2"
py=(/usr/bin/python3 "$script" --package="$PWD/python" --examples="$PWD/python/examples"
    --steps=20 --lr=1e-3)
"${py[@]}"
for cfg in "--policy=baton" "--policy=fsdp2" "--policy=hsdp --set=shard_group=1" \
           "--policy=baton --micro-steps=2"; do
  # shellcheck disable=SC2086  # cfg is two words at most, split on purpose
  "$launch" --nproc=2 --timeout=120 -- "${py[@]}" $cfg
done
