#!/usr/bin/env bash
# Installs baton into a temporary prefix (./bazelw run //:install), then:
#  - CMake: configures and builds tests/cmake_consumer against it and runs
#    the two-rank step with baton::baton alone and with baton::ucx;
#  - pkg-config: compiles the same program with `pkg-config baton` and runs it;
#  - checks that libbaton.so exports only the API (nm -D).
# Exit 0 when all pass. Used by .ci/run; needs cmake and pkg-config (./bazelw
# installs them).
#
#   tests/cmake_consumer/run.sh [WORKDIR]     (default: a fresh temp dir)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
prefix="$work/prefix"
cd "$root"
./bazelw run //:install -- --prefix="$prefix"

echo "== cmake consumer"
cmake -S tests/cmake_consumer -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j 2 -- --no-print-directory
"$work/build/two_rank_step" --expect-backends=inproc
# An inproc-only program loads neither UCX nor NCCL.
if ldd "$work/build/two_rank_step" | grep -E 'libucp|libuct|libnccl|libbaton_'; then
  echo "FAIL: the inproc-only program loads the libraries above" >&2
  exit 1
fi
"$work/build/two_rank_step_ucx" --expect-backends=inproc,ucx

echo "== pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion baton)" = "$(sed -n 's/^#define BATON_VERSION "\(.*\)"$/\1/p' runtime/version.h)" ]
# shellcheck disable=SC2046
g++ -std=c++17 -O1 -o "$work/step_pc" examples/consumer/two_rank_step.cc \
  $(pkg-config --cflags --libs baton-ucx) -Wl,-rpath,"$prefix/lib"
"$work/step_pc" --expect-backends=inproc,ucx

echo "== exported symbols of libbaton.so"
syms="$(nm -D --defined-only -C "$prefix/lib/libbaton.so" | cut -c20-)"
echo "$(echo "$syms" | wc -l) symbols"
if echo "$syms" | grep -E '_internal::|CreateInprocCommunicator|^absl::|^std::' ; then
  echo "FAIL: libbaton.so exports the symbols above (not API)" >&2
  exit 1
fi
for want in 'baton::scheduler::Session::Create' 'baton::CreateCommunicator' \
            'typeinfo for baton::Communicator'; do
  echo "$syms" | grep -q "^$want" || { echo "FAIL: $want not exported" >&2; exit 1; }
done
for lib in libbaton_ucx.so libbaton_nccl.so; do
  n=$(nm -D --defined-only "$prefix/lib/$lib" | wc -l)
  [ "$n" -eq 0 ] || { echo "FAIL: $lib exports $n symbols" >&2; exit 1; }
done
readelf -d "$prefix/lib/libbaton.so" | grep -q 'SONAME.*libbaton.so.0' \
  || { echo "FAIL: libbaton.so has no SONAME libbaton.so.0" >&2; exit 1; }
echo "ok: cmake and pkg-config consumers ran; libbaton.so exports the API only"
