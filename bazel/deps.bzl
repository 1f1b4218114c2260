"""baton_deps(): the external repositories baton's build needs, for a
workspace that uses baton as a dependency.

    local_repository(name = "baton", path = "/path/to/baton")
    load("@baton//bazel:deps.bzl", "baton_deps")
    baton_deps()

declares, unless a repository of that name is already declared:

- rules_cc, rules_java, remote_coverage_tools: offline shims (baton's
  third_party/). Bazel 4.2.3 appends these three to every WORKSPACE and would
  download them; declaring them first keeps the build offline.
- system: Debian's -dev packages (abseil, GoogleTest, Google Benchmark, UCX,
  nlohmann-json) under /usr, as baton's third_party/system.BUILD describes.
- local_cuda: the CUDA toolkit at $CUDA_HOME or /usr/local/cuda (empty
  targets when absent or BATON_NO_CUDA=1; third_party/cuda).

Each name can be changed (system_name = "debian", ...). baton's BUILD files
refer to @system and @local_cuda, so a workspace that renames them maps the
old names on the baton repository:

    local_repository(name = "baton", path = ...,
                     repo_mapping = {"@system": "@debian"})
"""

load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")

def _shim_impl(rctx):
    # The shim's directory in baton's source tree, found through a file of
    # baton's third_party package (a label, so it works wherever baton is).
    root = rctx.path(rctx.attr._anchor).dirname.get_child(rctx.attr.shim)
    if not root.exists:
        fail("baton_deps: shim directory %s is missing" % root)
    for entry in root.readdir():
        rctx.symlink(entry, entry.basename)

_shim_repository = repository_rule(
    implementation = _shim_impl,
    attrs = {
        "shim": attr.string(mandatory = True),
        "_anchor": attr.label(default = Label("//third_party:BUILD")),
    },
    local = True,
)

def baton_deps(
        rules_cc_name = "rules_cc",
        rules_java_name = "rules_java",
        remote_coverage_tools_name = "remote_coverage_tools",
        system_name = "system",
        cuda_name = "local_cuda"):
    """Declares baton's external repositories that are not yet declared."""
    existing = native.existing_rules()
    for name, shim in [
        (rules_cc_name, "rules_cc"),
        (rules_java_name, "rules_java"),
        (remote_coverage_tools_name, "remote_coverage_tools"),
    ]:
        if name not in existing:
            _shim_repository(name = name, shim = shim)
    if system_name not in existing:
        native.new_local_repository(
            name = system_name,
            build_file = str(Label("//third_party:system.BUILD")),
            path = "/usr",
        )
    if cuda_name not in existing:
        cuda_configure(name = cuda_name)
