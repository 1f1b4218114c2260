#!/usr/bin/env python3
"""Every command shown in README.md and docs/*.md runs, as written.

The docs' convention (docs/ci.md, "The docs' commands"): a command a reader
types is in a ```sh block, one per line (a trailing backslash continues
it); what a command prints is in a plain ``` block right after its ```sh
block. This test reads every page and:

- runs `./bazelw run //pkg:target [-- ARGS]` as the runfile binary of that
  target (given to the test with --target) with the target's own `args` if
  it has any (--baked) and ARGS, from the runfiles root, exit status 0;
  `echo 'TEXT' > /tmp/FILE` writes the file;
  `PYTHONPATH=DIR /usr/bin/python3 ARGS...` runs Debian's Python with DIR
  (a path under /tmp/ or /opt/, e.g. where //:install put the module) and
  ARGS (a script path relative to the source tree is read from it). Paths under /tmp/ and /opt/
  are redirected into $TEST_TMPDIR; the commands of one page run in order,
  so a later command reads what an earlier one wrote (a command shown
  twice that touches no such path runs once).
- shrinks sizes by the rules of SHRINK and SMALLEST_MODEL below
  (train_tiny's model and --steps, ...),
  so that the whole test takes seconds; a command it shrank may not be
  followed by shown output (that output could not be compared).
- checks shown output: every shown line but `...` must be a line of what
  the command printed (stdout and stderr), compared with runs of spaces
  collapsed and wall-clock times ("in 0.27 s") not compared.
- `# draws docs/FILE` after a command: the file it writes (its last /tmp
  argument) must equal docs/FILE byte for byte.
- leaves out, saying why: `./bazelw test|build ...` (CI runs the suite),
  `bash .ci/run` and the scripts .ci/run runs (CI runs them), a command
  ending `# CI: SCRIPT` where .ci/run runs SCRIPT, and a command ending
  `# GPU machine`.
- fails on anything else in a ```sh block (a command it does not know how
  to run is never skipped silently), on shell blocks spelled otherwise
  (```bash, ```console, ...), on a `./bazelw` line outside a ```sh block,
  on a relative link or image that does not resolve in the source tree, on
  a docs/*.md page the README does not link, and on a README over 250
  lines.

  docs_commands.py --readme=README.md [--target=LABEL=PATH ...]
      [--baked=LABEL ARG... --end] PAGE...
"""
import os
import re
import shlex
import subprocess
import sys
import time

README_MAX_LINES = 250
# Pages other branches add (the lead merges them); a link to one resolves
# once it is there, and is accepted (and named) while it is not.
PENDING_PAGES = {}
CI_SCRIPT = ".ci/run"
# The Python the docs' Python commands name (Debian's, which the module is
# built for).
PYTHON = "/usr/bin/python3"
COMMAND_TIMEOUT_S = 240
SHELL_LANGS = {"bash", "shell", "console", "zsh", "shell-session", "sh-session"}


def size_value(text):
    """64M -> 67108864 (binary K/M/G, as //bench:collectives reads them)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        return None
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


# How the test shrinks a command's sizes: target -> [(flag, cap, add)]: a
# value above `cap` becomes `cap`; `add` puts `flag=cap` in when the
# command does not give the flag. Flags written "-b 64M" (two words) are
# handled for //bench:collectives.
SHRINK = {
    # The micro model (2 blocks, hidden 32; below), 2 steps of 16 tokens x 1
    # sequence per rank (tiny: 4 blocks, hidden 256, 20 steps of 2 x 128).
    "//examples:train_tiny": [("--steps", 2, True), ("--seq", 16, True),
                              ("--batch", 1, True)],
    # issue cost over 3 steps of the micro model (default 200 of tiny).
    "//bench:scheduler": [("--issue-steps", 3, True)],
    # 6 steps saving every 2nd; the model flags it passes to train_tiny
    # (after --) at the micro model's sizes.
    "//examples:checkpoint_bench": [("--steps", 6, False), ("--save-every", 2, False),
                                 ("--layers", 2, False), ("--hidden", 64, False),
                                 ("--ffn", 128, False), ("--vocab", 256, False),
                                 ("--seq", 16, False), ("--batch", 1, False)],
    # one run of every policy (default: the best of 3).
    "//bench:simulator": [("--reps", 1, True)],
    # 256K parameters, 2 repetitions (default 16M).
    "//bench:host_adamw": [("--n", 262144, True), ("--reps", 2, True)],
    # 1 MiB at most.
    "//bench:collectives": [("-b", 1 << 20, False), ("-e", 1 << 20, False),
                            ("--minbytes", 1 << 20, False),
                            ("--maxbytes", 1 << 20, False)],
    # 0.01 s per benchmark.
    "//bench:runtime": [("--benchmark_min_time", 0.01, True)],
    # 1 ms of timed calls per pass.
    "//bench:ops": [("--min-time", 0.001, True)],
    "//bench:kernels": [("--min-time", 0.001, True)],
}


# Commands of these targets run the smallest model preset instead of the
# one they name (unless they give a config.json).
SMALLEST_MODEL = {"//examples:train_tiny": "--model=micro",
                  "//bench:scheduler": "--issue-model=micro",
                  # its train_tiny flags: a command shows them after "--"
                  "//examples:checkpoint_bench": "--model=micro"}


# A train_tiny command that saves or resumes a checkpoint keeps up to 20
# steps and 4 sequences per rank (the micro model still): the page names
# the checkpoints by step and resumes with the same global batch on other
# rank counts.
CHECKPOINT_FLAGS = ("--save-dir=", "--resume=")
CHECKPOINT_SHRINK = {"//examples:train_tiny": {"--steps": 20, "--batch": 4}}


def shrink(label, args):
    """(args with the rules of SHRINK applied, whether anything changed)."""
    rules = SHRINK.get(label, [])
    if label in CHECKPOINT_SHRINK and any(a.startswith(CHECKPOINT_FLAGS) for a in args):
        keep = CHECKPOINT_SHRINK[label]
        # (train_tiny's defaults are within those: nothing to add)
        rules = [(flag, keep[flag], False) if flag in keep else (flag, cap, add)
                 for flag, cap, add in rules]
    out = list(args)
    changed = False
    if label in SMALLEST_MODEL and not any(a.startswith("--hf-config=") for a in out):
        model = SMALLEST_MODEL[label]
        flag = model.split("=")[0] + "="
        kept = [a for a in out if not a.startswith(flag)]
        if kept + [model] != out:
            out, changed = kept + [model], True
    for flag, cap, add in rules:
        found = False
        i = 0
        while i < len(out):
            a = out[i]
            if a.startswith(flag + "="):
                found = True
                value = a[len(flag) + 1:]
                v = size_value(value) if label == "//bench:collectives" else float(value)
                if v is None or v > cap:
                    out[i] = f"{flag}={cap}"
                    changed = True
            elif a == flag and label == "//bench:collectives" and i + 1 < len(out):
                found = True
                v = size_value(out[i + 1])
                if v is None or v > cap:
                    out[i + 1] = str(cap)
                    changed = True
                i += 1
            i += 1
        if not found and add:
            out.append(f"{flag}={cap}")
            changed = True
    return out, changed


class Failure(Exception):
    pass


def parse_args(argv):
    readme = None
    targets = {}
    baked = {}
    pages = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--readme="):
            readme = a[len("--readme="):]
        elif a.startswith("--target="):
            label, _, path = a[len("--target="):].rpartition("=")
            targets[label] = os.path.abspath(path)
        elif a.startswith("--baked="):
            label = a[len("--baked="):]
            j = argv.index("--end", i)
            baked[label] = argv[i + 1:j]
            i = j
        elif a.endswith(".md"):
            pages.append(a)  # other files of the pages' filegroup: link targets
        i += 1
    if not readme or not pages:
        print("usage: docs_commands.py --readme=README.md [--target=LABEL=PATH ...] "
              "[--baked=LABEL ARG... --end] PAGE...", file=sys.stderr)
        sys.exit(2)
    return readme, targets, baked, pages


class Block:
    def __init__(self, lang, start, lines, follows_block):
        self.lang = lang      # "" for a plain block
        self.start = start    # line number of the opening fence
        self.lines = lines
        # Only blank lines between this block and the one before it.
        self.follows_block = follows_block


def blocks(text):
    """The fenced blocks of a page, in order, and the (number, text) of the
    lines outside them."""
    out = []
    outside = []
    lines = text.split("\n")
    i = 0
    gap = None  # 0 after a block closes; None once prose follows it
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*([\w+-]*)\s*$", lines[i])
        if not m:
            outside.append((i + 1, lines[i]))
            if lines[i].strip() and gap is not None:
                gap = None
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2)
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        if i == len(lines):
            raise Failure(f"line {start}: a ``` block that is never closed")
        out.append(Block(lang, start, body, gap is not None))
        gap = 0
        i += 1
    return out, outside


def split_marker(first, full):
    """(command, marker) of one command line: its trailing `# GPU machine`,
    `# CI: SCRIPT` or `# draws docs/FILE`; any other trailing comment fails."""
    m = re.search(r"\s#\s*(GPU machine|CI: \S+|draws \S+)\s*$", full)
    if m:
        return full[:m.start()].strip(), m.group(1)
    try:
        commented = shlex.split(full, comments=True) != shlex.split(full)
    except ValueError as e:
        raise Failure(f"line {first}: {e}: {full}")
    if commented:
        raise Failure(f"line {first}: a trailing comment the test does not know "
                      f"(use '# GPU machine', '# CI: SCRIPT' or '# draws docs/FILE'): {full}")
    return full.strip(), None


def commands(block):
    """(line number, command, marker) of each command of an sh block; a line
    ending in a backslash continues on the next."""
    out = []
    pending = ""
    first = None
    for n, line in enumerate(block.lines, block.start + 1):
        s = line.rstrip()
        if not pending and (not s.strip() or s.lstrip().startswith("#")):
            continue
        if first is None:
            first = n
        if s.endswith("\\"):
            pending += s[:-1] + " "
            continue
        out.append((first,) + split_marker(first, pending + s))
        pending, first = "", None
    if pending:
        raise Failure(f"line {first}: a command ends with a backslash")
    return out


def redirect(text, tmp):
    return re.sub(r"(?<![\w./-])/(tmp|opt)/", lambda m: f"{tmp}/{m.group(1)}/", text)


def normalize(line):
    line = re.sub(r"\bin \d+(\.\d+)? s\b", "in N s", line)
    return " ".join(line.split())


class Runner:
    def __init__(self, root, targets, baked, tmp):
        self.root = root          # the source tree
        self.targets = targets
        self.baked = baked
        self.tmp = tmp
        self.runfiles = os.getcwd()
        self.seen = {}  # argv -> output of the commands run so far
        with open(os.path.join(root, CI_SCRIPT)) as f:
            self.ci = f.read()
        self.work = os.path.join(tmp, "work")
        for d in ("tmp", "opt", "work"):
            os.makedirs(os.path.join(tmp, d), exist_ok=True)

    def ci_runs(self, script):
        return re.search(r"(^|\s)" + re.escape(script) + r"(\s|$)", self.ci, re.M) is not None

    def exemption(self, words, marker):
        """Why a command is left out, or None if it is to be run."""
        if marker == "GPU machine":
            return "needs a GPU machine"
        if marker and marker.startswith("CI: "):
            script = marker[4:]
            if not self.ci_runs(script):
                raise Failure(f"'# CI: {script}': {CI_SCRIPT} does not run {script}")
            return f"CI runs {script}"
        if words[:2] in (["./bazelw", "test"], ["./bazelw", "build"]):
            return "CI runs the test suite"
        if words == ["bash", CI_SCRIPT]:
            return "the CI itself"
        if words and words[0] != "./bazelw" and "/" in words[0] and self.ci_runs(words[0]):
            return f"CI runs {words[0]}"
        return None

    def run(self, page, line, text, marker):
        """Runs one command; returns (kind, detail, output, shrunk)."""
        m = re.fullmatch(r"echo '([^']*)' > (/tmp/\S+)", text)
        if m:
            with open(redirect(m.group(2), self.tmp), "w") as f:
                f.write(m.group(1) + "\n")
            return "ok", "wrote " + m.group(2), "", False
        words = shlex.split(text)
        try:
            why = self.exemption(words, marker)
        except Failure as e:
            raise Failure(f"{page}:{line}: {e}")
        if why:
            return "skip", why, "", False
        if len(words) >= 2 and words[0].startswith("PYTHONPATH=") and \
                words[1] == PYTHON:
            return self.run_python(page, line, words)
        if len(words) < 3 or words[:2] != ["./bazelw", "run"] or \
                (len(words) > 3 and words[3] != "--"):
            raise Failure(f"{page}:{line}: the docs test does not know how to run "
                          f"this command: {text}")
        label = words[2]
        if label not in self.targets:
            raise Failure(f"{page}:{line}: {label} is not in the test's data; add it "
                          f"to //tests:docs_commands_test: {text}")
        args = [redirect(a, self.tmp) for a in words[4:]]
        args, shrunk = shrink(label, args)
        argv = [self.targets[label]] + self.baked.get(label, []) + args
        # A command shown twice, reading and writing no files, runs once.
        key = tuple(argv) if not any(self.tmp in a for a in args) else None
        if key in self.seen:
            return "ok", "ran above", self.seen[key], shrunk
        # As from a shell: Bazel's test set-up puts "." first on PATH, which
        # would make //:install's `install -m` call the script itself.
        path = ":".join(p for p in os.environ.get("PATH", "").split(":")
                        if p not in ("", "."))
        env = dict(os.environ, PATH=path, BUILD_WORKING_DIRECTORY=self.work,
                   BUILD_WORKSPACE_DIRECTORY=self.work)
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=self.runfiles, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Failure(f"{page}:{line}: ran past {COMMAND_TIMEOUT_S} s: {text}")
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            tail = "\n".join(out.splitlines()[-15:])
            raise Failure(f"{page}:{line}: exit {p.returncode}: "
                          f"{' '.join(shlex.quote(a) for a in [label] + args)}\n{tail}")
        if marker and marker.startswith("draws "):
            self.compare_drawing(page, line, marker[len("draws "):], words[4:])
        if key is not None:
            self.seen[key] = out
        detail = f"{time.monotonic() - t0:.1f} s" + (" (shrunk: " + " ".join(args) + ")"
                                                      if shrunk else "")
        return "ok", detail, out, shrunk

    def run_python(self, page, line, words):
        """`PYTHONPATH=DIR /usr/bin/python3 ARGS...`, DIR redirected like
        every /tmp and /opt path, a relative script read from the source tree."""
        pythonpath = redirect(words[0][len("PYTHONPATH="):], self.tmp)
        args = [redirect(a, self.tmp) for a in words[2:]]
        # A relative script (python3 script.py, python3 -m baton.launch ...
        # script.py) is read from the source tree.
        args = [os.path.join(self.root, a) if a.endswith(".py") and not os.path.isabs(a)
                and os.path.isfile(os.path.join(self.root, a)) else a for a in args]
        env = dict(os.environ, PYTHONPATH=pythonpath)
        t0 = time.monotonic()
        try:
            p = subprocess.run([PYTHON] + args, cwd=self.work, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Failure(f"{page}:{line}: ran past {COMMAND_TIMEOUT_S} s: {' '.join(words)}")
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            tail = "\n".join(out.splitlines()[-15:])
            raise Failure(f"{page}:{line}: exit {p.returncode}: {' '.join(words)}\n{tail}")
        return "ok", f"{time.monotonic() - t0:.1f} s", out, False

    def compare_drawing(self, page, line, doc_file, args):
        written = [a for a in args if "/tmp/" in a]
        if not written:
            raise Failure(f"{page}:{line}: '# draws {doc_file}' but the command writes "
                          f"no /tmp file")
        path = redirect(written[-1], self.tmp)
        path = path[path.index(self.tmp):]
        with open(path, "rb") as f:
            got = f.read()
        with open(os.path.join(self.root, doc_file), "rb") as f:
            want = f.read()
        if got != want:
            raise Failure(f"{page}:{line}: the command draws something other than "
                          f"{doc_file} today; draw it again with the command shown")


def check_output(page, block, out, tmp):
    have = {normalize(l) for l in out.splitlines()}
    for n, line in enumerate(block.lines, block.start + 1):
        if not line.strip() or line.strip() == "...":
            continue
        if normalize(redirect(line, tmp)) not in have:
            raise Failure(f"{page}:{n}: the shown line is not in what the command "
                          f"prints today:\n  shown: {line.strip()}\n  printed:\n"
                          + "\n".join("    " + l for l in out.splitlines()[:40]))


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def check_links(rel, text, root, notes):
    """Every relative link and image of the page resolves in the source tree
    (and its #anchor names a heading of the page it points into)."""
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        base = os.path.dirname(rel)
        dest = os.path.normpath(os.path.join(base, path)) if path else rel
        full = os.path.join(root, dest)
        if not os.path.exists(full):
            if dest in PENDING_PAGES:
                notes.append(f"{rel}: links {dest}, not here yet ({PENDING_PAGES[dest]})")
                continue
            raise Failure(f"{rel}: the link ({target}) does not resolve: no {dest}")
        if anchor and dest.endswith(".md"):
            with open(full) as f:
                heads = {slug(h) for h in re.findall(r"^#+\s+(.*)$", f.read(), re.M)}
            if anchor not in heads:
                raise Failure(f"{rel}: the link ({target}) names no heading of {dest}")


def main(argv):
    readme, targets, baked, pages = parse_args(argv)
    root = os.path.dirname(os.path.realpath(readme))
    tmp = os.environ.get("TEST_TMPDIR") or "/tmp/docs_commands_test"
    runner = Runner(root, targets, baked, tmp)
    failures, notes = [], []
    counts = {"ok": 0, "skip": 0}
    rels = []
    for page in [readme] + [p for p in pages if p != readme]:
        rel = os.path.relpath(os.path.realpath(page), root)
        rels.append(rel)
        with open(page) as f:
            text = f.read()
        if rel == "README.md" and text.count("\n") > README_MAX_LINES:
            failures.append(f"README.md has {text.count(chr(10))} lines (at most "
                            f"{README_MAX_LINES}): move text into docs/")
            print(f"FAIL {failures[-1]}", flush=True)
        try:
            check_links(rel, text, root, notes)
            found, outside = blocks(text)
            for n, line in outside:
                if line.strip().startswith("./bazelw "):
                    raise Failure(f"{rel}:{n}: a ./bazelw command outside a ```sh block")
            last = None  # (block, output, shrunk) of the last command run
            for b in found:
                if b.lang in SHELL_LANGS:
                    raise Failure(f"{rel}:{b.start}: a ```{b.lang} block: commands go in "
                                  f"```sh blocks (docs/ci.md)")
                if b.lang == "":
                    if any(l.lstrip().startswith("./bazelw ") for l in b.lines):
                        raise Failure(f"{rel}:{b.start}: a ./bazelw command in a plain "
                                      f"block (shown output): put it in a ```sh block")
                    if b.follows_block and last is not None:
                        prev, out, shrunk = last
                        if shrunk:
                            raise Failure(f"{rel}:{b.start}: output shown after a command "
                                          f"the test shrinks cannot be compared")
                        if out is not None:
                            check_output(rel, b, out, tmp)
                    last = None
                    continue
                if b.lang != "sh":
                    last = None
                    continue
                last = None
                for n, cmd, marker in commands(b):
                    try:
                        kind, detail, out, shrunk = runner.run(rel, n, cmd, marker)
                    except Failure as e:
                        failures.append(str(e))
                        print(f"FAIL {failures[-1]}", flush=True)
                        last = None
                        continue
                    counts[kind] += 1
                    print(f"{'ok  ' if kind == 'ok' else 'skip'} {rel}:{n}: "
                          f"{cmd[:100]}{'...' if len(cmd) > 100 else ''}  [{detail}]",
                          flush=True)
                    last = (b, out if kind == "ok" else None, shrunk)
        except Failure as e:
            failures.append(str(e) if str(e).startswith(rel) else f"{rel}: {e}")
            print(f"FAIL {failures[-1]}", flush=True)
    readme_text = open(readme).read()
    for rel in rels:
        if rel.startswith("docs/") and f"({rel})" not in readme_text:
            failures.append(f"README.md does not link {rel} (its table of contents)")
            print(f"FAIL {failures[-1]}")
    for n in notes:
        print(f"note {n}")
    print(f"{counts['ok']} commands run, {counts['skip']} left out, "
          f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
