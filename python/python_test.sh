#!/usr/bin/env bash
# Runs a Python test script ($1, then its own arguments) with Debian's
# /usr/bin/python3 (the Python the extension is built for, which sees
# Debian's python3-torch) on the built package and python/examples/.
set -euo pipefail
source python/python_env.sh  # --config=asan: the sanitizer runtimes
script="$1"; shift
exec /usr/bin/python3 "$script" --package="$PWD/python" --examples="$PWD/python/examples" "$@"
