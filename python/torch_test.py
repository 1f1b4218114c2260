"""baton.torch against plain PyTorch: the small Llama of examples/llama.py
trained under baton.torch (this process is one rank: alone, or under the
launcher with ucx) and, in the same process, unsharded by plain PyTorch
(torch.optim.AdamW) on the whole global batch. Checks every step's loss
(the mean over ranks) and, at the end, every parameter, within --rtol
relative (per tensor: max |baton - torch| / max |torch|).

  torch_test.py --package=DIR --examples=DIR [--policy=baton]
                [--set=KEY=JSON ...] [--micro-steps=K] [--steps=N]
                [--optimizer=adamw|sgd] [--inproc=N] [--rtol=1e-5]

--inproc=N runs N ranks as threads of this process (baton.Session.inproc)
instead of one rank per process.

Rank 0 prints one line per step and a summary; any rank exits 1 on a
mismatch.
"""
import argparse
import copy
import json
import os
import sys
import threading
import traceback


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True)
    p.add_argument("--examples", required=True)
    p.add_argument("--policy", default="baton")
    p.add_argument("--set", action="append", default=[], help="policy field KEY=JSON")
    p.add_argument("--micro-steps", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=2, help="sequences per rank per micro-step")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--inproc", type=int, default=0,
                   help="this many ranks as threads of this process (inproc backend)")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                   help="baton's AdamW, or SGD as a Python callable on the shard views")
    return p.parse_args()


ARGS = parse()
sys.path.insert(0, ARGS.package)
sys.path.insert(0, ARGS.examples)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import baton  # noqa: E402
import baton.torch  # noqa: E402
from llama import Llama  # noqa: E402


def rel(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)


def make_models():
    torch.manual_seed(0)
    model = Llama(vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=ARGS.seq)
    return model, copy.deepcopy(model)


def make_policy():
    policy = baton.policy(ARGS.policy)
    for kv in ARGS.set:
        key, value = kv.split("=", 1)
        policy[key] = json.loads(value)
    policy["micro_steps"] = ARGS.micro_steps
    return policy


def main():
    if ARGS.inproc == 0:
        return train(*make_models(), make_policy(), None)
    # Ranks as threads of this process: models made here (the global RNG),
    # sessions made together, one thread per rank.
    models = [make_models() for _ in range(ARGS.inproc)]
    sessions = baton.Session.inproc(ARGS.inproc, models[0][0].config, make_policy(),
                                    dtype="f32")
    codes = [None] * ARGS.inproc

    def rank(r):
        try:
            codes[r] = train(*models[r], None, sessions[r])
        except BaseException:
            traceback.print_exc()
            codes[r] = 1

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ARGS.inproc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(codes)


def train(model, reference, policy, session):
    """This rank's run (session: None, or one made for it); 0 or 1."""
    vocab = 64
    betas = (0.9, 0.95)

    def sgd(shard):  # a Python optimizer on baton's shard views
        master = torch.from_dlpack(shard.master)
        master.sub_(torch.from_dlpack(shard.grad), alpha=ARGS.lr * shard.grad_scale)

    optimizer = baton.AdamW(lr=ARGS.lr, betas=betas) if ARGS.optimizer == "adamw" else sgd
    sharded = baton.torch.shard(model, model.units(), config=model.config, policy=policy,
                                optimizer=optimizer, session=session)
    session = sharded.session
    rank, world, k = session.rank, session.world_size, ARGS.micro_steps
    if ARGS.optimizer == "adamw":
        opt = torch.optim.AdamW(reference.parameters(), lr=ARGS.lr, betas=betas, eps=1e-8,
                                weight_decay=0.0)
    else:
        opt = torch.optim.SGD(reference.parameters(), lr=ARGS.lr)
    data = torch.Generator().manual_seed(1)
    worst_loss = 0.0
    for step in range(ARGS.steps):
        # The global batch: world x k x batch sequences; rank r, micro-step m
        # takes slice r * k + m.
        tokens = torch.randint(0, vocab, (world * k * ARGS.batch, ARGS.seq + 1), generator=data)
        x, y = tokens[:, :-1], tokens[:, 1:]
        local = 0.0
        for m in range(k):
            rows = slice((rank * k + m) * ARGS.batch, (rank * k + m + 1) * ARGS.batch)
            loss = F.cross_entropy(sharded(x[rows]).reshape(-1, vocab), y[rows].reshape(-1))
            loss.backward()
            local += loss.item()
        sharded.step()
        mean = session.all_reduce([local])[0] / (world * k)
        opt.zero_grad()
        ref_loss = F.cross_entropy(reference(x).reshape(-1, vocab), y.reshape(-1))
        ref_loss.backward()
        opt.step()
        d = abs(mean - ref_loss.item()) / abs(ref_loss.item())
        worst_loss = max(worst_loss, d)
        if rank == 0:
            print(f"step {step}: loss baton.torch {mean:.7f} torch {ref_loss.item():.7f}")
    # Every parameter: the buckets' whole masters against the reference.
    layout = session.layout()
    by_name = {}
    for u, unit in enumerate(reference.units()):
        tparams = baton.torch._unique_params(unit)
        matched = baton.torch._match_unit(u, layout["units"][u]["name"], tparams,
                                          layout["units"][u]["params"])
        for bp, p in zip(layout["units"][u]["params"], matched):
            by_name[bp["name"]] = p.detach()
    worst_param, worst_name, checked = 0.0, "all equal", 0
    for b, bucket in enumerate(layout["buckets"]):
        full = torch.from_dlpack(session.full_master(b))
        for p in bucket["params"]:
            n = 1
            for d in p["shape"]:
                n *= d
            value = full[p["offset"]:p["offset"] + n].view(p["shape"])
            r = rel(value, by_name[p["name"]])
            checked += 1
            if r > worst_param:
                worst_param, worst_name = r, p["name"]
    if checked != len(by_name):
        print(f"FAIL: checked {checked} parameters, the model has {len(by_name)}")
        return 1
    if rank == 0:
        print(f"ranks {world} ({session.backend}) policy {ARGS.policy} micro-steps {k} "
              f"optimizer {ARGS.optimizer}: "
              f"{ARGS.steps} steps; max relative difference: loss {worst_loss:.2e}, "
              f"parameters {worst_param:.2e} ({worst_name}; {checked} parameters)")
    if not (worst_loss <= ARGS.rtol and worst_param <= ARGS.rtol):
        print(f"FAIL (rank {rank}): beyond rtol {ARGS.rtol}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
