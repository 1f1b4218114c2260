#!/usr/bin/env bash
# //python:module_test: the built package under /usr/bin/python3 (Debian's,
# the one pybind11-dev and python3-dev build for), against the program.
#
# Under --config=asan the extension needs the sanitizer runtimes loaded
# before the (uninstrumented) interpreter: they are preloaded, with
# libstdc++ (python3 does not link it, and ASan's __cxa_throw interceptor
# needs the real one, which pybind11 calls for every ValueError). Leak
# checking is off in that process: CPython frees little at exit by design;
# the C++ code's leaks are checked by its own tests.
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
asan=$(ldd "$so" | awk '/libasan\.so/ {print $3}')
if [ -n "$asan" ]; then
  stdcxx=$(ldd "$so" | awk '/libstdc\+\+\.so/ {print $3}')
  export LD_PRELOAD="$asan $stdcxx"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec /usr/bin/python3 "$1" --simulate="$2" --package="$PWD/python"
