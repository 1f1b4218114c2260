#!/bin/bash
# Each tool given after the header answers --version with exit 0 and one
# line "<tool> (baton X.Y.Z)", X.Y.Z being BATON_VERSION of the header.
set -u
header="$1"
shift
want=$(sed -n 's/^#define BATON_VERSION "\(.*\)"$/\1/p' "$header")
[[ -n "$want" ]] || { echo "FAIL: no BATON_VERSION in $header"; exit 1; }
fail=0
for bin in "$@"; do
  name=$(basename "$bin")
  out=$("$bin" --version 2>&1)
  rc=$?
  if [[ $rc -ne 0 || "$out" != "$name (baton $want)" ]]; then
    echo "FAIL $name --version: exit $rc, output '$out', want '$name (baton $want)'"
    fail=1
  else
    echo "ok   $out"
  fi
done
exit $fail
