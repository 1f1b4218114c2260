"""Shared build settings for baton's own code.

- BATON_COPTS: warnings as errors, applied to every target of the project
  (never to third-party code).
- baton_cc_library / baton_cc_test / baton_cc_binary: the native rules with
  those copts. Libraries publish their headers under `baton/` (Bazel's
  include_prefix): `#include "baton/runtime/status.h"` inside and outside the
  project alike, so a consumer's own `runtime/` never shadows baton's.
- baton_cuda_library: compiles .cu files with nvcc (one genrule per source)
  into objects linked through a cc_library. With no CUDA toolkit it creates
  an empty cc_library, so dependents still build.
- if_cuda(a, b): a when the toolkit was found, else b (if_nccl, if_cudnn
  likewise for NCCL and the cuDNN 9 headers).
"""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "CUDA_PATH", "CUDNN_ENABLED", "NCCL_ENABLED")

BATON_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

# Hopper (H100/H200) native code plus PTX that newer GPUs can JIT.
NVCC_ARCH_FLAGS = "-gencode=arch=compute_90,code=[sm_90,compute_90]"

def if_cuda(if_true, if_false = []):
    return if_true if CUDA_ENABLED else if_false

def if_nccl(if_true, if_false = []):
    return if_true if NCCL_ENABLED else if_false

def if_cudnn(if_true, if_false = []):
    """if_true when the cuDNN 9 headers were found with the toolkit."""
    return if_true if CUDNN_ENABLED else if_false

# Defines for code that loads cuDNN at run time: BATON_HAVE_CUDNN and the
# toolkit's path (a place to look for libcudnn.so.9 besides the loader's).
CUDNN_COPTS = ["-DBATON_HAVE_CUDNN=1", "-DBATON_CUDA_PATH=\\\"%s\\\"" % CUDA_PATH] if CUDNN_ENABLED else []

def _repo_root():
    """The execroot-relative path of the repository being built: "." for
    the main one, "external/<name>" when baton is someone's dependency."""
    repo = native.repository_name()
    if repo in ["", "@"]:
        return "."
    return "external/" + repo.lstrip("@")

def _include_prefix():
    # Bazel 4 replaces the package path with include_prefix (it does not
    # prepend to it), so the prefix names the package: baton/<package>.
    return "baton/" + native.package_name()

def baton_cc_library(name, copts = [], **kwargs):
    native.cc_library(
        name = name,
        copts = BATON_COPTS + copts,
        include_prefix = _include_prefix(),
        **kwargs
    )

def baton_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = BATON_COPTS + copts, **kwargs)

def baton_cc_test(name, copts = [], deps = [], gtest_main = True, **kwargs):
    """A gtest test with the project's test main (//testing:test_main: gtest
    plus a per-test-case deadline, BATON_TEST_DEADLINE_S); gtest_main = False
    when the test has its own main() (multi-process tests whose binary is
    also the child process)."""
    native.cc_test(
        name = name,
        copts = BATON_COPTS + copts,
        deps = deps + ["@system//:gtest"] +
               ([Label("//testing:test_main")] if gtest_main else []),
        **kwargs
    )

def baton_cuda_library(name, srcs, hdrs = [], deps = [], cu_hdrs = [], **kwargs):
    """A cc_library whose .cu srcs are compiled by nvcc.

    The .cu files may include only CUDA headers and the files listed in
    `cu_hdrs` (plain headers of this project, no abseil): keep the nvcc side
    small and put Status-returning wrappers in ordinary .cc files.
    """
    if not CUDA_ENABLED:
        native.cc_library(name = name, hdrs = hdrs, include_prefix = _include_prefix(), **kwargs)
        return
    root = _repo_root()
    objs = []
    for src in srcs:
        stem = src[:-len(".cu")] if src.endswith(".cu") else src
        out = "_nvcc/%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem.replace("/", "_")),
            srcs = [src] + cu_hdrs + hdrs,
            outs = [out],
            # `baton/...` includes resolve through a temporary directory
            # holding one link, baton -> this repository's root (the main
            # repository or external/<name>).
            cmd = ("T=$$(mktemp -d) && ln -s \"$$PWD/%s\" \"$$T/baton\" && " % root +
                   "%s/bin/nvcc -c -std=c++17 -O3 %s -Xcompiler -fPIC " % (CUDA_PATH, NVCC_ARCH_FLAGS) +
                   "-I\"$$T\" -I$(GENDIR)/%s --expt-relaxed-constexpr -Werror all-warnings " % root +
                   "$(location %s) -o $@; rc=$$?; rm -rf \"$$T\"; exit $$rc" % src),
            message = "nvcc " + src,
        )
        objs.append(out)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        include_prefix = _include_prefix(),
        deps = deps + ["@local_cuda//:cudart"],
        linkstatic = True,
        **kwargs
    )
