"""baton.Session on pipeline stages: two inproc ranks, one stage each,
driven from two Python threads in their stage's hook order (order()).
Each unit's forward is x -> 0.5 x + (unit + 1) on the activation and its
backward g -> 0.5 g (the head seeds g with its input, the derivative of
x^2 / 2), computed in NumPy on the pipeline tensors; what a stage receives
must equal what the previous (next) stage wrote, and the last stage's
activation and the first stage's gradient the closed forms. Schedules
1f1b, interleaved and zb-h1 (deferred weight hooks); two launched ucx
ranks (processes) under zb-h1; refusals.

  pipeline_test.py --package=DIR --examples=DIR
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import unittest

ARGS = None
# Four blocks: interleaved needs the blocks a multiple of stages x chunks.
MODEL = {"name": "tiny4", "hidden": 32, "intermediate": 64, "layers": 4, "heads": 4,
         "kv_heads": 2, "vocab": 64}
SEQ, MICRO_BATCH = 4, 2
UNITS = 7  # embedding, block0..3, final_norm, lm_head


def pipeline_policy(schedule, micro_steps, chunks=1, **extra):
    p = baton.policy("fsdp2")
    p.update(pipeline_parallel=2, micro_steps=micro_steps, pipeline_schedule=schedule,
             virtual_stages=chunks, **extra)
    return p


def base(micro):
    """The first unit's input of a micro-batch."""
    n = MICRO_BATCH * SEQ * MODEL["hidden"]
    a = numpy.arange(n, dtype=numpy.float32) % 7 + micro
    return a.reshape(MICRO_BATCH, SEQ, MODEL["hidden"])


def forward(x, unit):
    return numpy.float32(0.5) * x + numpy.float32(unit + 1)


def write(view, values):
    """Writes NumPy values into a baton.Tensor (NumPy's DLPack views are
    read-only: through torch)."""
    torch.from_dlpack(view).copy_(torch.from_numpy(numpy.ascontiguousarray(values)))


def read(view):
    return numpy.from_dlpack(view).copy()


class Stage:
    """One rank's trainer: runs one step in the session's hook order and
    logs what crosses the stage boundary, keyed by (virtual stage, micro)."""

    def __init__(self, session):
        self.s = session
        self.p = session.pipeline
        self.sent_act, self.recv_act, self.sent_grad, self.recv_grad = {}, {}, {}, {}
        self.final = {}       # micro -> the head's input (last stage)
        self.weight_hooks = 0
        self.optimizer_buckets = []
        self.error = None

    def run(self):
        try:
            self.step()
        except BaseException as e:  # re-raised by the test's thread
            self.error = e

    def step(self):
        s, p = self.s, self.p
        zb = p["schedule"] == "zb-h1"
        chunk_of = {u: c for c, units in enumerate(p["chunks"]) for u in units}
        x, g = {}, {}
        s.init_parameters(lambda name, shape: numpy.ones(shape, dtype=numpy.float32))
        s.begin_step()
        for kind, unit, micro in s.order():
            c = chunk_of[unit]
            vs = c * p["stages"] + p["stage"]  # virtual stage
            first, last = p["chunks"][c][0], p["chunks"][c][-1]
            key = (c, micro)
            if kind == "forward":
                v = s.pre_forward(unit)
                assert v.micro_step == micro, (v.micro_step, micro)
                assert v.pipeline_output_grad is None and v.pipeline_input_grad is None
                if unit == first:
                    if vs == 0:
                        assert v.pipeline_input is None
                        x[key] = base(micro)
                    else:
                        x[key] = self.recv_act[(vs, micro)] = read(v.pipeline_input)
                else:
                    assert v.pipeline_input is None
                x[key] = forward(x[key], unit)
                if unit == UNITS - 1:
                    self.final[micro] = x[key].copy()
                if v.pipeline_output is not None:
                    assert unit == last
                    self.assert_activation(v.pipeline_output)
                    write(v.pipeline_output, x[key])
                    self.sent_act[(vs, micro)] = x[key].copy()
                else:
                    assert unit != last or unit == UNITS - 1
                s.post_forward(unit)
            elif kind == "backward":
                v = s.pre_backward(unit)
                assert v.micro_step == micro and v.weight_deferred == zb
                assert (len(v.grads) == 0) == zb, (len(v.grads), zb)
                if unit == UNITS - 1:
                    g[key] = self.final[micro].copy()  # d(x^2 / 2) / dx
                elif unit == last:
                    g[key] = self.recv_grad[(vs, micro)] = read(v.pipeline_output_grad)
                if unit == first and vs > 0:
                    # The backward of a chunk's first unit reads its input again.
                    numpy.testing.assert_array_equal(read(v.pipeline_input),
                                                     self.recv_act[(vs, micro)])
                g[key] = numpy.float32(0.5) * g[key]
                if v.pipeline_input_grad is not None:
                    assert unit == first
                    write(v.pipeline_input_grad, g[key])
                    self.sent_grad[(vs, micro)] = g[key].copy()
                self.fill_grads(v)
                s.post_backward(unit)
            else:
                assert kind == "weight" and zb
                v = s.pre_backward_weight(unit)
                assert v.micro_step == micro and not v.weight_deferred and v.grads
                assert (v.pipeline_input, v.pipeline_output, v.pipeline_output_grad,
                        v.pipeline_input_grad) == (None, None, None, None)
                self.fill_grads(v)
                self.weight_hooks += 1
                s.post_backward_weight(unit)
        s.finish_step(self.optimizer)
        s.synchronize()

    def assert_activation(self, t):
        shape = list(torch.from_dlpack(t).shape)
        assert shape == [MICRO_BATCH, SEQ, MODEL["hidden"]] == self.p["activation_shape"], shape

    @staticmethod
    def fill_grads(v):
        """Every weight gradient 1 per micro-batch (= or += as baton says)."""
        for grad, acc in zip(v.grads, v.grad_accumulate):
            t = torch.from_dlpack(grad)
            if acc:
                t.add_(1.0)
            else:
                t.fill_(1.0)

    def optimizer(self, shard):
        # The mean over micro-batches of gradients of 1: 1 everywhere.
        mean = torch.from_dlpack(shard.grad) * shard.grad_scale
        assert bool((mean == 1.0).all()), (shard.bucket, float(mean.min()), float(mean.max()))
        self.optimizer_buckets.append(shard.bucket)


# One launched rank (a process, ucx) running its stage: the first unit
# after a boundary prints what it received (the mean of an activation
# filled with m + 1.5, of a gradient filled with -m - 0.25).
UCX_RANK = """
import json, sys, numpy, torch, baton
s = baton.Session(json.loads(sys.argv[1]), json.loads(sys.argv[2]), dtype="f32", seq=4,
                  timeout_s=60)
got = []
s.begin_step()
for kind, u, m in s.order():
    pre, post = {"forward": (s.pre_forward, s.post_forward),
                 "backward": (s.pre_backward, s.post_backward),
                 "weight": (s.pre_backward_weight, s.post_backward_weight)}[kind]
    v = pre(u)
    if v.pipeline_output is not None:
        torch.from_dlpack(v.pipeline_output).fill_(m + 1.5)
    if v.pipeline_input_grad is not None:
        torch.from_dlpack(v.pipeline_input_grad).fill_(-m - 0.25)
    for t in (v.pipeline_output_grad, v.pipeline_input if kind == "forward" else None):
        if t is not None:
            got.append(float(numpy.from_dlpack(t).mean()))
    for g in v.grads:
        torch.from_dlpack(g).fill_(1.0)
    post(u)
s.finish_step(baton.AdamW())
print(s.backend, s.pipeline["schedule"], got)
"""


class PipelineTest(unittest.TestCase):
    def launch(self, code, *args):
        env = dict(os.environ, PYTHONPATH=ARGS.package)
        r = subprocess.run([sys.executable, "-m", "baton.launch", "--nproc=2", "-c", code,
                            *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_launched_ranks_over_ucx(self):
        out = self.launch(UCX_RANK, json.dumps(MODEL), json.dumps(pipeline_policy("zb-h1", 3)))
        self.assertEqual(sorted(out.splitlines()),
                         ["[rank 0] ucx zb-h1 [-0.25, -1.25, -2.25]",
                          "[rank 1] ucx zb-h1 [1.5, 2.5, 3.5]"])

    def run_stages(self, policy):
        sessions = baton.Session.inproc(2, MODEL, policy, dtype="f32", timeout_s=30.0,
                                        seq=SEQ, micro_batch=MICRO_BATCH)
        stages = [Stage(s) for s in sessions]
        threads = [threading.Thread(target=st.run) for st in stages]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r, st in enumerate(stages):
            if st.error is not None:
                raise AssertionError(f"stage {r}: {st.error!r}") from st.error
        return stages

    def check(self, schedule, micro_steps, chunks=1):
        stages = self.run_stages(pipeline_policy(schedule, micro_steps, chunks))
        p0, p1 = stages[0].p, stages[1].p
        self.assertEqual((p0["stage"], p1["stage"], p0["stages"]), (0, 1, 2))
        self.assertEqual(p0["schedule"], schedule)
        self.assertEqual(p0["activation_dtype"], "f32")
        self.assertEqual(len(p0["chunks"]), chunks)
        # Every unit on one stage, in order across the virtual stages.
        virtual = [stages[vs % 2].p["chunks"][vs // 2] for vs in range(2 * chunks)]
        self.assertEqual(sum(virtual, []), list(range(UNITS)))
        # Each pass of the schedule shows up in the hook order.
        for st in stages:
            passes = st.p["passes"]
            self.assertEqual(sum(k == "forward" for k, _, _ in passes), micro_steps * chunks)
            self.assertEqual(sum(k == "weight" for k, _, _ in passes),
                             micro_steps * chunks if schedule == "zb-h1" else 0)
        last = 2 * chunks - 1
        for m in range(micro_steps):
            for vs in range(1, last + 1):  # what vs received is what vs - 1 wrote
                numpy.testing.assert_array_equal(stages[vs % 2].recv_act[(vs, m)],
                                                 stages[(vs - 1) % 2].sent_act[(vs - 1, m)])
            for vs in range(last):  # the gradient vs received is what vs + 1 wrote
                numpy.testing.assert_array_equal(stages[vs % 2].recv_grad[(vs, m)],
                                                 stages[(vs + 1) % 2].sent_grad[(vs + 1, m)])
            # Closed forms: the chain over all units, and its gradient at
            # the first virtual stage's output.
            x = base(m)
            for u in range(UNITS):
                x = forward(x, u)
            numpy.testing.assert_array_equal(stages[last % 2].final[m], x)
            after = UNITS - 1 - virtual[0][-1]
            numpy.testing.assert_array_equal(stages[0].recv_grad[(0, m)],
                                             x * numpy.float32(0.5 ** after))
        for st in stages:
            # Every crossing logged: each micro-batch of each virtual stage.
            vss = [c * 2 + st.p["stage"] for c in range(chunks)]
            into = micro_steps * sum(vs > 0 for vs in vss)
            out = micro_steps * sum(vs < last for vs in vss)
            self.assertEqual((len(st.recv_act), len(st.sent_grad)), (into, into))
            self.assertEqual((len(st.sent_act), len(st.recv_grad)), (out, out))
            units = sum(st.p["chunks"], [])
            self.assertEqual(st.weight_hooks,
                             micro_steps * len(units) if schedule == "zb-h1" else 0)
            # The optimizer ran on each of the stage's buckets (one per unit).
            layout = st.s.layout()
            mine = sorted(b["name"] for b in layout["buckets"]
                          if {q["unit"] for q in b["params"]} <= set(units))
            self.assertEqual(sorted(st.optimizer_buckets), mine)
            self.assertEqual(len(mine), len(units))

    def test_1f1b(self):
        self.check("1f1b", 3)

    def test_zb_h1_defers_the_weight_gradients(self):
        self.check("zb-h1", 4)

    def test_interleaved_two_chunks_per_stage(self):
        self.check("interleaved", 2, chunks=2)

    def test_data_parallel_sessions_are_unchanged(self):
        s = baton.Session("micro", dtype="f32")
        self.assertIsNone(s.pipeline)
        self.assertEqual(s.order(), [("forward", u, 0) for u in range(5)] +
                         [("backward", u, 0) for u in reversed(range(5))])
        s.begin_step()
        v = s.pre_forward(0)
        self.assertEqual((v.pipeline_input, v.pipeline_output, v.pipeline_output_grad,
                          v.pipeline_input_grad, v.weight_deferred),
                         (None, None, None, None, False))
        s.post_forward(0)
        with self.assertRaisesRegex(RuntimeError, r"PreBackwardWeight\(block0\) is out of plan "
                                    r"order: expected PreForward\(block0\)"):
            s.pre_backward_weight("block0")

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, r"^baton.Session: tensor parallelism "
                                    r"\(tensor_parallel = 2\) is not run from Python yet"):
            baton.Session.inproc(2, MODEL, dict(baton.policy("fsdp2"), tensor_parallel=2),
                                 seq=SEQ)
        with self.assertRaisesRegex(ValueError, r"context parallelism \(context_parallel = 2\) "
                                    r"is not run from Python yet"):
            baton.Session.inproc(2, MODEL, dict(baton.policy("fsdp2"), context_parallel=2),
                                 seq=SEQ)
        with self.assertRaisesRegex(ValueError, r"a pipeline policy \(pipeline_parallel = 2\) "
                                    r"needs seq="):
            baton.Session.inproc(2, MODEL, pipeline_policy("1f1b", 2))
        with self.assertRaisesRegex(ValueError, r"this policy has no pipeline"):
            baton.Session("micro", seq=SEQ)
        for bad in (0, "4", True, 2.0):
            with self.assertRaisesRegex(ValueError, r"seq must be an int >= 1, got "):
                baton.Session.inproc(2, MODEL, pipeline_policy("1f1b", 2), seq=bad)
        with self.assertRaisesRegex(ValueError, r"micro_batch must be an int >= 1, got -1"):
            baton.Session.inproc(2, MODEL, pipeline_policy("1f1b", 2), seq=SEQ, micro_batch=-1)
        # What BuildParallelStep refuses: 3 micro-batches over 2 stages.
        with self.assertRaisesRegex(ValueError, r"interleaved"):
            baton.Session.inproc(2, MODEL, pipeline_policy("interleaved", 3, chunks=2), seq=SEQ)
        # Two stages on one rank.
        with self.assertRaisesRegex(ValueError, r"the mesh does not fill the 1 GPUs: tp 1 x cp "
                                    r"1 x pp 2 = 2 does not divide them"):
            baton.Session(MODEL, pipeline_policy("1f1b", 2), seq=SEQ)
        # Launched ranks on a GPU: nccl, which stages do not run on yet
        # (refused before a device or communicator is made).
        code = ("import baton, json, sys\n"
                "try: baton.Session(json.loads(sys.argv[1]), json.loads(sys.argv[2]), seq=4, "
                "device='cuda')\n"
                "except ValueError as e: print(e)")
        out = self.launch(code, json.dumps(MODEL), json.dumps(pipeline_policy("1f1b", 2)))
        self.assertIn("[rank 0] baton.Session: pipeline stages run on backends inproc and ucx "
                      "(nccl not yet)", out)
        sessions = baton.Session.inproc(2, MODEL, pipeline_policy("1f1b", 2), seq=SEQ)
        with self.assertRaisesRegex(ValueError, r"full_master gathers a bucket from every "
                                    r"rank; on a pipeline stage"):
            sessions[0].full_master(0)
        with self.assertRaisesRegex(ValueError, r"baton.torch.shard runs data-parallel "
                                    r"sessions"):
            lin = torch.nn.Linear(2, 2)
            baton.torch.shard(lin, [lin], config=MODEL, session=sessions[0])
        with self.assertRaisesRegex(ValueError, r"baton.torch.shard runs data-parallel "
                                    r"sessions"):
            lin = torch.nn.Linear(2, 2)
            baton.torch.shard(lin, [lin], config=MODEL, policy=pipeline_policy("1f1b", 2))


def main():
    global ARGS, baton, numpy, torch
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True)
    p.add_argument("--examples", required=True)
    ARGS, rest = p.parse_known_args()
    sys.path.insert(0, ARGS.package)
    import numpy
    import torch
    import baton
    import baton.torch
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
