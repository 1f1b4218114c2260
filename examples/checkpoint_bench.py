#!/usr/bin/env python3
"""Checkpoint figures on this machine (docs/checkpoints.md, "Figures").

Runs examples/train_tiny twice with the same model and flags, without saves
and with --save-every, then dd with as many bytes as one checkpoint, into
the same directory, and prints:
  - per save: its bytes (all ranks), the host time inside Save (and
    waiting for the previous save before it), when the
    copies to staging were done, when the files were durable, when the
    writer finished (milliseconds from the Save call, rank 0);
  - the write throughput (bytes / (written - copied)) against dd's
    (dd if=/dev/zero bs=4M conv=fsync: fsync at the end, as the writer);
  - the step time without saves, the mean time of the steps a background
    writer overlapped (the step that called Save included), and the
    exposed time: their difference, per step and summed per save, against
    the save's own duration (what a synchronous save would stop training
    for); also against the steps of the same run that no writer overlapped,
    and the writer thread's CPU time (what it can take from a host-runtime
    step, whose compute runs on the same cores).
The last line is the same as JSON.

  ./bazelw run //examples:checkpoint_bench -- --dir=DIR [--steps=20]
      [--save-every=5] [--nranks=1] [-- TRAIN_TINY_FLAGS...]
  examples/checkpoint_bench.py --train-tiny=PATH --dir=DIR ... (the same)

Bad usage: one line on stderr, exit 2; a failed run: exit 1.
"""
import json
import os
import re
import shutil
import subprocess
import sys


def usage(msg):
    sys.stderr.write(f"checkpoint_bench: {msg}\n")
    sys.exit(2)


def parse(argv):
    opts = {"steps": 20, "save_every": 5, "nranks": 1, "train_tiny": None, "dir": None}
    extra = []
    rest = False
    for a in argv:
        if rest:
            extra.append(a)
            continue
        if a == "--":
            rest = True
            continue
        m = re.fullmatch(r"--(train-tiny|dir|steps|save-every|nranks)=(.+)", a)
        if not m:
            usage(f"unknown argument {a!r} (see the docstring)")
        key, val = m.group(1).replace("-", "_"), m.group(2)
        if key in ("steps", "save_every", "nranks"):
            if not val.isdigit() or int(val) < 1:
                usage(f"--{m.group(1)} needs a positive integer, got {val!r}")
            val = int(val)
        opts[key] = val
    if not opts["train_tiny"] or not opts["dir"]:
        usage("--train-tiny=PATH and --dir=DIR are required")
    if opts["save_every"] >= opts["steps"]:
        usage("--save-every must be less than --steps (a save must overlap later steps)")
    return opts, extra


def train(opts, extra, save_dir=None):
    cmd = [opts["train_tiny"], f"--steps={opts['steps']}", f"--nranks={opts['nranks']}",
           "--json"] + extra
    if save_dir:
        cmd += [f"--save-dir={save_dir}", f"--save-every={opts['save_every']}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        sys.stderr.write(f"checkpoint_bench: {' '.join(cmd)} failed\n")
        sys.exit(1)
    return json.loads(r.stdout.strip().splitlines()[-1])


def step_times(j):
    ends = j["step_end_ms"]
    return [(ends[i - 1], ends[i]) for i in range(1, len(ends))]  # step 1 (warm-up) dropped


def dd_rate(directory, nbytes):
    path = os.path.join(directory, "dd.bin")
    count = max(1, (nbytes + (4 << 20) - 1) >> 22)
    r = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={count}",
                        "conv=fsync"], capture_output=True, text=True)
    os.remove(path)
    m = re.search(r"(\d+) bytes.*copied, ([0-9.]+) s", r.stderr)
    if r.returncode != 0 or not m:
        sys.stderr.write(r.stderr)
        sys.stderr.write("checkpoint_bench: dd failed\n")
        sys.exit(1)
    return int(m.group(1)) / float(m.group(2)), int(m.group(1))


def main():
    opts, extra = parse(sys.argv[1:])
    os.makedirs(opts["dir"], exist_ok=True)
    save_root = os.path.join(opts["dir"], "checkpoints")
    shutil.rmtree(save_root, ignore_errors=True)
    base = train(opts, extra)
    saved = train(opts, extra, save_root)
    base_steps = [e - s for s, e in step_times(base)]
    baseline = sum(base_steps) / len(base_steps)
    spread = (sum((t - baseline) ** 2 for t in base_steps) / len(base_steps)) ** 0.5
    saves = []
    overlapped = []
    busy = [(sv["at_ms"], sv["at_ms"] + sv["wait_ms"] + sv["done_ms"]) for sv in saved["saves"]]
    # The steps of the run with saves that no writer overlapped: a second
    # baseline, measured in the same run (the machine's load drifts).
    free = [e - s for s, e in step_times(saved) if all(s >= hi or e <= lo for lo, hi in busy)]
    same_run = sum(free) / len(free) if free else None  # every step overlapped a save
    for sv, (lo, hi) in zip(saved["saves"], busy):
        d = sv["dir"]
        total = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".bin"))
        steps = [e - s for s, e in step_times(saved) if s < hi and e > lo]
        overlapped += steps
        write_s = (sv["written_ms"] - sv["copied_ms"]) / 1e3
        saves.append({"step": sv["step"], "bytes": total, "wait_ms": sv["wait_ms"],
                      "issue_ms": sv["issue_ms"],
                      "copied_ms": sv["copied_ms"], "written_ms": sv["written_ms"],
                      "done_ms": sv["done_ms"], "writer_cpu_ms": sv["writer_cpu_ms"],
                      "write_mb_s": total / write_s / 1e6,
                      "steps_overlapped": len(steps),
                      "exposed_ms": sum(t - baseline for t in steps)})
    dd_bps, dd_bytes = dd_rate(opts["dir"], max(s["bytes"] for s in saves))
    mean_overlapped = sum(overlapped) / len(overlapped) if overlapped else baseline
    print(f"model: {saved['model']}, {saved['parameters']} parameters, policy {saved['policy']}, "
          f"{saved['nranks']} rank(s), {opts['steps']} steps, a save every {opts['save_every']}")
    for s in saves:
        print(f"save of step {s['step']}: {s['bytes'] / 2**20:.1f} MiB; host {s['issue_ms']:.2f} ms "
              f"in Save (+{s['wait_ms']:.1f} ms for the previous save); copied {s['copied_ms']:.1f} ms, written {s['written_ms']:.1f} ms, done "
              f"{s['done_ms']:.1f} ms after the call (writer CPU {s['writer_cpu_ms']:.0f} ms); "
              f"write {s['write_mb_s']:.0f} MB/s; "
              f"{s['steps_overlapped']} steps overlapped, exposed {s['exposed_ms']:+.1f} ms")
    print(f"dd (bs=4M conv=fsync, {dd_bytes / 2**20:.0f} MiB): {dd_bps / 1e6:.0f} MB/s")
    print(f"step time: {baseline:.1f} ms without saves ({len(base_steps)} steps, standard "
          f"deviation {spread:.1f} ms), "
          + (f"{same_run:.1f} ms in the run with saves when no writer ran ({len(free)} steps), "
             if free else "no step of the run with saves ran without a writer, ")
          + f"{mean_overlapped:.1f} ms while a writer ran ({len(overlapped)} steps): exposed "
          f"{mean_overlapped - baseline:+.1f} ms per step against the run without saves"
          + (f", {mean_overlapped - same_run:+.1f} ms against the same run" if free else ""))
    print(json.dumps({"model": saved["model"], "parameters": saved["parameters"],
                      "nranks": saved["nranks"], "baseline_step_ms": baseline,
                      "baseline_step_ms_stdev": spread,
                      "overlapped_step_ms": mean_overlapped,
                      "same_run_free_step_ms": same_run,
                      "exposed_ms_per_step": mean_overlapped - baseline,
                      "final_save_wait_ms": saved["final_save_wait_ms"],
                      "dd_mb_s": dd_bps / 1e6, "saves": saves}))


if __name__ == "__main__":
    main()
