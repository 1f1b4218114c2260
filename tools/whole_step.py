#!/usr/bin/env python3
"""Whole training steps measured on one GPU against `simulate --gpus=1`.

  tools/whole_step.py --simulate=PATH --torch-step=tools/torch_step.py
      [--kernel-table=KERNELS.json] [--shapes=tiny8,llama-1b] [--json=OUT]
  tools/whole_step.py --simulate=PATH --measured=FILE ...

Each shape (SHAPES below: Llama shapes of 0.2B to 3.6B parameters that fit
on one 80 GB GPU without sharding) is measured by tools/torch_step.py
(PyTorch eager, bf16 autocast, fused AdamW; needs a GPU and PyTorch) or read
from FILE (JSON lines as torch_step.py prints them, matched by "name"), and
simulated as the same model on one GPU (`--hf-config`, `--policy=ddp
--recompute-layers=0`, one micro-batch of the whole batch): with the
shipped table on the h100 preset, and with KERNELS.json (//bench:kernels
on the same GPU) when given. Prints a table (measured ms, simulated ms,
error = simulated / measured - 1: negative where the simulator predicts a
faster step than measured, i.e. is optimistic), the mean |error| per table,
and with --json writes the rows. Bad input: one line on stderr, exit 2. A
shape whose torch_step or simulate fails is named on a `FAILED:` line, the
others still run, and the exit status is 1.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "batch")
SHAPES = {name: dict(zip(KEYS, values)) for name, values in {
    # //examples:train_tiny's largest GPU case (../shared/peers/torch_llama.py)
    "tiny8": (8, 1024, 16, 4, 2816, 32000, 1024, 8),
    # Llama 3.2 1B's block shape (untied head)
    "llama-1b": (16, 2048, 32, 8, 8192, 128256, 2048, 4),
    # Llama 3.2 3B's block shape (untied head)
    "llama-3b": (28, 3072, 24, 8, 8192, 128256, 2048, 1),
}.items()}


def fail(msg, code=2):
    print(f"whole_step: {msg}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        fail(message)


class StepFailed(Exception):
    pass


def positive(v):
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def read_measured(path, names):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"--measured: cannot read {path}: {e.strerror}")
    except UnicodeDecodeError:
        fail(f"--measured {path}: not UTF-8 text")
    got = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            fail(f"--measured {path} line {i}: not JSON")
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            fail(f"--measured {path} line {i}: an object with a string \"name\" expected")
        ms = row.get("step_ms")
        if not positive(ms) or ms < 1e-3:
            fail(f"--measured {path} line {i}: \"step_ms\" must be a number of at least "
                 f"0.001, got {json.dumps(ms)}")
        for key in ("params", "tokens"):
            v = row.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                fail(f"--measured {path} line {i}: \"{key}\" must be a positive integer, "
                     f"got {json.dumps(v)}")
        shape = SHAPES.get(row["name"])
        if shape and row.get("tokens") is not None and \
                row["tokens"] != shape["seq"] * shape["batch"]:
            fail(f"--measured {path} line {i}: {row['name']} was measured with "
                 f"{row['tokens']} tokens per step, the shape has "
                 f"{shape['seq'] * shape['batch']}")
        got[row["name"]] = row
    missing = [n for n in names if n not in got]
    if missing:
        fail(f"--measured {path}: no row for {', '.join(missing)}")
    return got


def measure(torch_step, name, shape):
    cmd = [sys.executable, torch_step, f"--name={name}"]
    cmd += [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise StepFailed(f"torch_step exit {r.returncode}: {r.stderr.strip()[-400:]}")
    try:
        m = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise StepFailed(f"torch_step printed no JSON line: {r.stdout.strip()[-200:]}")
    if not isinstance(m, dict) or not positive(m.get("step_ms")):
        raise StepFailed(f"torch_step printed no positive step_ms: {json.dumps(m)[:200]}")
    return m


def write_config(path, shape):  # the shape as a Hugging Face Llama config
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": shape["hidden"],
                   "intermediate_size": shape["ffn"], "num_hidden_layers": shape["layers"],
                   "num_attention_heads": shape["heads"],
                   "num_key_value_heads": shape["kv_heads"], "vocab_size": shape["vocab"],
                   "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
                   "rope_theta": 500000.0}, f)


def simulate(binary, cfg, shape, kernel_table):
    cmd = [binary, f"--hf-config={cfg}", "--cluster=h100", "--gpus=1", f"--seq={shape['seq']}",
           f"--global-batch={shape['batch']}", f"--micro-batch={shape['batch']}",
           "--policy=ddp", "--recompute-layers=0", "--json"]
    if kernel_table:
        cmd.append(f"--kernel-table={kernel_table}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise StepFailed(f"simulate exit {r.returncode}: {r.stderr.strip()[-400:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["policies"][0]["step_time_s"] * 1e3


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--simulate", required=True, help="the simulate binary")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--torch-step", help="tools/torch_step.py: measure here")
    src.add_argument("--measured", help="JSON lines as torch_step.py prints them")
    p.add_argument("--kernel-table", help="this GPU's table (//bench:kernels)")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    names = [n for n in a.shapes.split(",") if n]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        fail(f"--shapes: unknown {', '.join(unknown) or '(none given)'}; "
             f"known: {', '.join(SHAPES)}")
    for flag, path in (("--simulate", a.simulate), ("--torch-step", a.torch_step),
                       ("--kernel-table", a.kernel_table)):
        if path and not os.path.isfile(path):
            fail(f"{flag}: no file {path}")
    a.simulate = os.path.abspath(a.simulate)
    if not os.access(a.simulate, os.X_OK):
        fail(f"--simulate: {a.simulate} is not executable")
    if a.json:
        try:
            open(a.json, "a", encoding="utf-8").close()
        except OSError as e:
            fail(f"--json: cannot write {a.json}: {e.strerror}")
    measured = read_measured(a.measured, names) if a.measured else {}
    tables = [("shipped", None)] + ([("measured", a.kernel_table)] if a.kernel_table else [])

    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                m = measured.get(name) or measure(a.torch_step, name, SHAPES[name])
                row = {"name": name, "params": m.get("params"), "tokens": m.get("tokens"),
                       "measured_ms": m["step_ms"], "gpu": m.get("gpu"),
                       "torch": m.get("torch")}
                cfg = os.path.join(tmp, f"{name}.json")
                write_config(cfg, SHAPES[name])
                for label, table in tables:
                    sim = simulate(a.simulate, cfg, SHAPES[name], table)
                    row[f"simulated_ms_{label}"] = sim
                    row[f"error_{label}"] = sim / m["step_ms"] - 1
                rows.append(row)
            except StepFailed as e:
                failures.append(f"{name}: {e}")

    head = f"{'shape':<10} {'params':>7} {'tokens':>7} {'measured_ms':>11}"
    for label, _ in tables:
        head += f" {'sim_' + label:>13} {'error':>7}"
    print(head)
    for r in rows:
        params = f"{r['params'] / 1e9:.2f}B" if isinstance(r["params"], int) else "?"
        line = f"{r['name']:<10} {params:>7} {r['tokens'] or '?':>7} {r['measured_ms']:>11.1f}"
        for label, _ in tables:
            line += f" {r['simulated_ms_' + label]:>13.1f} {100 * r['error_' + label]:>+6.1f}%"
        print(line)
    for label, _ in tables:
        if rows:
            mean = sum(abs(r["error_" + label]) for r in rows) / len(rows)
            print(f"{label} table: {len(rows)} shapes, mean |error| {100 * mean:.1f}%")
    if rows and rows[0].get("gpu"):
        print(f"# measured on {rows[0]['gpu']}, torch {rows[0]['torch']}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    for f in failures:
        print(f"FAILED: {f}")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
