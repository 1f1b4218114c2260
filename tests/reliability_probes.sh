#!/bin/bash
# Probes of the tools as a careless user and a hostile neighbour would run
# them (issue 29), four classes:
#   full    every output of every tool on a full disk (/dev/full): exit 2
#           and one stderr line naming the output, never exit 0 and an
#           empty file;
#   store   silent, garbage and wrong-token clients on a job's store port
#           while the job starts (the job starts, they are all closed), and
#           a rank whose rank 0 really exited (the error says so);
#   limits  every bound of scheduler/limits.h through every route that
#           reaches it (flag, policy file, config.json; simulate and
#           train_tiny alike), refused with the same words;
#   dupkey  a key given twice in each kind of JSON input, refused naming it;
#   moe     bad mixture-of-experts input (top-k above the experts, ep not
#           dividing the experts, ep x etp not fitting a stage's ranks, ...).
# Prints one line per probe and the count; exits 1 if any probe failed.
# PROBE_ONLY=REGEX runs only the probes whose class/name matches.
set -u
sim="$1" tiny="$2" coll="$3" launch="$4" kernels="$5" ops="$6"
t="${TEST_TMPDIR:-$(mktemp -d)}"
probes=0 failed=0
only="${PROBE_ONLY:-}"
want() { [[ -z $only || $1 =~ $only ]]; }
# A small model and one step, so train_tiny's runs take a fraction of a second.
small=(--layers=1 --hidden=32 --heads=2 --kv-heads=1 --ffn=64 --vocab=64 --seq=8 --batch=1 --steps=1)
job=(--model=tiny --gpus=8 --global-batch=8 --seq=512)

result() {  # result NAME OK DETAIL
  probes=$((probes + 1))
  if [[ $2 -eq 1 ]]; then
    echo "ok   $1: $3"
  else
    echo "FAIL $1: $3"
    failed=$((failed + 1))
  fi
}

# refuse CLASS NAME WANT_RC SUBSTRING STDOUT -- CMD...: CMD (stdout to
# STDOUT) exits WANT_RC, and exactly one stderr line holds SUBSTRING (other
# lines allowed only for train_tiny's per-step progress and the collectives
# usage that follows its error line).
refuse() {
  local class="$1" name="$2" want="$3" text="$4" out="$5"
  shift 6
  want "$class/$name" || return 0
  # A refusal comes at once; a run that is not refused is cut short (it
  # could be the 4096 ranks the probe is about).
  local limit=60
  [[ $class == limits || $class == dupkey ]] && limit=20
  timeout -s KILL $limit "$@" >"$out" 2>"$t/err"
  local rc=$? n
  n=$(grep -cF -- "$text" "$t/err")
  local others
  others=$(grep -vF -- "$text" "$t/err" | grep -v '^step  *[0-9]*/' | grep -cv '^usage: \|^  \[\|^  \|^Sizes take\|^a flag may')
  if [[ $rc -eq $want && $n -eq 1 && $others -eq 0 ]]; then
    result "$class/$name" 1 "exit $rc: $(grep -F -- "$text" "$t/err" | head -c 150)"
  else
    result "$class/$name" 0 "exit $rc (want $want), $n line(s) with \"$text\", $others other line(s): $(head -c 300 "$t/err")"
  fi
}

# ---- full: every output on a full disk -------------------------------------
full() { refuse full "$1" 2 "$2" /dev/full -- "${@:3}"; }
full sim-table 'simulate: cannot write standard output' "$sim" "${job[@]}" --policy=baton
full sim-json 'simulate: cannot write standard output' "$sim" "${job[@]}" --compare=baton,ddp --json
full sim-help 'simulate: cannot write standard output: No space left on device' "$sim" --help
full sim-version 'simulate: cannot write standard output: No space left on device' "$sim" --version
full sim-tune 'simulate: cannot write standard output' "$sim" "${job[@]}" --tune
refuse full sim-trace 2 'simulate: cannot write the trace /dev/full: No space left on device' /dev/null -- \
  "$sim" "${job[@]}" --policy=baton --trace=/dev/full
refuse full sim-svg 2 'simulate: cannot write the SVG /dev/full: No space left on device' /dev/null -- \
  "$sim" "${job[@]}" --policy=baton --svg=/dev/full
refuse full sim-policy-out 2 'simulate: cannot write policy file /dev/full: No space left on device' /dev/null -- \
  "$sim" "${job[@]}" --tune --policy-out=/dev/full
full tiny-table 'train_tiny: cannot write standard output' "$tiny" "${small[@]}"
full tiny-json 'train_tiny: cannot write standard output' "$tiny" "${small[@]}" --nranks=2 --json
full tiny-help 'train_tiny: cannot write standard output: No space left on device' "$tiny" --help
refuse full tiny-trace 2 'train_tiny: cannot write the trace /dev/full: No space left on device' /dev/null -- \
  "$tiny" "${small[@]}" --trace=/dev/full
# ucx ranks are processes it launches: rank 0 prints through the launcher.
full tiny-ucx-table 'train_tiny: cannot write standard output' "$tiny" "${small[@]}" --backend=ucx --nranks=2 --json
full coll-table 'collectives: cannot write standard output' "$coll" --nranks=2 -b 1K -e 4K -f 2 -n 1 -w 0
full coll-version 'collectives: cannot write standard output: No space left on device' "$coll" --version
# One size: the JSON (~800 bytes) fits the stream's buffer, so only the
# close sees the full disk (it went unchecked: exit 0, a 0-byte file).
refuse full coll-json 2 'collectives: cannot write the JSON results /dev/full: No space left on device' /dev/null -- \
  "$coll" --nranks=2 -b 1K -e 1K -n 1 -w 0 -J /dev/full
full launch-forwarded 'launch: cannot write standard output' "$launch" --nproc=2 -- /bin/echo rank output
refuse full kernels-table 2 'kernels: cannot write the kernel table /dev/full: No space left on device' /dev/null -- \
  "$kernels" --out=/dev/full --model=micro --tokens=16 --seqs=16 --attention-tokens=16 --adamw-params=1000 --min-time=1e-6
full kernels-stdout 'kernels: cannot write standard output' "$kernels" --out="$t/k.json" --model=micro --tokens=16 \
  --seqs=16 --attention-tokens=16 --adamw-params=1000 --min-time=1e-6
full ops-stdout 'ops: cannot write standard output' "$ops" --op=rmsnorm --min-time=1e-6
if want full/control; then
# Controls: the same outputs on a disk with room end with 0 and hold the result.
"$sim" "${job[@]}" --policy=baton --json --trace="$t/trace.json" >"$t/out" 2>"$t/err"
rc=$?
python3 -c 'import json,sys; json.loads(open(sys.argv[1]).read().splitlines()[-1]); json.load(open(sys.argv[2]))' \
  "$t/out" "$t/trace.json" 2>/dev/null
result full/control-sim $(( rc == 0 && $? == 0 )) "exit $rc, JSON line and trace parse"
"$coll" --nranks=2 -b 1K -e 4K -f 2 -n 1 -w 0 -J "$t/c.json" >/dev/null 2>"$t/err"
rc=$?
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["results"]' "$t/c.json" 2>/dev/null
result full/control-coll-json $(( rc == 0 && $? == 0 )) "exit $rc, -J file parses"
fi

# ---- store: strangers on a job's port --------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
sport=$(free_port) mport=$(free_port)
rank_env() {  # rank_env RANK WORLD
  echo RANK=$1 LOCAL_RANK=$1 WORLD_SIZE=$2 LOCAL_WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$mport BATON_STORE_PORT=$sport BATON_STORE_TOKEN=probe-token
}
if want store/; then
coll_rank=("$coll" --backend=ucx --nranks=3 --collective=all_reduce -b 1K -e 1K -n 1 -w 0 -T 60)
rm -f "$t/flood_ready" "$t/flood_stop"
env $(rank_env 0 3) "${coll_rank[@]}" >"$t/r0.out" 2>"$t/r0.err" &
r0=$!
# The stranger: waits for rank 0's store, then holds 160 silent connections
# (more than the caps of 64 and 16 per address) and sends garbage on others,
# while the other ranks start; then checks what the store did with them.
python3 - "$sport" "$t" >"$t/flood.out" 2>&1 <<'EOF' &
import os, socket, struct, sys, time
port, tmp = int(sys.argv[1]), sys.argv[2]
def connect():
    s = socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    return s
deadline = time.time() + 30
while True:
    try:
        connect().close()
        break
    except OSError:
        if time.time() > deadline: sys.exit("rank 0's store never listened")
        time.sleep(0.02)
silent = [connect() for _ in range(150)]
def closed_count(socks):
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(4096, socket.MSG_PEEK) == b"": n += 1
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n
# The store has taken in the flood once it closed all but the cap of them
# (64); 10 more then fill any slot a closed one left: only then do the
# other ranks start (with 63 held, a store that refused newcomers still let
# ranks in one by one).
for more in (0, 10):
    silent += [connect() for _ in range(more)]
    t0 = time.time()
    while closed_count(silent) < len(silent) - 64 and time.time() - t0 < 10:
        time.sleep(0.02)
print("flood: %d of %d closed before the ranks started" % (closed_count(silent), len(silent)))
garbage = {
    "http": b"GET / HTTP/1.0\r\n\r\n",
    "random": os.urandom(64),
    "huge-length": bytes([2]) + struct.pack("<IIq", 1, 1 << 31, 0) + b"k",
    "wrong-token": bytes([1]) + struct.pack("<IIq", 13, 5, (1 << 32) | 3) + b"baton-store/2" + b"wrong",
}
closed = {}
for name, data in garbage.items():
    s = connect()
    s.sendall(data)
    t0 = time.time()
    try:
        while s.recv(4096): pass
        closed[name] = time.time() - t0
    except OSError:
        closed[name] = time.time() - t0
open(os.path.join(tmp, "flood_ready"), "w").write("ready")
while not os.path.exists(os.path.join(tmp, "flood_stop")) and time.time() < deadline + 60:
    time.sleep(0.05)
ok = True
for name, secs in closed.items():
    good = secs < 1.5
    ok &= good
    print("garbage %s: closed after %.2f s %s" % (name, secs, "ok" if good else "TOO SLOW"))
t0 = time.time()
while closed_count(silent) < len(silent) and time.time() - t0 < 5:
    time.sleep(0.05)
still = len(silent) - closed_count(silent)
print("silent: %d of %d still open after the job" % (still, len(silent)))
sys.exit(0 if ok and still == 0 else 1)
EOF
flooder=$!
for _ in $(seq 600); do [[ -e "$t/flood_ready" ]] && break; sleep 0.05; done
env $(rank_env 1 3) "${coll_rank[@]}" >/dev/null 2>"$t/r1.err" &
r1=$!
env $(rank_env 2 3) "${coll_rank[@]}" >/dev/null 2>"$t/r2.err" &
r2=$!
wait $r0; rc0=$?
wait $r1; rc1=$?
wait $r2; rc2=$?
touch "$t/flood_stop"
wait $flooder; rcf=$?
result store/job-starts-under-flood $(( rc0 == 0 && rc1 == 0 && rc2 == 0 && $(grep -c '^ *1024 ' "$t/r0.out") == 1 )) \
  "ranks exit $rc0 $rc1 $rc2 with 160 silent and 4 garbage connections on the port $(head -c 200 "$t/r1.err")"
while read -r line; do
  result "store/${line%%:*}" $([[ $line == *" ok" || ( $line == silent* && $line == *" 0 of "* ) ]] && echo 1 || echo 0) "$line"
done < <(grep -E '^(garbage|silent)' "$t/flood.out")
result store/flooder $(( rcf == 0 )) "$(tail -n 1 "$t/flood.out")"
# Rank 0 takes the connection and exits without answering: the rank says so.
sport=$(free_port)
rm -f "$t/fake_ready"
python3 - "$sport" "$t/fake_ready" <<'EOF' &
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(4)
open(sys.argv[2], "w").write("listening")
l.settimeout(60)
c, _ = l.accept(); l.close(); c.close()
EOF
fake=$!
for _ in $(seq 600); do [[ -e "$t/fake_ready" ]] && break; sleep 0.05; done
refuse store rank0-exited 3 'no longer accepts connections at 127.0.0.1:'"$sport"' (did rank 0 exit?)' /dev/null -- \
  env $(rank_env 1 2) "$coll" --backend=ucx --nranks=2 -b 1K -e 1K -n 1 -w 0 -T 10
wait $fake
fi

# ---- limits: every route to every bound ------------------------------------
pf() { printf '%s' "$2" >"$t/$1"; echo "$t/$1"; }
lim() { refuse limits "$1" 2 "$2" /dev/null -- "${@:3}"; }
# micro-steps: 4096 by flag, by file, by the simulated workload.
lim micro-steps-flag '--micro-steps needs an integer in [1, 4096], got "4097"' "$tiny" --micro-steps=4097
f=$(pf ms.json '{"micro_steps": 4097}')
lim micro-steps-file-tiny "policy file $f: field \"micro_steps\" must be an integer in [1, 4096], got 4097" "$tiny" --policy-file="$f"
lim micro-steps-file-sim "policy file $f: field \"micro_steps\" must be an integer in [1, 4096], got 4097" "$sim" "${job[@]}" --policy-file="$f"
lim micro-steps-workload 'micro-steps (global batch 4097 / 1 GPUs / micro-batch 1); the limit is 4096' "$sim" --model=tiny --gpus=1 --global-batch=4097
# micro-steps x units.
lim step-units-flag '--micro-steps=4096: the step would run 4096 micro-steps of 11 units' "$tiny" --layers=8 --micro-steps=4096
f=$(pf mu.json '{"micro_steps": 4096}')
lim step-units-file-tiny "policy file $f: field \"micro_steps\" = 4096: the step would run 4096 micro-steps of 11 units" "$tiny" --layers=8 --policy-file="$f"
lim step-units-workload 'unit-micro-steps: raise --micro-batch or --gpus' "$sim" --model=llama3-405b --gpus=8 --global-batch=8192
# recompute_blocks: the model's blocks (tiny: 4), same words in both tools.
f=$(pf rb.json '{"recompute_blocks": 5}')
want="policy file $f: field \"recompute_blocks\" = 5 is more than the model's 4 blocks"
lim recompute-file-sim "$want" "$sim" "${job[@]}" --policy-file="$f"
lim recompute-file-tiny "$want" "$tiny" --policy-file="$f"
lim recompute-flag-sim '--recompute-layers must be 0..4, all or auto; got "5"' "$sim" "${job[@]}" --recompute-layers=5
# Ranks on this host: flag, inproc and launched, both tools; a launcher's
# ranks are not counted.
host=$(( 16 * $(nproc) ))
if (( host < 4096 )); then
  lim ranks-tiny-inproc "--nranks asks for 4096 ranks on this host; it runs at most $host at once" "$tiny" --nranks=4096
  lim ranks-tiny-ucx "--nranks asks for $((host + 1)) ranks on this host" "$tiny" --backend=ucx --nranks=$((host + 1))
  lim ranks-coll-inproc "--nranks asks for 4096 ranks on this host; it runs at most $host at once" "$coll" --nranks=4096
  lim ranks-coll-ucx "--nranks asks for $((host + 1)) ranks on this host" "$coll" --backend=ucx --nranks=$((host + 1))
fi
lim ranks-flag-bound '--nranks needs an integer in [1, 4096], got "4097"' "$tiny" --nranks=4097
lim ranks-under-launcher '--nranks=64 but the launcher started 2 ranks' env $(rank_env 0 2) "$tiny" --backend=ucx --nranks=64
# Groups: flag and file, both tools.
lim shard-group-flag 'shard_group = 3 does not divide the world size 8' "$sim" "${job[@]}" --policy=baton --shard-group=3
f=$(pf sg.json '{"shard_group": 3}')
lim shard-group-file-sim 'shard_group = 3 does not divide the world size 8' "$sim" "${job[@]}" --policy-file="$f"
lim shard-group-file-tiny 'shard_group = 3 does not divide the world size 4' "$tiny" --nranks=4 --policy-file="$f"
f=$(pf sg2.json '{"shard_group": 1048577}')
lim shard-group-bound "field \"shard_group\" must be an integer in [0, 1048576], got 1048577" "$sim" "${job[@]}" --policy-file="$f"
# Prefetch depth: files (the only route besides the API).
f=$(pf pd.json '{"forward_prefetch": 65537}')
lim prefetch-file-sim 'field "forward_prefetch" must be an integer in [0, 65536], got 65537' "$sim" "${job[@]}" --policy-file="$f"
lim prefetch-file-tiny 'field "forward_prefetch" must be an integer in [0, 65536], got 65537' "$tiny" --policy-file="$f"
# Model sizes: flags and config.json.
lim layers-flag '--layers needs an integer in [1, 16384], got "16385"' "$tiny" --layers=16385
cfg() { pf "$1" '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 128, "num_hidden_layers": '"$2"'}'; }
f=$(cfg layers.json 16385)
lim layers-config-sim '"num_hidden_layers" must be an integer in [1, 16384]' "$sim" --hf-config="$f" --gpus=8 --global-batch=8
lim layers-config-tiny '"num_hidden_layers" must be an integer in [1, 16384]' "$tiny" --hf-config="$f"
lim hidden-flag '--hidden needs an integer in [1, 16777216], got "16777217"' "$tiny" --hidden=16777217
# Workload sizes (simulate's flags; the API checks the same).
lim gpus-flag '--gpus needs an integer in [1, 1048576], got "1048577"' "$sim" --gpus=1048577
lim seq-flag '--seq needs an integer in [1, 16777216], got "16777217"' "$sim" --seq=16777217

# ---- dupkey: a key given twice in each JSON input --------------------------
dup() { refuse dupkey "$1" 2 "$2" /dev/null -- "${@:3}"; }
f=$(pf dp.json '{"micro_steps": 1, "name": "x", "micro_steps": 2}')
dup policy-sim "policy file $f: duplicate key \"micro_steps\"" "$sim" "${job[@]}" --policy-file="$f"
dup policy-tiny "policy file $f: duplicate key \"micro_steps\"" "$tiny" --policy-file="$f"
f=$(pf dc.json '{"nic_gbps": 25, "gpus_per_node": 4, "nic_gbps": 400}')
dup cluster-file 'cluster file: duplicate key "nic_gbps"' "$sim" "${job[@]}" --cluster-file="$f"
table='{"gpu": "t", "launch_overhead_us": 5, "gemm": [{"m": 64, "n": 64, "k": 64, "s": 1e-6, "s": 2e-6}],
 "sdpa": [{"batch": 1, "heads": 8, "kv_heads": 8, "seq": 1024, "head_dim": 64, "fwd_s": 1e-4, "bwd_s": 3e-4}],
 "elementwise": [{"op": "rmsnorm", "bytes_fwd": 1e6, "fwd_s": 1e-5, "bwd_s": 2e-5}], "adamw": [{"params": 1e6, "s": 1e-4}]}'
f=$(pf dk.json "$table")
dup kernel-table "kernel table $f: duplicate key \"s\" at gemm[0]" "$sim" "${job[@]}" --kernel-table="$f"
dup kernel-table-as-calibration "duplicate key \"s\" at gemm[0]" "$sim" "${job[@]}" --calibration="$f"
f=$(pf dcal.json '{"collective": "all_gather", "results": [{"size": 1024, "size": 2048, "out_of_place": {"busbw_gbps": 3}}]}')
dup calibration "calibration $f: duplicate key \"size\" at results[0]" "$sim" "${job[@]}" --calibration="$f"
f=$(pf dcfg.json '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 128, "num_hidden_layers": 2, "hidden_size": 4096}')
dup config-sim 'config.json: duplicate key "hidden_size"' "$sim" --hf-config="$f" --gpus=8 --global-batch=8
dup config-tiny 'config.json: duplicate key "hidden_size"' "$tiny" --hf-config="$f"
f=$(pf dnest.json '{"preset": "baton", "name": "x", "name": "y"}')
dup policy-name "policy file $f: duplicate key \"name\"" "$sim" "${job[@]}" --policy-file="$f"

# ---- moe: bad mixture-of-experts input (issue 48) ---------------------------
moe() { refuse moe "$1" 2 "$2" /dev/null -- "${@:3}"; }
f=$(pf moe_topk.json '{"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128, "num_local_experts": 8, "num_experts_per_tok": 9}')
moe topk-above-experts 'moe top_k = 9 must be in [1, 8] (the routed experts)' "$sim" --hf-config="$f" --gpus=8 --global-batch=8 --seq=512
moe ep-not-dividing-experts "--ep=6 must divide the model's 8 experts" "$sim" --model=mixtral-8x7b --gpus=12 --global-batch=12 --seq=512 --ep=6
moe ep-not-fitting-ranks 'ep x etp = 32 does not divide the 16 ranks of a pipeline stage' "$sim" --model=mixtral-8x7b --gpus=16 --global-batch=16 --seq=512 --ep=32
moe ep-etp-not-fitting-ranks 'ep x etp = 16 does not divide the 8 ranks of a pipeline stage' "$sim" --model=mixtral-8x7b --gpus=8 --global-batch=8 --seq=512 --tp=2 --sp --ep=8 --etp=2
moe etp-not-tp 'etp = 4 must be 1 or tp = 2' "$sim" --model=mixtral-8x7b --gpus=16 --global-batch=16 --seq=512 --tp=2 --sp --ep=2 --etp=4
moe ep-dense-model 'need a mixture-of-experts model' "$sim" --model=tiny --gpus=8 --global-batch=8 --seq=512 --ep=2
moe tp-without-sp 'needs --sp' "$sim" --model=mixtral-8x7b --gpus=16 --global-batch=16 --seq=512 --tp=2 --ep=2
moe imbalance-range '--moe-imbalance' "$sim" --model=mixtral-8x7b --gpus=8 --global-batch=8 --seq=512 --moe-imbalance=0.5
moe dispatcher-name 'unknown MoE dispatcher "deepep2"' "$sim" --model=mixtral-8x7b --gpus=8 --global-batch=8 --seq=512 --moe-dispatcher=deepep2
f=$(pf moe_pol.json '{"preset": "baton", "expert_parallel": 3}')
moe ep-policy-file "--ep=3 must divide the model's 8 experts" "$sim" --model=mixtral-8x7b --gpus=12 --global-batch=12 --seq=512 --policy-file="$f"

echo "$probes probes, $failed failed"
exit $(( failed > 0 ))
