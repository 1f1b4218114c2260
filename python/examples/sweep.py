"""baton.simulate over GPU counts and sequence lengths: llama3-8b on H100s,
one sequence per GPU per step, the baton policy. Prints one row per
configuration (docs/python.md). In a notebook, the rows go straight into a
table or a plot (e.g. pandas.DataFrame(rows)).

  PYTHONPATH=PREFIX/lib/python3/dist-packages /usr/bin/python3 python/examples/sweep.py
"""
import baton

rows = []
for gpus in (8, 64, 512):
    for seq in (4096, 8192, 16384):
        r = baton.simulate(model="llama3-8b", cluster="h100", gpus=gpus, seq=seq,
                           global_batch=gpus, policy="baton")["policies"][0]
        rows.append(dict(gpus=gpus, seq=seq, step_s=r["step_time_s"], mfu=r["mfu"],
                         tok_s_gpu=r["tokens_per_s_per_gpu"],
                         peak_gib=r["peak_memory_bytes"] / 2**30,
                         recompute=r["recompute_blocks"], fits=r["fits"]))

print(f"{'gpus':>5} {'seq':>6} {'step_s':>7} {'MFU':>6} {'tok/s/GPU':>9} "
      f"{'peak_GiB':>8} {'recompute':>9} {'fits':>4}")
for r in rows:
    print(f"{r['gpus']:>5} {r['seq']:>6} {r['step_s']:>7.3f} {100 * r['mfu']:>5.1f}% "
          f"{r['tok_s_gpu']:>9.0f} {r['peak_gib']:>8.1f} {r['recompute']:>9} "
          f"{'yes' if r['fits'] else 'NO':>4}")
