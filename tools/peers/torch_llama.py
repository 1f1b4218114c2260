# Provenance: a copy of ../shared/peers/torch_llama.py (the project's shared
# folder beside the repository), taken 2026-11-28 and unchanged below this
# header, so that the GPU bundle (tools/gpu_bundle.sh: peers/) and CI can
# read it. The GPU suite's figure/torch_peer_8block part runs it with
# argument 8 against train_tiny's 8-block shape (tools/gpu_suite_parts.sh).
# PyTorch peer for train_tiny's bigger GPU case: same Llama shape, bf16, one GPU,
# eager, SDPA attention, fused AdamW. Prints tokens/s over steps 2..N.
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
L, H, NH, KV, FF, V, S, B, STEPS = 8, 1024, 16, 4, 2816, 32000, 1024, 8, 10
if len(sys.argv) > 1: B = int(sys.argv[1])
dev = "cuda"; torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s):
        super().__init__(); hd = H // NH
        s.n1 = nn.RMSNorm(H); s.n2 = nn.RMSNorm(H)
        s.q = nn.Linear(H, H, bias=False); s.k = nn.Linear(H, KV*hd, bias=False); s.v = nn.Linear(H, KV*hd, bias=False); s.o = nn.Linear(H, H, bias=False)
        s.g = nn.Linear(H, FF, bias=False); s.u = nn.Linear(H, FF, bias=False); s.d = nn.Linear(FF, H, bias=False)
    def forward(s, x):
        b, t, _ = x.shape; hd = H // NH; h = s.n1(x)
        q = s.q(h).view(b, t, NH, hd).transpose(1, 2); k = s.k(h).view(b, t, KV, hd).transpose(1, 2); v = s.v(h).view(b, t, KV, hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.o(a.transpose(1, 2).reshape(b, t, H)); h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.e = nn.Embedding(V, H); s.b = nn.ModuleList(Block() for _ in range(L)); s.n = nn.RMSNorm(H); s.h = nn.Linear(H, V, bias=False)
    def forward(s, x):
        x = s.e(x)
        for b in s.b: x = b(x)
        return s.h(s.n(x))
m = M().to(dev)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True)
x = torch.randint(0, V, (B, S + 1), device=dev)
ts = []
for i in range(STEPS):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lg = m(x[:, :-1])
    loss = F.cross_entropy(lg.float().view(-1, V), x[:, 1:].reshape(-1))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
p = sum(q.numel() for q in m.parameters()); s = sum(ts[1:]) / (STEPS - 1)
print(f"torch eager bf16-autocast: params {p}, batch {B}x{S}, {s*1e3:.1f} ms/step, {B*S/s:.0f} tokens/s, loss {loss.item():.3f}")
