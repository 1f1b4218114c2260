#!/bin/bash
# Every command shown in README.md and docs/*.md runs as written (sizes
# shrunk by the rules in docs_commands.py), shown output matches, links
# resolve: tests/docs_commands.py over the pages and binaries this test's
# BUILD rule names. Then the checker itself over small fake trees: each
# kind of bad page fails naming the problem, and a good one passes.
#
#   docs_commands_test.sh DOCS_COMMANDS_PY ARGS...
set -u
checker="$(readlink -f "$1")"
fail=0
python3 "$@" || { echo "FAIL: the docs' commands (above)"; fail=1; }

T="${TEST_TMPDIR:-$(mktemp -d)}/fake"
# fake NAME PAGE_TEXT: a tree with README.md linking docs/a.md, docs/a.md
# holding PAGE_TEXT, and a .ci/run that runs tools/ci_step.sh.
fake() {
  local d="$T/$1"
  mkdir -p "$d/docs" "$d/.ci" "$d/tools"
  printf '# fake\n\n[a](docs/a.md)\n' > "$d/README.md"
  printf '#!/bin/bash\ntools/ci_step.sh\n' > "$d/.ci/run"
  touch "$d/tools/ci_step.sh"
  printf '%s\n' "$2" > "$d/docs/a.md"
}
# expect NAME RC TEXT: the checker over fake tree NAME exits RC and, for a
# failure, names TEXT.
expect() {
  local d="$T/$1" out rc
  out="$(cd "$d" && python3 "$checker" --readme="$d/README.md" \
         --target=//x:echo=/bin/echo --target=//examples:train_tiny=/bin/echo \
         "$d/docs/a.md" 2>&1)"
  rc=$?
  if [[ $rc -ne $2 ]] || ! grep -qF -- "$3" <<<"$out"; then
    echo "FAIL fake page $1: exit $rc (want $2), want '$3' in:"; echo "$out"; fail=1
  else
    echo "ok   fake page $1: $(grep -F -- "$3" <<<"$out" | head -n 1 | cut -c1-120)"
  fi
}
fence='```'
fake good "$(printf '%ssh\n./bazelw run //x:echo -- hello docs\n%s\n\n%s\nhello   docs\n%s\n' \
  "$fence" "$fence" "$fence" "$fence")"
expect good 0 "1 commands run, 0 left out, 0 failed"
fake unknown "$(printf '%ssh\nls /\n%s\n' "$fence" "$fence")"
expect unknown 1 "does not know how to run this command: ls /"
fake not_data "$(printf '%ssh\n./bazelw run //y:z\n%s\n' "$fence" "$fence")"
expect not_data 1 "//y:z is not in the test's data"
fake bash_block "$(printf '%sbash\n./bazelw run //x:echo\n%s\n' "$fence" "$fence")"
expect bash_block 1 "a \`\`\`bash block"
fake drift "$(printf '%ssh\n./bazelw run //x:echo -- hello\n%s\n%s\ngoodbye\n%s\n' \
  "$fence" "$fence" "$fence" "$fence")"
expect drift 1 "the shown line is not in what the command prints today"
fake link "[gone](missing.md)"
expect link 1 "does not resolve: no docs/missing.md"
fake anchor "[here](a.md#no-such-heading)"
expect anchor 1 "names no heading of docs/a.md"
fake ci_marker "$(printf '%ssh\nmake all  # CI: tools/other.sh\n%s\n' "$fence" "$fence")"
expect ci_marker 1 ".ci/run does not run tools/other.sh"
fake outside "$(printf 'Run it:\n\n./bazelw run //x:echo\n')"
expect outside 1 "a ./bazelw command outside a \`\`\`sh block"
fake left_out "$(printf '%ssh\n./bazelw test //...\ntools/ci_step.sh\n./bazelw run //x:echo  # GPU machine\n%s\n' \
  "$fence" "$fence")"
expect left_out 0 "0 commands run, 3 left out, 0 failed"
fake shrunk "$(printf '%ssh\n./bazelw run //examples:train_tiny -- --steps=20\n%s\n%s\n--steps=20\n%s\n' \
  "$fence" "$fence" "$fence" "$fence")"
expect shrunk 1 "output shown after a command the test shrinks cannot be compared"
fake comment "$(printf '%ssh\n./bazelw run //x:echo  # on Tuesdays\n%s\n' "$fence" "$fence")"
expect comment 1 "a trailing comment the test does not know"
fake python "$(printf '%ssh\nPYTHONPATH=/tmp/nowhere /usr/bin/python3 -c "import sys; print(sys.path[1].endswith(\x27/tmp/nowhere\x27))"\n%s\n%s\nTrue\n%s\n' \
  "$fence" "$fence" "$fence" "$fence")"
expect python 0 "1 commands run, 0 left out, 0 failed"
fake python_fails "$(printf '%ssh\nPYTHONPATH=/tmp /usr/bin/python3 -c "raise SystemExit(3)"\n%s\n' "$fence" "$fence")"
expect python_fails 1 "exit 3"
fake unlinked "text"
printf '# fake\n' > "$T/unlinked/README.md"
expect unlinked 1 "README.md does not link docs/a.md"
exit $fail
