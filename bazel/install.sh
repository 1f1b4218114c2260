#!/usr/bin/env bash
# ./bazelw run //:install -- --prefix=DIR
#
# Installs baton for programs built outside Bazel:
#   DIR/lib/libbaton.so{,.MAJOR,.VERSION}          the API (docs/linking.md)
#   DIR/lib/libbaton_{ucx,nccl}.so{,.MAJOR,.VERSION}  one library per backend
#   DIR/include/baton/...                          the installed headers
#   DIR/lib/pkgconfig/baton{,-ucx,-nccl}.pc
#   DIR/lib/cmake/baton/batonConfig{,Version}.cmake   baton::baton, baton::ucx,
#                                                  baton::nccl
#   DIR/lib/python3/dist-packages/baton/           the Python module (docs/python.md;
#                                                  PYTHONPATH=DIR/lib/python3/dist-packages)
#   DIR/share/doc/baton/LICENSE
# A relative DIR is taken from the directory `bazel run` was started in.
# Bad usage: one line on stderr, exit 2.
set -euo pipefail

version="" soversion="" prefix=""
headers=()
for a in "$@"; do
  case "$a" in
    *.h) headers+=("$a") ;;
    --version=*) version="${a#--version=}" ;;
    --soversion=*) soversion="${a#--soversion=}" ;;
    --prefix=*) prefix="${a#--prefix=}" ;;
    -h|--help)
      echo "usage: ./bazelw run //:install -- --prefix=DIR"; exit 0 ;;
    *) echo "install: unknown argument '$a' (usage: --prefix=DIR)" >&2; exit 2 ;;
  esac
done
if [ -z "$prefix" ]; then
  echo "install: --prefix=DIR is required" >&2; exit 2
fi
if [ -z "$version" ] || [ -z "$soversion" ] || [ ${#headers[@]} -eq 0 ]; then
  echo "install: run it as ./bazelw run //:install (version not set)" >&2; exit 2
fi
case "$prefix" in
  /*) ;;
  *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;;
esac

# Inputs are in the runfiles tree, rooted at the current directory.
for f in libbaton.so libbaton_ucx.so libbaton_nccl.so bazel/baton.pc.in \
         bazel/batonConfig.cmake.in LICENSE runtime/version.h \
         python/baton/__init__.py python/baton/launch.py python/baton/torch.py \
         python/baton/_baton.so; do
  [ -f "$f" ] || { echo "install: $f is missing from the runfiles" >&2; exit 1; }
done

mkdir -p "$prefix/lib/pkgconfig" "$prefix/lib/cmake/baton" \
         "$prefix/include/baton" "$prefix/share/doc/baton"

for lib in baton baton_ucx baton_nccl; do
  install -m 0755 "lib$lib.so" "$prefix/lib/lib$lib.so.$version"
  ln -sfn "lib$lib.so.$version" "$prefix/lib/lib$lib.so.$soversion"
  ln -sfn "lib$lib.so.$soversion" "$prefix/lib/lib$lib.so"
done

for h in "${headers[@]}"; do
  mkdir -p "$prefix/include/baton/$(dirname "$h")"
  install -m 0644 "$h" "$prefix/include/baton/$h"
done
n=${#headers[@]}

subst() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
      -e "s|@SOVERSION@|$soversion|g" "$@"
}
subst bazel/baton.pc.in > "$prefix/lib/pkgconfig/baton.pc"
for b in ucx nccl; do
  subst bazel/baton.pc.in | sed -n '1,/^$/p' > "$prefix/lib/pkgconfig/baton-$b.pc"
  cat >> "$prefix/lib/pkgconfig/baton-$b.pc" <<PC
Name: baton-$b
Description: baton's $b communication backend
Version: $version
Requires: baton = $version
Libs: -L\${libdir} -Wl,--push-state,--no-as-needed,-lbaton_$b,--pop-state
PC
done
subst bazel/batonConfig.cmake.in > "$prefix/lib/cmake/baton/batonConfig.cmake"
cat > "$prefix/lib/cmake/baton/batonConfigVersion.cmake" <<CM
# baton $version: compatible with a request for the same major version and
# a minor.patch not above this one.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT "\${PACKAGE_FIND_VERSION_MAJOR}" STREQUAL "" AND
       NOT PACKAGE_FIND_VERSION_MAJOR EQUAL $soversion)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CM
install -m 0644 LICENSE "$prefix/share/doc/baton/LICENSE"
py="$prefix/lib/python3/dist-packages/baton"
mkdir -p "$py"
install -m 0644 python/baton/__init__.py "$py/__init__.py"
install -m 0644 python/baton/torch.py "$py/torch.py"
install -m 0644 python/baton/launch.py "$py/launch.py"
install -m 0755 python/baton/_baton.so "$py/_baton.so"
echo "installed baton $version into $prefix ($n headers)"
