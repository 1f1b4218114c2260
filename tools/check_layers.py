#!/usr/bin/env python3
"""The floors of the house (docs/architecture.md): which package may use which.

Checks every `#include "baton/<pkg>/..."` in the sources and every `//<pkg>`
label in the BUILD files of a source tree against ALLOWED, and that
scheduler/ neither includes ops/ nor depends on it. A package's testing/
folder stands on its package's floor. Prints one line per violation and
exits 1 if there is any, 2 for bad usage; 0 with a count otherwise.

  tools/check_layers.py SOURCE_ROOT
"""
import os
import re
import sys

# Package -> the packages it may include or depend on (itself implied);
# None: anything.
ALLOWED = {
    "runtime": set(),
    "memory": {"runtime"},
    "comm": {"runtime"},
    "ops": {"runtime"},
    "scheduler": {"runtime", "memory", "comm"},
    "optim": {"runtime", "memory", "comm", "ops", "scheduler"},
    "sim": {"runtime", "memory", "scheduler"},
    # Parallel dimensions that need both transfers and kernels (context/:
    # ring and all-gather attention); beside optim/.
    "parallel": {"runtime", "comm", "ops"},
    "cli": {"runtime"},
    "examples": {"runtime", "memory", "comm", "ops", "scheduler", "optim", "parallel", "sim", "cli"},
    "bench": {"runtime", "memory", "comm", "ops", "scheduler", "optim", "parallel", "sim", "cli"},
    # The Python module: above examples (it calls simulate's RunSimulate).
    "python": {"runtime", "memory", "comm", "ops", "scheduler", "optim", "parallel", "sim",
               "cli", "examples"},
    "testing": {"runtime"},
    "tests": None,   # end-to-end tests may use anything
    "tools": None,
    "bazel": None,
    "third_party": None,
    "docs": set(),
}
# The build's own macros and shims: every package's BUILD may load them.
TOOLCHAIN = {"bazel", "third_party"}
SOURCE = re.compile(r"\.(cc|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"baton/([a-z_]+)/')
LABEL = re.compile(r'"//([a-z_]+)[/:"]')
VISIBILITY = re.compile(r"visibility\s*=")


def floor(path):
    """The package a file belongs to (its top folder)."""
    return path.split(os.sep, 1)[0]


def arrows(lines, pattern):
    """(line number, package) of every include, or every dependency label of
    a BUILD file (visibility grants are not dependencies)."""
    in_visibility = False
    for n, line in enumerate(lines, 1):
        if pattern is LABEL:
            if VISIBILITY.search(line):
                in_visibility = "]" not in line.split("visibility", 1)[1]
                continue
            if in_visibility:
                in_visibility = "]" not in line
                continue
        for m in pattern.finditer(line):
            yield n, m.group(1)


def check(root):
    problems = []
    checked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if not d.startswith(("bazel-", ".")) and
                       not (rel == "." and d in ("third_party",))]
        for name in filenames:
            path = os.path.normpath(os.path.join(rel, name))
            top = floor(path)
            if top not in ALLOWED:
                if os.sep in path and (SOURCE.search(name) or name == "BUILD"):
                    problems.append(f"{path}: package {top} is not in the floor table "
                                    "(tools/check_layers.py ALLOWED)")
                continue
            allowed = ALLOWED[top]
            if allowed is None:
                continue
            if SOURCE.search(name):
                pattern = INCLUDE
            elif name == "BUILD":
                pattern = LABEL
            else:
                continue
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                lines = list(f)
            for n, target in arrows(lines, pattern):
                checked += 1
                if target == top or target in allowed or target in TOOLCHAIN:
                    continue
                what = "includes" if pattern is INCLUDE else "depends on"
                problems.append(f"{path}:{n}: {top}/ {what} {target}/, which is not below "
                                f"it (allowed: {', '.join(sorted(allowed)) or 'none'})")
    return problems, checked


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_layers.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = argv[1]
    if not os.path.isfile(os.path.join(root, "WORKSPACE")):
        print(f"check_layers: {root} has no WORKSPACE (not a source root)", file=sys.stderr)
        return 2
    problems, checked = check(root)
    for p in problems:
        print(p)
    if checked == 0:
        print("check_layers: found no includes or labels to check")
        return 1
    if problems:
        return 1
    print(f"check_layers: {checked} includes and labels, every arrow points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
