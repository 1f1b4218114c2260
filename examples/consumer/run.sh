#!/usr/bin/env bash
# Builds this workspace (baton as an external repository, in its own Bazel
# output base) and runs its two-rank step: once with //:baton alone
# (inproc; ucx and nccl must be refused naming their targets), once with
# //:baton_ucx added. Exit 0 when both pass. Used by .ci/run.
#
#   examples/consumer/run.sh [--disk_cache=DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# Bazel itself (./bazelw, which CI ran before, installed it); not ./bazelw,
# which runs in baton's root.
bazel=$(command -v bazel || command -v bazel-bootstrap || true)
[ -n "$bazel" ] || { echo "run.sh: no bazel; run ./bazelw once first" >&2; exit 1; }
extra=()
for a in "$@"; do
  case "$a" in
    --disk_cache=*) extra+=("$a") ;;
    *) echo "run.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
cd "$here"
trap '"$bazel" shutdown >/dev/null 2>&1 || true' EXIT
start=$(date +%s)
# --symlink_prefix=/ : no bazel-* links inside baton's tree.
"$bazel" --max_idle_secs=60 build --symlink_prefix=/ "${extra[@]}" \
  //:two_rank_step //:two_rank_step_ucx
bin="$("$bazel" --max_idle_secs=60 info bazel-bin 2>/dev/null)"
echo "consumer: built in $(( $(date +%s) - start )) s"
"$bin/two_rank_step" --expect-backends=inproc
"$bin/two_rank_step_ucx" --expect-backends=inproc,ucx
"$bin/two_rank_step" --version
