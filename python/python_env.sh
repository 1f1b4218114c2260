# Sourced by the Python tests' scripts (run from the runfiles root): under
# --config=asan the extension needs the sanitizer runtimes loaded before the
# (uninstrumented) interpreter, so they are preloaded, with libstdc++
# (python3 does not link it, and ASan's __cxa_throw interceptor needs the
# real one, which pybind11 calls for every ValueError). Leak checking is off
# in those processes: CPython (and PyTorch) free little at exit by design;
# the C++ code's leaks are checked by its own tests. Child processes (the
# ranks a launcher starts) inherit both.
baton_so="$PWD/python/baton/_baton.so"
baton_asan=$(ldd "$baton_so" | awk '/libasan\.so/ {print $3}')
if [ -n "$baton_asan" ]; then
  baton_stdcxx=$(ldd "$baton_so" | awk '/libstdc\+\+\.so/ {print $3}')
  export LD_PRELOAD="$baton_asan $baton_stdcxx"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
