#!/usr/bin/env bash
# //python:torch_test: python/torch_test.py on one rank, then on two ranks
# (ucx processes started by the launcher) under each policy checked, and
# with a Python optimizer (SGD on the shard views); then two inproc ranks
# as threads of one process.
# Under --config=asan only the baton policy runs on two ranks: the
# policies differ in the executor's C++ paths, which its own tests cover
# under the sanitizers; this keeps the asan run near 20 s.
set -euo pipefail
source python/python_env.sh  # --config=asan: the sanitizer runtimes
script="$1"
launch="$2"
py=(/usr/bin/python3 "$script" --package="$PWD/python" --examples="$PWD/python/examples"
    --steps=20 --lr=1e-3)
"${py[@]}"
configs=("--policy=baton" "--policy=fsdp2 --optimizer=sgd --lr=1e-2"
         "--policy=hsdp --set=shard_group=1" "--policy=baton --micro-steps=2")
if [ -n "$baton_asan" ]; then configs=("--policy=baton"); fi
for cfg in "${configs[@]}"; do
  # shellcheck disable=SC2086  # cfg is a few words, split on purpose
  "$launch" --nproc=2 --timeout=120 -- "${py[@]}" $cfg
done
# Two ranks as threads of one process (baton.Session.inproc).
"${py[@]}" --inproc=2 --policy=hsdp --set=shard_group=1 --micro-steps=2
