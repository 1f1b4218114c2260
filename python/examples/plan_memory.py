"""baton.plan_memory: the static memory plan of one data-parallel step of
llama3-8b on 64 ranks (bf16), each preset policy's arena against the lower
bound (docs/python.md). Prints one row per policy.

  PYTHONPATH=PREFIX/lib/python3/dist-packages /usr/bin/python3 python/examples/plan_memory.py
"""
import baton

GIB = 2**30
print(f"{'policy':>7} {'buffers':>7} {'state_GiB':>9} {'arena_GiB':>9} {'bound_GiB':>9} "
      f"{'ratio':>6}")
for policy in ("ddp", "fsdp2", "baton"):
    p = baton.plan_memory("llama3-8b", policy=policy, ranks=64, dtype="bf16")
    plan = p["plan"]
    print(f"{policy:>7} {p['buffers']:>7} {p['persistent_bytes'] / GIB:>9.2f} "
          f"{plan['arena_bytes'] / GIB:>9.2f} {plan['lower_bound_bytes'] / GIB:>9.2f} "
          f"{plan['ratio']:>6.3f}")
