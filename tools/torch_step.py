#!/usr/bin/env python3
"""Whole training steps of one Llama-shaped model on one GPU, in PyTorch eager.

The step `simulate --gpus=1 --policy=ddp --recompute-layers=0` models with
the shipped kernel table (sim/data/h100_kernels.json, PyTorch 2.11): fp32
parameters under bf16 autocast; per block RMSNorm, a fused QKV GEMM, RoPE,
causal SDPA (grouped-query where KV heads < heads), the O GEMM, RMSNorm, a
fused gate-up GEMM, SwiGLU, the down GEMM and the residual adds; the
embedding, a final RMSNorm, an untied LM head, cross-entropy over the
vocabulary in fp32, fused AdamW, gradients set to None. No communication.
tools/whole_step.py runs this for its shapes and compares.

Prints one JSON line: name, parameters, tokens per step, the median step
time over the timed steps (CUDA events around each whole step), the
slowest and fastest, peak allocated memory, the last loss, torch version,
GPU name. Bad arguments: one line on stderr, exit 2.
"""
import argparse
import json
import statistics
import sys


def fail(msg):
    print(f"torch_step: {msg}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        fail(message)


def parse():
    p = Parser(description=__doc__.splitlines()[0])
    for k in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab", "seq", "batch"):
        p.add_argument(f"--{k}", type=int, required=True)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--name", default="")
    a = p.parse_args()
    for k, v in vars(a).items():
        if isinstance(v, int) and v <= 0 and k != "warmup":
            fail(f"--{k.replace('_', '-')} must be positive, got {v}")
    if a.warmup < 0:
        fail(f"--warmup must be non-negative, got {a.warmup}")
    if a.hidden % a.heads:
        fail(f"--hidden ({a.hidden}) is not a multiple of --heads ({a.heads})")
    if a.heads % a.kv_heads:
        fail(f"--heads ({a.heads}) is not a multiple of --kv-heads ({a.kv_heads})")
    if (a.hidden // a.heads) % 2:
        fail(f"the head dim ({a.hidden // a.heads}) must be even for RoPE")
    return a


def main():
    a = parse()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        fail(f"PyTorch is not importable here: {e}")
    if not torch.cuda.is_available():
        fail("no CUDA device visible to PyTorch")

    hd = a.hidden // a.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(a.hidden, eps=1e-5)
            self.mlp_norm = nn.RMSNorm(a.hidden, eps=1e-5)
            self.qkv = nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * hd, bias=False)
            self.o = nn.Linear(a.heads * hd, a.hidden, bias=False)
            self.gate_up = nn.Linear(a.hidden, 2 * a.ffn, bias=False)
            self.down = nn.Linear(a.ffn, a.hidden, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            qkv = self.qkv(self.attn_norm(x)).view(b, t, a.heads + 2 * a.kv_heads, hd)
            q, k, v = qkv.transpose(1, 2).split([a.heads, a.kv_heads, a.kv_heads], dim=1)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=a.kv_heads != a.heads)
            x = x + self.o(y.transpose(1, 2).reshape(b, t, a.heads * hd))
            g, u = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    def rotate(x, cos, sin):  # RoPE on (batch, heads, seq, head dim), halves
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(a.vocab, a.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.norm = nn.RMSNorm(a.hidden, eps=1e-5)
            self.head = nn.Linear(a.hidden, a.vocab, bias=False)

        def forward(self, tokens, cos, sin):
            x = self.embed(tokens)
            for blk in self.blocks:
                x = blk(x, cos, sin)
            return self.head(self.norm(x))

    dev = torch.device("cuda")
    torch.manual_seed(0)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1], cos, sin)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        with dev:  # parameters made on the GPU, not on the host first
            model = Model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(a.seq, device=dev, dtype=torch.float32), inv)
        cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.steps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    except torch.cuda.OutOfMemoryError as e:
        fail(f"{a.name or 'the shape'} does not fit on this GPU: {str(e).splitlines()[0]}")

    print(json.dumps({
        "name": a.name,
        "params": sum(p.numel() for p in model.parameters()),
        "tokens": a.batch * a.seq,
        "step_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "steps": a.steps,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": float(loss),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }))


if __name__ == "__main__":
    main()
