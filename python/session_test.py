"""baton.Session and baton.torch's refusals and DLPack views, on one rank
(no launcher): every bad input raises ValueError or RuntimeError with a
message naming the problem; views wrap baton's memory without a copy.

  session_test.py --package=DIR --examples=DIR
"""
import argparse
import copy
import gc
import os
import subprocess
import sys
import unittest

ARGS = None


class SessionTest(unittest.TestCase):
    def setUp(self):
        self.s = baton.Session("micro", policy="baton", dtype="f32")

    def test_views_are_baton_memory_without_copy(self):
        names = {}

        def init(name, shape):
            n = 1
            for d in shape:
                n *= d
            names[name] = shape
            return numpy.arange(n, dtype=numpy.float32).reshape(shape) * 1e-3

        self.s.init_parameters(init)
        self.s.begin_step()
        v = self.s.pre_forward("embedding")
        self.assertEqual(v.params[0].name, "embedding.tok_embeddings.weight")
        self.assertEqual(v.params[0].__dlpack_device__(), (1, 0))
        t = torch.from_dlpack(v.params[0])
        a = numpy.from_dlpack(v.params[0])
        self.assertEqual(list(t.shape), names["embedding.tok_embeddings.weight"])
        self.assertEqual(t.data_ptr(), v.params[0].data_ptr)
        self.assertAlmostEqual(float(t[1, 2]), (1 * 32 + 2) * 1e-3, places=6)
        t[0, 0] = 42.0  # the same memory: NumPy sees torch's write
        self.assertEqual(float(a[0, 0]), 42.0)
        self.s.post_forward("embedding")
        # The consumer's tensor keeps the session (its memory) alive.
        s = self.s
        del self.s, s, v
        gc.collect()
        self.assertEqual(float(t[0, 0]), 42.0)

    def test_out_of_order_calls_raise_runtime_error(self):
        with self.assertRaisesRegex(RuntimeError, r"no step open; call BeginStep\(\) first"):
            self.s.pre_forward(0)
        self.s.begin_step()
        with self.assertRaisesRegex(RuntimeError, r"PreForward\(block0\) is out of plan order: "
                                    r"expected PreForward\(embedding\)"):
            self.s.pre_forward("block0")
        self.s.pre_forward(0)
        with self.assertRaisesRegex(RuntimeError, r"expected PostForward\(embedding\)"):
            self.s.pre_backward("lm_head")
        with self.assertRaisesRegex(RuntimeError, r"FinishStep: the plan still expects"):
            self.s.finish_step(None)
        with self.assertRaisesRegex(RuntimeError, r"BeginStep: the step is still open"):
            self.s.begin_step()

    def test_bad_units_and_arguments_raise_value_error(self):
        self.s.begin_step()
        with self.assertRaisesRegex(ValueError, r"unknown unit 'block9' \(units: embedding, "
                                    r"block0, block1, final_norm, lm_head\)"):
            self.s.pre_forward("block9")
        with self.assertRaisesRegex(ValueError, r"unit 7 out of range \[0, 5\)"):
            self.s.pre_forward(7)
        with self.assertRaisesRegex(ValueError, r"a unit is an int or a unit name, got float"):
            self.s.pre_forward(1.5)
        with self.assertRaisesRegex(ValueError, r"optimizer must be a baton.AdamW, a callable "
                                    r"or None"):
            self.s.finish_step("sgd")
        with self.assertRaisesRegex(ValueError, r"bucket 99 out of range"):
            self.s.read_master(99)
        with self.assertRaisesRegex(ValueError, r"needs a callable"):
            self.s.init_parameters(3)

    def test_bad_init_values(self):
        with self.assertRaisesRegex(ValueError, r"embedding.tok_embeddings.weight has 2048 "
                                    r"elements, got 3"):
            self.s.init_parameters(lambda n, s: numpy.zeros(3, dtype=numpy.float32))
        with self.assertRaisesRegex(ValueError, r"needs float32 values, got format 'd'"):
            self.s.init_parameters(lambda n, s: numpy.zeros(s, dtype=numpy.float64))
        with self.assertRaisesRegex(KeyError, "boom"):  # the callable's own error, re-raised
            self.s.init_parameters(lambda n, s: {}["boom"])

    def test_bad_sessions(self):
        with self.assertRaisesRegex(ValueError, r"unknown preset|no preset|Unknown|unknown"):
            baton.Session("micro", policy="no-such-policy")
        with self.assertRaisesRegex(ValueError, r"backend must be 'auto', 'inproc' or 'ucx'"):
            baton.Session("micro", backend="nccl")
        with self.assertRaisesRegex(ValueError, r"backend 'ucx' needs the launch environment"):
            baton.Session("micro", backend="ucx")
        with self.assertRaisesRegex(ValueError, r"model must be a preset name or a dict"):
            baton.Session(3)
        with self.assertRaisesRegex(ValueError, r"the model dict lacks intermediate"):
            baton.Session({"hidden": 32, "layers": 2, "heads": 4, "vocab": 64})
        with self.assertRaisesRegex(ValueError, r"dtype must be 'f32' or 'bf16'"):
            baton.Session("micro", dtype="f64")
        with self.assertRaisesRegex(ValueError, r"inproc: n must be an int, got str"):
            baton.Session.inproc("2", "micro")
        with self.assertRaisesRegex(ValueError, r"baton.Session.inproc: n must be >= 1, got 0"):
            baton.Session.inproc(0, "micro")
        with self.assertRaisesRegex(ValueError, r"baton.Session.inproc: inproc ranks"):
            baton.Session.inproc(100000, "micro")
        with self.assertRaisesRegex(ValueError, r"session must be a baton.Session"):
            lin = torch.nn.Linear(2, 2)
            baton.torch.shard(lin, [lin], config="micro", session=3)
        with self.assertRaisesRegex(ValueError, r"betas must be a pair"):
            baton.AdamW(betas=0.9)

    def test_bad_adamw_is_refused_before_the_step_runs(self):
        s = self.s
        s.begin_step()
        for u in range(5):
            s.pre_forward(u)
            s.post_forward(u)
        for u in reversed(range(5)):
            v = s.pre_backward(u)
            for g in v.grads:
                torch.from_dlpack(g).zero_()
            s.post_backward(u)
        with self.assertRaisesRegex(ValueError, r"baton.AdamW.*lr"):
            s.finish_step(baton.AdamW(lr=-1.0))
        s.finish_step(baton.AdamW())
        s.synchronize()

    def run_to_finish(self, s):
        s.begin_step()
        for u in range(5):
            s.pre_forward(u)
            s.post_forward(u)
        for u in reversed(range(5)):
            v = s.pre_backward(u)
            for g in v.grads:
                torch.from_dlpack(g).fill_(1.0)
            s.post_backward(u)

    def test_python_optimizer_gets_the_shard_views(self):
        self.s.init_parameters(lambda n, shape: numpy.ones(shape, dtype=numpy.float32))
        self.run_to_finish(self.s)
        seen = []

        def sgd(shard):
            seen.append((shard.bucket, shard.step, shard.grad_scale, shard.moment1 is not None))
            torch.from_dlpack(shard.master).sub_(torch.from_dlpack(shard.grad), alpha=0.5)

        self.s.finish_step(sgd)
        self.assertEqual(sorted(b for b, _, _, _ in seen),
                         sorted(b["name"] for b in self.s.layout()["buckets"]))
        self.assertTrue(all(step == 0 and scale == 1.0 and m1 for _, step, scale, m1 in seen))
        # Every parameter: 1 - 0.5 * 1 (the gradients the backward wrote).
        for b, bucket in enumerate(self.s.layout()["buckets"]):
            full = torch.from_dlpack(self.s.full_master(b))
            for p in bucket["params"]:
                n = 1
                for d in p["shape"]:
                    n *= d
                self.assertTrue(bool((full[p["offset"]:p["offset"] + n] == 0.5).all()), p)

    def test_python_optimizer_errors(self):
        self.run_to_finish(self.s)
        with self.assertRaisesRegex(ZeroDivisionError, "division by zero"):
            self.s.finish_step(lambda shard: 1 / 0)
        pol = baton.policy("baton")
        pol["offload"] = "optimizer"
        s = baton.Session("micro", policy=pol, dtype="f32")
        self.run_to_finish(s)
        with self.assertRaisesRegex(ValueError, "a Python optimizer does not run under offload"):
            s.finish_step(lambda shard: None)


class TorchShardTest(unittest.TestCase):
    def model(self):
        torch.manual_seed(0)
        return Llama(vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=8)

    def test_refusals(self):
        m = self.model()
        with self.assertRaisesRegex(ValueError, r"model must be a torch.nn.Module"):
            baton.torch.shard(3, [], config=m.config)
        with self.assertRaisesRegex(ValueError, r"units must be a list of the model's nn.Modules"):
            baton.torch.shard(m, [1, 2], config=m.config)
        with self.assertRaisesRegex(ValueError, r"3 units given; the model's layout has 5"):
            baton.torch.shard(m, m.units()[:3], config=m.config)
        other = self.model()
        with self.assertRaisesRegex(ValueError, r"is not a submodule of the model"):
            baton.torch.shard(m, [other.embed] + m.units()[1:], config=m.config)
        # A unit list that misses a parameter: block1 given twice.
        u = m.units()
        with self.assertRaisesRegex(ValueError, r"parameter blocks.1.attn_norm.weight \[32\] "
                                    r"is in no unit"):
            baton.torch.shard(m, [u[0], u[1], u[1], u[3], u[4]], config=m.config)
        # Parameters whose shapes the config does not have.
        wide = dict(m.config, intermediate=48)
        with self.assertRaisesRegex(ValueError, r"unit 1 \(block0\): no parameter of shape "
                                    r"\[48, 32\] for block0.w_gate"):
            baton.torch.shard(m, m.units(), config=wide)
        with self.assertRaisesRegex(ValueError, r"needs config="):
            lin = torch.nn.Linear(2, 2)
            baton.torch.shard(lin, [lin])
        with self.assertRaisesRegex(ValueError, r"optimizer must be a baton.AdamW or a callable"):
            baton.torch.shard(m, m.units(), config=m.config, optimizer="adam")
        with self.assertRaisesRegex(RuntimeError, r"step\(\) with no step open"):
            baton.torch.shard(m, m.units(), config=m.config).step()

    def test_no_grad_forward_and_early_step(self):
        m = self.model()
        s = baton.torch.shard(m, m.units(), config=m.config)
        tok = torch.randint(0, 64, (2, 8))
        with torch.no_grad():
            with self.assertRaisesRegex(RuntimeError, r"forward under torch.no_grad\(\) is not "
                                        r"supported"):
                s(tok)
        s(tok)  # the refused forward left nothing behind
        with self.assertRaisesRegex(RuntimeError, r"FinishStep: the plan still expects "
                                    r"PreBackward\(lm_head\)"):
            s.step()

    def test_parameters_set_after_shard_and_failed_forwards(self):
        m = self.model()
        s = baton.torch.shard(m, m.units(), config=m.config)
        tok = torch.randint(0, 64, (2, 8))
        m.blocks[0].wq.weight = torch.nn.Parameter(torch.zeros(16, 32))
        with self.assertRaisesRegex(ValueError, r"unit 1 \(block0\) has a parameter wq.weight "
                                    r"\[16, 32\] set after shard\(\)"):
            s(tok)
        with self.assertRaisesRegex(RuntimeError, r"a forward failed \(ValueError: .*the step "
                                    r"cannot go on"):
            s(tok)
        # No saved-tensor hooks were left behind: autograd elsewhere works.
        x = torch.ones(3, requires_grad=True)
        (x * x).sum().backward()
        self.assertEqual(x.grad.tolist(), [2.0, 2.0, 2.0])

    def test_hugging_face_layout(self):
        """llama_units finds HF Llama's units, and a decoder layer declared in
        HF's order (projections first, norms last) matches baton's names."""
        nn = torch.nn

        def linear(i, o):
            return nn.Linear(i, o, bias=False)

        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.q_proj, self.k_proj = linear(32, 32), linear(32, 16)
                self.v_proj, self.o_proj = linear(32, 16), linear(32, 32)

        class Mlp(nn.Module):
            def __init__(self):
                super().__init__()
                self.gate_proj, self.up_proj = linear(32, 64), linear(32, 64)
                self.down_proj = linear(64, 32)

        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.self_attn, self.mlp = Attn(), Mlp()
                self.input_layernorm = RMSNorm(32)
                self.post_attention_layernorm = RMSNorm(32)

        class Inner(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed_tokens = nn.Embedding(64, 32)
                self.layers = nn.ModuleList([Layer(), Layer()])
                self.norm = RMSNorm(32)

        class ForCausalLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.model, self.lm_head = Inner(), linear(32, 64)

        m = ForCausalLM()
        units = baton.torch.llama_units(m)
        self.assertEqual([type(u).__name__ for u in units],
                         ["Embedding", "Layer", "Layer", "RMSNorm", "Linear"])
        layout = baton.Session("micro", dtype="f32").layout()
        params = baton.torch._unique_params(units[1])
        names = {id(p): n for n, p in params}
        got = [names[id(p)] for p in baton.torch._match_unit(
            1, "block0", params, layout["units"][1]["params"])]
        self.assertEqual(got, ["input_layernorm.weight", "self_attn.q_proj.weight",
                               "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                               "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                               "mlp.gate_proj.weight", "mlp.up_proj.weight",
                               "mlp.down_proj.weight"])
        with self.assertRaisesRegex(ValueError, r"not a Hugging Face-style Llama"):
            baton.torch.llama_units(self.model())

    def test_trains_like_pytorch_one_rank(self):
        m = self.model()
        ref = copy.deepcopy(m)
        s = baton.torch.shard(m, m.units(), config=m.config,
                              optimizer=baton.AdamW(lr=1e-3, betas=(0.9, 0.95)))
        self.assertEqual(list(m.parameters()), [])  # baton owns them now
        opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
        g = torch.Generator().manual_seed(3)
        for _ in range(3):
            tok = torch.randint(0, 64, (2, 9), generator=g)
            loss = torch.nn.functional.cross_entropy(s(tok[:, :-1]).reshape(-1, 64),
                                                     tok[:, 1:].reshape(-1))
            loss.backward()
            s.step()
            opt.zero_grad()
            r = torch.nn.functional.cross_entropy(ref(tok[:, :-1]).reshape(-1, 64),
                                                  tok[:, 1:].reshape(-1))
            r.backward()
            opt.step()
            self.assertLess(abs(loss.item() - r.item()), 1e-5 * abs(r.item()))
        # The next forward before step(): refused by the session's plan.
        tok = torch.randint(0, 64, (2, 9), generator=g)
        s(tok[:, :-1])
        with self.assertRaisesRegex(RuntimeError, r"out of plan order: expected "
                                    r"PreBackward\(lm_head\)"):
            s(tok[:, :-1])


class LaunchTest(unittest.TestCase):
    def launch(self, *args):
        env = dict(os.environ, PYTHONPATH=ARGS.package)
        return subprocess.run([sys.executable, "-m", "baton.launch", *args], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)

    def test_ranks_get_the_launch_environment(self):
        r = self.launch("--nproc=2", "-c", "import os; print(os.environ['RANK'], "
                        "os.environ['WORLD_SIZE'], os.environ['BATON_STORE_PORT'] != "
                        "os.environ['MASTER_PORT'], len(os.environ['BATON_STORE_TOKEN']))")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()),
                         ["[rank 0] 0 2 True 32", "[rank 1] 1 2 True 32"])

    def test_a_failing_rank_stops_the_others(self):
        r = self.launch("--nproc=2", "-c", "import os, sys, time\n"
                        "if os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(60)")
        self.assertEqual(r.returncode, 3)
        self.assertIn("baton.launch: rank 1 failed (code 3); stopping the other ranks", r.stderr)

    def test_bad_usage_exits_2(self):
        for args, why in ((["--nproc=0", "x.py"], "--nproc needs an integer in [1, 64]"),
                          (["x.py"], "--nproc=N is required"),
                          (["--nproc=2"], "no script given"),
                          (["--nproc=2", "--timeout=-1", "x.py"], "--timeout needs a positive"),
                          (["--bogus", "x.py"], "unknown flag --bogus")):
            r = self.launch(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(why, r.stderr.splitlines()[0])


def main():
    global ARGS, baton, numpy, torch, Llama, RMSNorm
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True)
    p.add_argument("--examples", required=True)
    ARGS, rest = p.parse_known_args()
    sys.path.insert(0, ARGS.package)
    sys.path.insert(0, ARGS.examples)
    import numpy
    import torch
    import baton
    import baton.torch
    from llama import Llama, RMSNorm
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
