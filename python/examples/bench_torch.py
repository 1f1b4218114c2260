"""Figures of baton from Python (docs/python.md), on this CPU.

  bench_torch.py hooks [--reps=N]
      The session hooks alone (Python -> C++ -> Python, no compute): one
      rank, the micro model, fp32; microseconds per hook call (pre and post
      alike: begin_step, pre/post_forward and pre/post_backward of every
      unit, finish_step without optimizer); then what baton.torch adds per
      unit and step (its forward and backward hooks, gradient copies, and
      baton's AdamW instead of PyTorch's) on a step of one token.
  bench_torch.py step [--steps=N]     (one process per rank: under a launcher)
      The step time of baton.torch (its hooks, gathers, reduces and AdamW)
      against the same per-rank work done by plain PyTorch without sharding
      (this rank's batch, forward, backward, torch.optim.AdamW), on a Llama
      of hidden 128, 2 blocks, seq 64, 2 sequences per rank; one PyTorch
      thread per rank; the two alternate step by step (medians, averaged
      over ranks). Rank 0 prints milliseconds per step and the ratio.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import baton
import baton.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import Llama  # noqa: E402


def hooks(reps):
    s = baton.Session("micro", policy="baton", dtype="f32")
    s.init_parameters(lambda name, shape: torch.zeros(shape).numpy())
    units = len(s.layout()["units"])

    def step():
        s.begin_step()
        for u in range(units):
            s.pre_forward(u)
            s.post_forward(u)
        for u in reversed(range(units)):
            s.pre_backward(u)
            s.post_backward(u)
        s.finish_step(None)

    for _ in range(5):
        step()
    s.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    s.synchronize()
    calls = reps * (4 * units + 2)
    us = (time.perf_counter() - t0) / calls * 1e6
    print(f"session hooks: {us:.1f} us per call ({calls} calls, {units} units, 1 rank)")
    # baton.torch's hooks per unit (forward and backward, autograd boundary,
    # saved-tensor hooks, gradient copies): a step of the micro model on one
    # token under baton.torch against the same step in plain PyTorch.
    torch.manual_seed(0)
    model = Llama(vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=1)
    plain = Llama(vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=1)
    sharded = baton.torch.shard(model, model.units(), config="micro",
                                optimizer=baton.AdamW(lr=1e-3))
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-3)
    x = torch.zeros(1, 1, dtype=torch.long)

    def baton_step():
        sharded(x).sum().backward()
        sharded.step()

    def plain_step():
        opt.zero_grad()
        plain(x).sum().backward()
        opt.step()

    per = {}
    for fn in (baton_step, plain_step, baton_step, plain_step):  # warm, then timed
        t0 = time.perf_counter()
        for _ in range(reps // 4):
            fn()
        sharded.session.synchronize()
        per[fn] = (time.perf_counter() - t0) / (reps // 4) * 1e6
    over = (per[baton_step] - per[plain_step]) / units
    print(f"baton.torch: {over:.0f} us per unit per step over plain PyTorch (forward and "
          f"backward hooks; {per[baton_step]:.0f} vs {per[plain_step]:.0f} us a step of "
          f"{units} units)")


def step_times(steps):
    torch.set_num_threads(1)
    vocab, seq, batch = 512, 64, 2
    torch.manual_seed(0)
    model = Llama(vocab=vocab, hidden=128, layers=2, heads=8, kv_heads=2, ffn=344, seq=seq)
    plain = Llama(vocab=vocab, hidden=128, layers=2, heads=8, kv_heads=2, ffn=344, seq=seq)
    sharded = baton.torch.shard(model, model.units(), config=model.config, policy="baton",
                                optimizer=baton.AdamW(lr=1e-3))
    session = sharded.session
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(1 + session.rank)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def baton_step():
        F.cross_entropy(sharded(x).reshape(-1, vocab), y.reshape(-1)).backward()
        sharded.step()

    def plain_step():
        opt.zero_grad()
        F.cross_entropy(plain(x).reshape(-1, vocab), y.reshape(-1)).backward()
        opt.step()

    # Alternate the two, step by step, and take each one's median: both
    # see the same machine (load from elsewhere lands on both alike).
    for _ in range(2):
        baton_step()
        plain_step()
    times = {baton_step: [], plain_step: []}
    for _ in range(steps):
        for fn in (baton_step, plain_step):
            session.all_reduce([0.0])  # the ranks start together
            t0 = time.perf_counter()
            fn()
            session.synchronize()
            times[fn].append(time.perf_counter() - t0)
    med = {fn: sorted(t)[len(t) // 2] * 1e3 for fn, t in times.items()}
    b, p = (session.all_reduce([med[fn]])[0] / session.world_size
            for fn in (baton_step, plain_step))
    if session.rank == 0:
        print(f"{session.world_size} ranks ({session.backend}): baton.torch {b:.1f} ms/step, "
              f"plain PyTorch (same per-rank work, unsharded) {p:.1f} ms/step: "
              f"{p / b:.2f}x")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["hooks", "step"])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args()
    if a.what == "hooks":
        hooks(a.reps)
    else:
        step_times(a.steps)


if __name__ == "__main__":
    main()
