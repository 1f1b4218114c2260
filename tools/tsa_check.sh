#!/usr/bin/env bash
# Checks baton's thread-safety annotations (ABSL_GUARDED_BY and friends,
# absl/base/thread_annotations.h) with clang's -Wthread-safety -Werror.
#
# The project builds with GCC, which ignores the annotations; this runs
# clang (clang++ on PATH, or $CLANGXX) in -fsyntax-only mode over every
# library source that includes an annotated header or uses an annotation,
# so nothing is linked and no Bazel configuration changes. CUDA and NCCL
# sources are checked when their headers are installed (/usr/local/cuda or
# $CUDA_HOME), skipped otherwise.
#
# Usage: tools/tsa_check.sh          (from anywhere; exits non-zero on a
#                                     finding, printing clang's diagnostics)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cxx="${CLANGXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "tsa_check: $cxx not found (set CLANGXX)" >&2
  exit 2
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"

inc="$(mktemp -d)"
trap 'rm -rf "$inc"' EXIT
ln -s "$root" "$inc/baton"

# Annotated headers, then every library source that uses annotations or
# includes one of those headers (tests excluded: they hold no annotations).
annot='ABSL_(GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED|LOCKS_EXCLUDED|LOCK_RETURNED|LOCKABLE|SCOPED_LOCKABLE|EXCLUSIVE_LOCK_FUNCTION|UNLOCK_FUNCTION|ACQUIRED_AFTER|ACQUIRED_BEFORE|ASSERT_EXCLUSIVE_LOCK|NO_THREAD_SAFETY_ANALYSIS)'
dirs=(runtime memory comm scheduler ops sim examples bench)
mapfile -t headers < <(grep -rlE "$annot" --include='*.h' "${dirs[@]}" | sort)
pattern="$annot"
for h in "${headers[@]}"; do pattern="$pattern|\"baton/$h\""; done
mapfile -t sources < <(grep -rlE "$pattern" --include='*.cc' "${dirs[@]}" |
                       grep -v '_test\.cc$' | sort)

flags=(-std=c++17 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror
       -Wno-unknown-warning-option -I"$inc")
# The check must be able to fail: an unguarded read of an annotated member
# has to be refused, or the annotations are not being analysed.
cat > "$inc/self_test.cc" <<'CC'
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
struct S {
  absl::Mutex mu;
  int x ABSL_GUARDED_BY(mu) = 0;
  int Read() { return x; }
};
CC
if "$cxx" "${flags[@]}" "$inc/self_test.cc" 2>/dev/null; then
  echo "tsa_check: $cxx did not flag an unguarded read; analysis is off" >&2
  exit 1
fi

checked=0 skipped=0 failed=0
for src in "${sources[@]}"; do
  extra=()
  if grep -qE 'cuda_runtime|cuda_check\.h|nccl' "$src"; then
    if [ ! -f "$cuda/include/cuda_runtime.h" ]; then
      echo "tsa_check: skip $src (no CUDA headers)"; skipped=$((skipped + 1)); continue
    fi
    extra+=(-DBATON_HAVE_CUDA=1 -isystem "$cuda/include")
    grep -q nccl "$src" && extra+=(-DBATON_HAVE_NCCL=1)
  fi
  if ! "$cxx" "${flags[@]}" "${extra[@]}" "$src"; then
    echo "tsa_check: FAILED $src" >&2
    failed=$((failed + 1))
  fi
  checked=$((checked + 1))
done
echo "tsa_check: $checked sources checked, $failed failed, $skipped skipped" \
     "(${#headers[@]} annotated headers)"
[ "$failed" -eq 0 ]
