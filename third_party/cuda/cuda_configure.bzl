"""Finds the CUDA toolkit and exposes it as @local_cuda.

The toolkit is taken from $CUDA_HOME, else /usr/local/cuda. It is used when
bin/nvcc and include/cuda_runtime_api.h are there and BATON_NO_CUDA is unset
(or 0). Either way @local_cuda//:defs.bzl defines:

  CUDA_ENABLED  True when the toolkit was found
  CUDA_PATH     its absolute path ("" when not found)
  NCCL_ENABLED  True when nccl.h and libnccl are there too
  CUDNN_ENABLED True when the cuDNN 9 graph API header (cudnn_graph.h) is
                there too; baton loads libcudnn.so.9 at run time (dlopen),
                so nothing links against it

and @local_cuda//:{cudart,nccl,cublas} are cc_library targets (empty when
disabled, so nothing fails to resolve).
"""

def _find_lib_dir(rctx, root, lib):
    for sub in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"]:
        if rctx.path(root + "/" + sub + "/" + lib).exists:
            return root + "/" + sub
    return None

def _cuda_configure_impl(rctx):
    root = rctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    disabled = rctx.os.environ.get("BATON_NO_CUDA", "0") not in ["", "0"]
    found = (not disabled and
             rctx.path(root + "/bin/nvcc").exists and
             rctx.path(root + "/include/cuda_runtime_api.h").exists)
    libdir = _find_lib_dir(rctx, root, "libcudart.so") if found else None
    if found and libdir == None:
        found = False
    nccl = found and rctx.path(root + "/include/nccl.h").exists and \
           _find_lib_dir(rctx, root, "libnccl.so") != None

    cudnn = found and rctx.path(root + "/include/cudnn_graph.h").exists

    rctx.file("defs.bzl", "\n".join([
        "CUDA_ENABLED = %s" % found,
        "CUDA_PATH = \"%s\"" % (root if found else ""),
        "NCCL_ENABLED = %s" % nccl,
        "CUDNN_ENABLED = %s" % cudnn,
        "",
    ]))

    if not found:
        rctx.file("BUILD", "\n".join([
            "package(default_visibility = [\"//visibility:public\"])",
            "exports_files([\"defs.bzl\"])",
            "cc_library(name = \"cudart\")",
            "cc_library(name = \"nccl\")",
            "cc_library(name = \"cublas\")",
            "",
        ]))
        return

    rctx.symlink(root + "/include", "include")
    rpath = "-Wl,-rpath," + libdir
    nccl_dir = _find_lib_dir(rctx, root, "libnccl.so") if nccl else libdir
    build = """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**"], exclude = ["include/cccl/**", "include/Openacc/**", "include/Openmp/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    linkopts = ["-L{libdir}", "{rpath}", "-lcudart"],
    deps = [":headers"],
)

cc_library(
    name = "nccl",
    linkopts = {nccl_linkopts},
    deps = [":cudart"],
)

cc_library(
    name = "cublas",
    linkopts = ["-L{libdir}", "{rpath}", "-lcublasLt", "-lcublas"],
    deps = [":cudart"],
)
""".format(
        libdir = libdir,
        rpath = rpath,
        nccl_linkopts = ('["-L%s", "-Wl,-rpath,%s", "-lnccl"]' % (nccl_dir, nccl_dir)) if nccl else "[]",
    )
    rctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME", "BATON_NO_CUDA"],
    local = True,
)
