"""What a program outside the project links: the public headers and the
pieces of the shared libraries of `./bazelw run //:install`.

PUBLIC_HEADERS is the API (docs/linking.md): what a trainer includes
as "baton/<path>". SUPPORT_HEADERS are installed only because public headers
include them; they are not API. //:public_headers_test checks that the two
lists together are closed under #include "baton/...".
"""

PUBLIC_HEADERS = [
    "comm/comm_config.h",
    "comm/communicator.h",
    "comm/factory.h",
    "comm/reduce.h",
    "comm/bootstrap/launch_env.h",
    "comm/bootstrap/store.h",
    "runtime/device.h",
    "runtime/dtype.h",
    "runtime/status.h",
    "runtime/version.h",
    "optim/adamw_hook.h",
    "optim/zenflow_driver.h",
    "scheduler/executor.h",
    "scheduler/layout.h",
    "scheduler/limits.h",
    "scheduler/mesh.h",
    "scheduler/model.h",
    "scheduler/optimizer_driver.h",
    "scheduler/policy.h",
    "scheduler/policy_file.h",
    "scheduler/session.h",
    "scheduler/step_graph.h",
    "scheduler/streams.h",
]

SUPPORT_HEADERS = [
    "comm/bootstrap/store_wire.h",
    "memory/arena.h",
    "memory/planner.h",
    "memory/step_dag.h",
    "ops/adamw.h",
    "ops/adamw8bit.h",
]

def header_label(path):
    """"scheduler/session.h" -> "//scheduler:session.h"."""
    i = path.rfind("/")
    return "//%s:%s" % (path[:i], path[i + 1:])

def _cc_objects_impl(ctx):
    """The PIC object files of deps' libraries (transitively), less those
    of `exclude`'s: what a shared library built from them must hold.
    alwayslink libraries are left out: a cc_binary that has them in its
    deps links all of their objects anyway."""
    skip = {}
    for dep in ctx.attr.exclude:
        for li in dep[CcInfo].linking_context.linker_inputs.to_list():
            for lib in li.libraries:
                for o in (lib.pic_objects or lib.objects or []):
                    skip[o.path] = True
    objs = []
    for dep in ctx.attr.deps:
        for li in dep[CcInfo].linking_context.linker_inputs.to_list():
            for lib in li.libraries:
                if lib.alwayslink:
                    continue
                for o in (lib.pic_objects or lib.objects or []):
                    if o.path not in skip:
                        skip[o.path] = True
                        objs.append(o)
    return [DefaultInfo(files = depset(objs))]

cc_objects = rule(
    implementation = _cc_objects_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "exclude": attr.label_list(providers = [CcInfo]),
    },
    doc = "Object files of cc_library deps, for a linkshared cc_binary.",
)
