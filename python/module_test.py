"""The Python module against the simulate program: same numbers, same
refusals (one ValueError with the program's stderr line), files both ways.

  module_test.py --simulate=PATH --package=DIR   (DIR holds baton/)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None
ACCEPTANCE = dict(model="llama3-8b", cluster="h100", gpus=64, seq=8192,
                  global_batch=64, policy="baton")
TUNE = dict(model="llama3-8b", gpus=8, seq=4096, global_batch=8)


def flags(knobs):
    return [f"--{k.replace('_', '-')}={v}" for k, v in knobs.items()]


def cli(*args):
    """(exit status, stdout, stderr) of the simulate program."""
    p = subprocess.run([ARGS.simulate, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    rc, out, err = cli(*args, "--json")
    assert rc == 0, err
    return json.loads(out.splitlines()[-1])


class ModuleTest(unittest.TestCase):
    def test_simulate_equals_cli(self):
        got = baton.simulate(**ACCEPTANCE)
        want = cli_json(*flags(ACCEPTANCE))
        self.assertEqual(got, want)
        self.assertGreater(got["policies"][0]["step_time_s"], 0)
        print(f"simulate step_time_s: module {got['policies'][0]['step_time_s']!r}, "
              f"cli {want['policies'][0]['step_time_s']!r}")

    def test_threads(self):
        # The simulator runs with the GIL released: concurrent calls give
        # the same answers as one at a time.
        import concurrent.futures
        configs = [dict(ACCEPTANCE, gpus=g, global_batch=g) for g in (8, 16, 32, 64)] * 2
        want = [baton.simulate(**c) for c in configs]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda c: baton.simulate(**c), configs))
        self.assertEqual(got, want)

    def test_compare_list(self):
        got = baton.simulate(model="llama3-8b", gpus=16, seq=4096, global_batch=16,
                             compare=["baton", "fsdp2"])
        self.assertEqual([p["policy"] for p in got["policies"]], ["baton", "fsdp2"])
        self.assertEqual(got, cli_json("--model=llama3-8b", "--gpus=16", "--seq=4096",
                                       "--global-batch=16", "--compare=baton,fsdp2"))

    def test_tune_equals_cli_and_policy_file_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "best.json")
            got = baton.tune(policy_out=path, **TUNE)
            want = cli_json(*flags(TUNE), "--tune")
            self.assertEqual(got["best"], want["best"])  # all but the wall time
            self.assertEqual(got["simulated"], want["simulated"])
            # The written policy runs as tuned, and reads back as written.
            ran = baton.simulate(policy_file=path, **TUNE)["policies"][0]
            self.assertEqual(ran["step_time_s"], got["best"][0]["step_time_s"])
            pol = baton.read_policy(path)
            self.assertEqual(pol["name"], "tuned")
            again = os.path.join(d, "again.json")
            baton.write_policy(again, pol)
            self.assertEqual(baton.read_policy(again), pol)

    def test_policy(self):
        p = baton.policy("fsdp2")
        self.assertEqual(p["name"], "fsdp2")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.json")
            baton.write_policy(path, "hsdp")
            self.assertEqual(baton.read_policy(path), baton.policy("hsdp"))
            p["micro_steps"] = 0
            with self.assertRaises(ValueError) as e:
                baton.write_policy(path, p)
            self.assertIn("micro_steps", str(e.exception))
        with self.assertRaises(ValueError) as e:
            baton.policy("nosuch")
        self.assertIn("nosuch", str(e.exception))

    def test_model_from_hf_config(self):
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
        m = baton.model_from_hf_config(config)
        preset = baton.model("llama3-8b")
        for k in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab",
                  "parameters"):
            self.assertEqual(m[k], preset[k], k)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(config, f)
            self.assertEqual(baton.model_from_hf_config(path)["parameters"],
                             preset["parameters"])
            # The same file runs the simulator as the preset does.
            got = baton.simulate(hf_config=path, gpus=16, seq=4096, global_batch=16,
                                 policy="baton")["policies"][0]["step_time_s"]
            want = baton.simulate(model="llama3-8b", gpus=16, seq=4096, global_batch=16,
                                  policy="baton")["policies"][0]["step_time_s"]
            self.assertEqual(got, want)
            with self.assertRaises(ValueError):
                baton.model_from_hf_config(os.path.join(d, "missing.json"))
        with self.assertRaises(ValueError):
            baton.model_from_hf_config({"hidden_size": 0})
        with self.assertRaises(ValueError):
            baton.model_from_hf_config(42)

    def test_memory_and_techniques_equal_cli(self):
        # The techniques' knobs and memory=True reach simulate's flags: the
        # memory report's fields are the program's --json ones.
        knobs = dict(model="llama3-8b", gpus=2, seq=2048, global_batch=2, policy="baton",
                     lora_rank=16, lora_targets=["q", "v"], optimizer="adamw8bit",
                     offload="optimizer")
        got = baton.simulate(memory=True, **knobs)
        want = cli_json(*flags(dict(knobs, lora_targets="q,v")), "--memory")
        self.assertEqual(got, want)
        memory = got["policies"][0]["memory"]
        for key in ("weights_bytes", "activations_bytes", "gradients_bytes",
                    "optimizer_bytes", "comm_buffers_bytes", "reserve_bytes",
                    "total_bytes", "host_optimizer_bytes", "parameters",
                    "trainable_parameters"):
            self.assertIn(key, memory)
        self.assertGreater(memory["host_optimizer_bytes"], 0)
        self.assertLess(memory["trainable_parameters"], memory["parameters"])
        parts = sum(memory[k] for k in ("weights_bytes", "activations_bytes",
                                        "gradients_bytes", "optimizer_bytes",
                                        "comm_buffers_bytes", "reserve_bytes"))
        self.assertAlmostEqual(parts, memory["total_bytes"], delta=1)
        # Without the techniques the trainable parameters are all of them.
        plain = baton.simulate(memory=True, model="llama3-8b", gpus=2, seq=2048,
                               global_batch=2, policy="baton")["policies"][0]["memory"]
        self.assertEqual(plain["trainable_parameters"], plain["parameters"])
        with self.assertRaises(ValueError) as e:
            baton.simulate(memory=True, tp=2, **ACCEPTANCE)
        self.assertIn("cover the data-parallel step; drop --tp", str(e.exception))
        with self.assertRaises(ValueError) as e:
            baton.simulate(lora_rank=0, **ACCEPTANCE)
        self.assertEqual(str(e.exception),
                         'simulate: --lora-rank needs a positive integer, got "0"')

    def test_bad_input_raises_the_cli_message(self):
        cases = [
            dict(ACCEPTANCE, model="nosuch"),                 # unknown model
            dict(ACCEPTANCE, gpus=0),                         # out of range
            dict(ACCEPTANCE, gpus="many"),                    # wrong type
            dict(ACCEPTANCE, gpus=1.5),
            dict(ACCEPTANCE, gpus=None),
            dict(ACCEPTANCE, seq=2 ** 40),                    # past scheduler/limits.h
            dict(ACCEPTANCE, policy="nosuch"),
            dict(ACCEPTANCE, bucket_knob=3),                  # unknown knob
            dict(ACCEPTANCE, policy_file="/nonexistent/p.json"),
        ]
        for knobs in cases:
            with self.subTest(knobs=knobs):
                with self.assertRaises(ValueError) as e:
                    baton.simulate(**knobs)
                rc, _, err = cli(*flags(knobs), "--json")
                self.assertEqual(rc, 2)
                self.assertEqual(str(e.exception), err.strip())
                self.assertEqual(len(err.strip().splitlines()), 1)
        with self.assertRaises(ValueError) as e:
            baton.simulate(sp="yes", **ACCEPTANCE)
        self.assertIn("switch", str(e.exception))
        with self.assertRaises(ValueError) as e:
            baton.tune(policy="baton", **TUNE)
        self.assertIn("--tune searches the policy", str(e.exception))


    def test_plan_memory(self):
        plans = {r: baton.plan_memory("tiny", policy="fsdp2", ranks=r) for r in (1, 2, 4)}
        for r, got in plans.items():
            plan = got["plan"]
            self.assertEqual(got["ranks"], r)
            bufs = plan["buffers"]
            self.assertGreater(len(bufs), 0)
            # The lower bound is the most bytes live at one issue position.
            last = max(b["last"] for b in bufs)
            live = [0] * (last + 1)
            for b in bufs:
                for pos in range(b["first"], b["last"] + 1):
                    live[pos] += b["bytes"]
            self.assertEqual(plan["lower_bound_bytes"], max(live))
            self.assertGreaterEqual(plan["arena_bytes"], plan["lower_bound_bytes"])
            self.assertAlmostEqual(plan["ratio"],
                                   plan["arena_bytes"] / plan["lower_bound_bytes"])
            # Placed, aligned, inside the arena; buffers live at once never share bytes.
            for b in bufs:
                self.assertEqual(b["offset"] % b["alignment"], 0, b["name"])
                self.assertLessEqual(b["offset"] + b["bytes"], plan["arena_bytes"], b["name"])
            for i, a in enumerate(bufs):
                for b in bufs[i + 1:]:
                    if a["first"] <= b["last"] and b["first"] <= a["last"]:
                        self.assertTrue(a["offset"] + a["bytes"] <= b["offset"] or
                                        b["offset"] + b["bytes"] <= a["offset"],
                                        (a["name"], b["name"]))
        # Sharded state shrinks with the ranks (padding aside).
        one, two = plans[1]["persistent_bytes"], plans[2]["persistent_bytes"]
        self.assertLess(abs(two * 2 - one) / one, 0.05)
        for bad, needle in ((dict(ranks=0), "ranks must be in"),
                            (dict(ranks="2"), "ranks must be an int"),
                            (dict(policy="nosuch"), "nosuch"),
                            (dict(policy=dict(baton.policy("fsdp2"), pipeline_parallel=2),
                                  ranks=2), "pipeline")):
            with self.assertRaises(ValueError) as e:
                baton.plan_memory("tiny", **dict(dict(policy="fsdp2"), **bad))
            self.assertIn(needle, str(e.exception))
            self.assertTrue(str(e.exception).startswith("baton.plan_memory: "), str(e.exception))


def main():
    global ARGS, baton
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulate", required=True)
    parser.add_argument("--package", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.path.insert(0, ARGS.package)
    import baton as module
    baton = module
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
