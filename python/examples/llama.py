"""A small Llama in plain PyTorch (fp32; works on PyTorch 1.13, which has
no scaled_dot_product_attention and no nn.RMSNorm): RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU. Each block declares its
parameters in baton's order (scheduler/model.h), though baton.torch matches
by shape either way. Used by python/torch_test.py and docs/python.md.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq, head_dim, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    return angles.cos().float(), angles.sin().float()  # [seq, head_dim / 2]


def apply_rope(x, cos, sin):
    """x [batch, seq, heads, head_dim]: pairs (x[2i], x[2i+1]) rotated."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, : x.shape[1], None, :], sin[None, : x.shape[1], None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn, seq):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.attn_norm = RMSNorm(hidden)
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden)
        self.w_gate = nn.Linear(hidden, ffn, bias=False)
        self.w_up = nn.Linear(hidden, ffn, bias=False)
        self.w_down = nn.Linear(ffn, hidden, bias=False)
        cos, sin = rope_tables(seq, self.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def attention(self, x):
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.heads, self.head_dim), self.cos, self.sin)
        k = apply_rope(self.wk(x).view(b, t, self.kv_heads, self.head_dim), self.cos, self.sin)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim)
        group = self.heads // self.kv_heads  # GQA: each KV head serves `group` heads
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [b, heads, t, d]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x):
        x = x + self.attention(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq=16):
        super().__init__()
        self.config = dict(name="test-llama", hidden=hidden, intermediate=ffn, layers=layers,
                           heads=heads, kv_heads=kv_heads, vocab=vocab, tie_embeddings=False)
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, kv_heads, ffn, seq)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        for p in self.parameters():  # small random weights, norms included
            nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.normal_(p, 1.0, 0.02)

    def units(self):
        """baton's units in forward order."""
        return [self.embed, *self.blocks, self.norm, self.head]

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))
