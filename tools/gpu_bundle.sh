#!/usr/bin/env bash
# Packs baton's portable GPU suite: every CUDA-capable test binary (a cc_test
# that links cudart), train_tiny (which train_tiny_test runs) and the GPU
# benches (and simulate, which reads the measured kernel table), built -c opt, with the non-system shared libraries they load, into
# one folder that runs on a GPU machine without Bazel:
#
#   tools/gpu_bundle.sh DIR [--tgz]  # on the build machine; --tgz also
#                                    # writes DIR.tgz (about a third of DIR)
#   DIR/run_gpu_suite.sh             # on the GPU machine (see that script)
#
# Packed: absl, UCX (+ its ucx/ module folder), gtest, benchmark, the
# project's own _solib .so files, libcudart and anything else ldd resolves
# outside the list below. Not packed (the GPU machine has its own): glibc,
# libstdc++/libgcc, libcuda, NCCL, cuBLAS, cuDNN.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="" tgz=0
for arg in "$@"; do
  case "$arg" in
    --tgz) tgz=1 ;;
    --out=*) out="${arg#--out=}" ;;
    -*) echo "gpu_bundle: unknown option '$arg'" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done
if [ -z "$out" ]; then
  echo "usage: tools/gpu_bundle.sh DIR [--tgz]" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"

if [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "gpu_bundle: no CUDA toolkit here; the bundle would hold no GPU code" >&2
  exit 2
fi

mapfile -t tests < <(./bazelw query --noshow_progress \
  'kind("cc_test", rdeps(//..., @local_cuda//:cudart)) except //tests:ucx_collectives_test' \
  2>/dev/null | sort)
binaries=(//examples:train_tiny //examples:simulate //bench:runtime //bench:collectives
          //bench:scheduler //bench:ops //bench:kernels)
echo "gpu_bundle: ${#tests[@]} tests, ${#binaries[@]} binaries"
./bazelw build -c opt "${tests[@]}" "${binaries[@]}"
bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)"

rm -rf "$out/bin" "$out/lib"
mkdir -p "$out/bin" "$out/lib"
: > "$out/tests.txt"
copy_target() {  # //pkg:name -> bin/pkg/name
  local label="$1" pkg name
  pkg="${label#//}"; pkg="${pkg%%:*}"; name="${label##*:}"
  mkdir -p "$out/bin/$pkg"
  cp -L "$bin/$pkg/$name" "$out/bin/$pkg/$name"
  chmod u+w "$out/bin/$pkg/$name"
  echo "$bin/$pkg/$name"  # ldd resolves its $ORIGIN runpath (_solib) there
}
files=()  # the binaries in bazel-bin, for ldd
for t in "${tests[@]}"; do
  files+=("$(copy_target "$t")")
  p="${t#//}"; echo "${p%%:*}/${t##*:}" >> "$out/tests.txt"
done
for b in "${binaries[@]}"; do files+=("$(copy_target "$b")"); done

# Libraries the GPU machine provides itself.
is_system() {
  case "$(basename "$1")" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|\
    libstdc++.so*|libgcc_s.so*|libcuda.so*|libnccl.so*|libcublas*|libcudnn*|\
    libnvidia*) return 0 ;;
  esac
  return 1
}
copy_deps() {  # copies what ldd resolves for $1 (not system) into lib/
  local f="$1" lib
  while read -r lib; do
    [ -n "$lib" ] && [ -f "$lib" ] || continue
    is_system "$lib" && continue
    [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/"
  done < <(ldd "$f" 2>/dev/null | awk '/=>/ { print $3 } !/=>/ && /^\t\// { print $1 }')
}
for f in "${files[@]}"; do copy_deps "$f"; done
# UCX loads its transports from ucx/ beside libucs.
ucs="$(ldd "${files[0]}" | awk '/libucs\.so/ { print $3 }' | head -1)"
if [ -z "$ucs" ]; then
  for f in "${files[@]}"; do
    ucs="$(ldd "$f" | awk '/libucs\.so/ { print $3 }' | head -1)"
    [ -n "$ucs" ] && break
  done
fi
if [ -n "$ucs" ] && [ -d "$(dirname "$(readlink -f "$ucs")")/ucx" ]; then
  mkdir -p "$out/lib/ucx"
  cp -a "$(dirname "$(readlink -f "$ucs")")"/ucx/*.so* "$out/lib/ucx/"  # keeps links
  for m in "$out"/lib/ucx/*.so*; do
    [ -L "$m" ] || copy_deps "$m"
  done
fi
chmod -R u+w "$out/lib"
cp "$root/tools/gpu_suite.sh" "$out/run_gpu_suite.sh"
cp "$root/tools/whole_step.py" "$root/tools/torch_step.py" "$out/"
chmod +x "$out/run_gpu_suite.sh"
(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown) > "$out/COMMIT"
echo "gpu_bundle: $out: $(du -sh "$out" | cut -f1)" \
     "($(wc -l < "$out/tests.txt") tests, $(ls "$out/lib" | grep -c '\.so') libraries)"
if [ $tgz -eq 1 ]; then
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
  echo "gpu_bundle: $out.tgz: $(du -sh "$out.tgz" | cut -f1)"
fi
