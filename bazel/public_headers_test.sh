#!/usr/bin/env bash
# The installed headers (bazel/library.bzl: PUBLIC_HEADERS + SUPPORT_HEADERS)
# are closed under #include "baton/...": every baton header that one of them
# includes is installed too. Arguments: the headers' paths.
set -euo pipefail
declare -A have=()
for h in "$@"; do have["${h#./}"]=1; done
missing=0
for h in "$@"; do
  while read -r inc; do
    if [ -z "${have[$inc]:-}" ]; then
      echo "FAIL: $h includes baton/$inc, which is not installed" \
           "(add it to bazel/library.bzl)" >&2
      missing=1
    fi
  done < <(sed -n 's|^#include "baton/\(.*\)"$|\1|p' "$h")
done
[ ${#have[@]} -ge 10 ] || { echo "FAIL: only ${#have[@]} headers given" >&2; exit 1; }
[ $missing -eq 0 ] && echo "ok: ${#have[@]} headers, closed under #include"
exit $missing
