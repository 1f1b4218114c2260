#!/usr/bin/env bash
# //python:module_test: the built package under /usr/bin/python3 (Debian's,
# the one pybind11-dev and python3-dev build for), against the program.
#
# Under --config=asan: python_env.sh preloads the sanitizer runtimes.
set -euo pipefail
so="$PWD/python/baton/_baton.so"
# The module links no PyTorch and no libpython (the interpreter has it).
if ldd "$so" | grep -Ei 'torch|libpython'; then
  echo "FAIL: $so links the library above"; exit 1
fi
exported=$(nm -D --defined-only "$so" | awk '{print $3}')
if [ "$exported" != "PyInit__baton" ]; then
  echo "FAIL: $so exports more than PyInit__baton:"; echo "$exported" | head; exit 1
fi
source python/python_env.sh
exec /usr/bin/python3 "$1" --simulate="$2" --package="$PWD/python"
