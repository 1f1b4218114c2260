#!/usr/bin/env bash
# Packs baton's portable GPU suite (docs/gpu.md): every CUDA-capable test
# binary (a cc_test that links cudart), train_tiny and the GPU benches (and
# simulate, which reads the measured kernel table), built -c opt, with the
# non-system shared libraries they load, into one folder that runs on a GPU
# machine without Bazel:
#
#   tools/gpu_bundle.sh DIR [--tgz] [--since=COMMIT]
#       --tgz also writes DIR.tgz and fails if it is over 60 MiB (what one
#       call of the GPU machine can carry beside the repository);
#       --since: the last measured run (default: FINDINGS.md's, 2026-11-22)
#   DIR/run_gpu_suite.sh --budget=SECONDS [--call=1|2] [--dry-run]
#
# Packed: absl, UCX (+ its ucx/ module folder), gtest, benchmark, the
# project's own _solib .so files, libcudart and anything else ldd resolves
# outside the list below. Not packed (the GPU machine has its own): glibc,
# libstdc++/libgcc, libcuda, NCCL, cuBLAS, cuDNN. Beside them: the suite
# (run_gpu_suite.sh, gpu_suite_run.sh, gpu_suite_parts.sh), times.tsv (each
# part's expected time), tests.txt (each test and whether it has GPU cases:
# it imports CreateCudaDevice, CudaDeviceCount or ops::testing::TestDevices),
# memcheck.txt (the GPU unit tests that link a CUDA source changed since
# --since), whole_step.py, torch_step.py and peers/torch_llama.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# The binaries of the last GPU run (../shared/gpu/FINDINGS.md, 2026-11-22).
since=c39d056
out="" tgz=0
usage() { echo "gpu_bundle: $1 (usage: tools/gpu_bundle.sh DIR [--tgz] [--since=COMMIT])" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --tgz) tgz=1 ;;
    --since=*) since="${arg#--since=}" ;;
    -*) usage "unknown option '$arg'" ;;
    *) [ -z "$out" ] || usage "two folders given ('$out', '$arg')"; out="$arg" ;;
  esac
done
[ -n "$out" ] || usage "no folder given"
cd "$root"
git rev-parse -q --verify "$since^{commit}" > /dev/null ||
  usage "--since=$since is not a commit of this repository"
if [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "gpu_bundle: no CUDA toolkit here; the bundle would hold no GPU code" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

mapfile -t tests < <(./bazelw query --noshow_progress \
  'kind("cc_test", rdeps(//..., @local_cuda//:cudart)) except //tests:ucx_collectives_test' \
  2>/dev/null | sort)
[ ${#tests[@]} -gt 0 ] || { echo "gpu_bundle: bazel query found no CUDA-capable test" >&2; exit 1; }
binaries=(//examples:train_tiny //examples:simulate //bench:runtime //bench:collectives
          //bench:scheduler //bench:ops //bench:kernels)
echo "gpu_bundle: ${#tests[@]} tests, ${#binaries[@]} binaries"
./bazelw build -c opt "${tests[@]}" "${binaries[@]}"
bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)"

rm -rf "$out/bin" "$out/lib" "$out/peers" "$out/logs"
mkdir -p "$out/bin" "$out/lib" "$out/peers"
path_of() { local p="${1#//}"; echo "${p%%:*}/${1##*:}"; }  # //pkg:name -> pkg/name
copy_target() {  # //pkg:name -> bin/pkg/name; prints the bazel-bin path (for ldd)
  local p
  p="$(path_of "$1")"
  mkdir -p "$out/bin/$(dirname "$p")"
  cp -L "$bin/$p" "$out/bin/$p"
  chmod u+w "$out/bin/$p"
  echo "$bin/$p"  # ldd resolves its $ORIGIN runpath (_solib) there
}
# A test has GPU cases when it opens a CUDA device itself.
gpu_kind() {
  if { nm -C "$1"; nm -D -C "$1"; } 2>/dev/null |
       grep -E 'baton::(CreateCudaDevice|CudaDeviceCount|ops::testing::TestDevices)\(' > /dev/null; then  # not -q: nm would die of SIGPIPE (pipefail)
    echo gpu
  else
    echo host
  fi
}
files=()  # the binaries in bazel-bin, for ldd
: > "$out/tests.txt"
declare -A kind_of=()
for t in "${tests[@]}"; do
  f="$(copy_target "$t")"
  files+=("$f")
  kind_of[$t]="$(gpu_kind "$f")"
  printf '%s\t%s\n' "$(path_of "$t")" "${kind_of[$t]}" >> "$out/tests.txt"
done
for b in "${binaries[@]}"; do files+=("$(copy_target "$b")"); done

# memcheck.txt: the CUDA sources changed since the last measured run, and
# the GPU unit tests (not tests/, the end-to-end binaries) that link them.
package_of() {  # the Bazel package holding file $1
  local d
  d="$(dirname "$1")"
  while [ "$d" != . ] && [ ! -f "$d/BUILD" ] && [ ! -f "$d/BUILD.bazel" ]; do d="$(dirname "$d")"; done
  echo "$d"
}
mapfile -t changed < <(git diff --name-only "$since" -- '*.cu' '*.cuh')  # to the work tree
test_set="set(${tests[*]})"
present=() removed=()
declare -A memcheck=()
for f in "${changed[@]}"; do
  if [ ! -f "$f" ]; then removed+=("$f"); continue; fi
  present+=("$f")
  pkg="$(package_of "$f")"
  while read -r t; do
    [ -n "$t" ] && [ "${kind_of[$t]:-}" = gpu ] && memcheck[$t]=1
  done < <(./bazelw query --noshow_progress \
             "kind(cc_test, rdeps($test_set, //$pkg:${f#"$pkg"/})) except //tests/..." 2>/dev/null)
done
{
  echo "# CUDA sources changed since $since (the last measured run was of c39d056, 2026-11-22): ${#present[@]} changed, ${#removed[@]} removed; ${#memcheck[@]} GPU unit tests link them"
  echo "# rule: tests.txt's gpu tests that link a changed source (bazel rdeps), tests/ left out"
  echo "# changed: ${present[*]:-none}"
  echo "# removed: ${removed[*]:-none}"
  for t in "${!memcheck[@]}"; do path_of "$t"; done | sort
} > "$out/memcheck.txt"

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
ucs=""
for f in "${files[@]}"; do
  ucs="$(ldd "$f" | awk '/libucs\.so/ { print $3 }' | head -1)"
  [ -n "$ucs" ] && break
done
if [ -n "$ucs" ] && [ -d "$(dirname "$(readlink -f "$ucs")")/ucx" ]; then
  mkdir -p "$out/lib/ucx"
  cp -a "$(dirname "$(readlink -f "$ucs")")"/ucx/*.so* "$out/lib/ucx/"  # keeps links
  for m in "$out"/lib/ucx/*.so*; do
    [ -L "$m" ] || copy_deps "$m"
  done
fi
chmod -R u+w "$out/lib"
cp "$root/tools/gpu_suite.sh" "$out/run_gpu_suite.sh"
cp "$root/tools/gpu_suite_run.sh" "$root/tools/gpu_suite_parts.sh" "$out/"
cp "$root/tools/gpu_suite_times.tsv" "$out/times.tsv"
cp "$root/tools/whole_step.py" "$root/tools/torch_step.py" "$out/"
cp "$root/tools/peers/torch_llama.py" "$out/peers/"
chmod +x "$out/run_gpu_suite.sh"
{ git rev-parse --short HEAD | tr -d '\n'; git diff --quiet HEAD -- || echo -n " + uncommitted changes"; echo; } > "$out/COMMIT"
echo "gpu_bundle: $out: $(du -sh "$out" | cut -f1)" \
     "($(wc -l < "$out/tests.txt") tests, $(grep -c $'\tgpu$' "$out/tests.txt") with GPU cases," \
     "$(grep -vc '^#' "$out/memcheck.txt") to memcheck, $(ls "$out/lib" | grep -c '\.so') libraries)"
if [ $tgz -eq 1 ]; then
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
  bytes=$(stat -c %s "$out.tgz")
  echo "gpu_bundle: $out.tgz: $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB, at most 60)"
  if [ "$bytes" -gt $((60 * 1048576)) ]; then
    echo "gpu_bundle: $out.tgz is over 60 MiB: it would not travel with one call" >&2
    exit 1
  fi
fi
