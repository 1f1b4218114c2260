"""Trains the small Llama of llama.py (the shape of baton's `micro` preset)
under baton.torch, one process per rank (docs/python.md):

  python3 -m baton.launch --nproc=2 train_llama.py [--policy=NAME|FILE] [--steps=N]

--policy: a preset (baton, fsdp2, hsdp, ...) or a policy file, e.g. the one
`simulate --tune --policy-out=FILE` writes.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import baton
import baton.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import Llama  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--policy", default="baton")
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()

torch.manual_seed(0)  # the same starting weights on every rank
model = Llama(vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=16)
sharded = baton.torch.shard(model, model.units(), config="micro", policy=a.policy,
                            optimizer=baton.AdamW(lr=1e-3, betas=(0.9, 0.95)))
rank, world = sharded.session.rank, sharded.session.world_size
data = torch.Generator().manual_seed(1)
for step in range(a.steps):
    batch = torch.randint(0, 64, (2 * world, 17), generator=data)[2 * rank:2 * rank + 2]
    loss = F.cross_entropy(sharded(batch[:, :-1]).reshape(-1, 64), batch[:, 1:].reshape(-1))
    loss.backward()
    sharded.step()
    mean = sharded.session.all_reduce([loss.item()])[0] / world
    if rank == 0:
        print(f"step {step}: loss {mean:.4f} ({world} ranks, policy {os.path.basename(a.policy)})")
