"""One step of baton.Session on a GPU (docs/python.md): the micro model's
views as CUDA tensors through DLPack (torch.from_dlpack passes its current
stream: baton orders it after the gathers), every gradient set to 1 on
PyTorch's stream, baton's AdamW, then checks that the step moved every
master value by the AdamW step of a constant gradient, and an all_reduce.

  python3 cuda_session.py                             one rank (inproc)
  python3 -m baton.launch --nproc=2 cuda_session.py   two ranks (nccl)
"""
import sys

import baton
import torch


def stream():  # torch's current stream as a DLPack stream integer
    s = torch.cuda.current_stream().cuda_stream
    return 1 if s == 0 else s  # 0: the legacy default stream


def main():
    s = baton.Session("micro", dtype="f32", device="cuda")
    units = [u["name"] for u in s.layout()["units"]]
    s.init_parameters(lambda name, shape: torch.zeros(shape).numpy())
    s.begin_step()
    for u in units:
        for p in s.pre_forward(u).params:
            assert torch.from_dlpack(p).is_cuda, p.name
        s.post_forward(u, stream=stream())
    for u in reversed(units):
        v = s.pre_backward(u)
        for g in v.grads:
            if g.name:
                torch.from_dlpack(g).fill_(1.0)  # = or +=: the same for one micro-step
        s.post_backward(u, stream=stream())
    s.finish_step(baton.AdamW(lr=0.01))
    s.synchronize()
    for b in range(len(s.layout()["buckets"])):
        m = torch.from_dlpack(s.read_master(b))
        moved = m[m != 0]  # padding stays 0
        # AdamW's first step from 0 with gradient 1: -lr * 1 / (1 + eps).
        if moved.numel() == 0 or not torch.allclose(moved, torch.full_like(moved, -0.01),
                                                    rtol=1e-4):
            sys.exit(f"bucket {b}: master not moved by one AdamW step")
    total = s.all_reduce([1.0])[0]
    assert total == s.world_size, total
    print(f"rank {s.rank} of {s.world_size} on {s.device} ({s.backend}): one step, "
          f"{len(units)} units, masters moved by AdamW")


if __name__ == "__main__":
    main()
