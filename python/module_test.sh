#!/usr/bin/env bash
# //python:module_test: the built package under /usr/bin/python3 (Debian's,
# the one pybind11-dev and python3-dev build for), against the program.
set -euo pipefail
exec /usr/bin/python3 "$1" --simulate="$2" --package="$PWD/python"
