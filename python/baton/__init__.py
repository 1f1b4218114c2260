"""baton from Python: the simulator, the tuner, models and policies, and
the session API (Session: baton's schedule under a trainer's own loop, every
view a DLPack tensor; baton.torch builds on it).

Every function here runs the same C++ code as the `simulate` program and
refuses the same inputs with the same one-line message, raised as
ValueError (docs/python.md). Keyword arguments are simulate's flags with
dashes as underscores (global_batch=64 is --global-batch=64); each value
goes to the flag's own parser, so the limits of scheduler/limits.h apply
whatever the route.
"""
import json as _json

from . import _baton

__version__ = _baton.__version__

# simulate's bare switches: True gives the flag, False leaves it out.
_SWITCHES = ("sp", "tp_overlap", "tp_across_nodes", "memory")

__all__ = ["simulate", "tune", "model_from_hf_config", "model", "policy",
           "read_policy", "write_policy", "plan_memory", "Session", "AdamW", "Tensor"]

Tensor = _baton.Tensor


def _flags(knobs):
    """simulate's arguments for keyword arguments."""
    args = []
    for key, value in knobs.items():
        flag = "--" + key.replace("_", "-")
        if key in _SWITCHES:
            if not isinstance(value, bool):
                raise ValueError(f"simulate: {flag} is a switch: give {key}=True or "
                                 f"{key}=False, got {value!r}")
            if value:
                args.append(flag)
            continue
        if isinstance(value, (list, tuple)):  # --compare=a,b, --calibration=f,g
            value = ",".join(str(v) for v in value)
        args.append(f"{flag}={value}")
    return args


def simulate(**knobs):
    """One simulated training step: what `simulate --json` prints, as a dict
    ({"model", "cluster", "gpus", "policies": [{"policy", "step_time_s",
    "mfu", ...}, ...]}). Knobs: model or hf_config (a path), cluster,
    cluster_file, gpus, seq, global_batch, micro_batch, policy, compare (a
    list), policy_file, recompute_layers, shard_group, hpz_group, tp, sp,
    cp, pp, ... (`simulate --help` lists them); the techniques: optimizer,
    recompute, lora_rank, lora_alpha, lora_targets (a list), base_dtype,
    offload; memory=True (each policy's "memory" split is in the dict
    either way). The defaults are simulate's.
    """
    _, text = _baton.simulate_args(_flags(knobs) + ["--json"])
    return _json.loads(text)


def tune(**knobs):
    """simulate --tune: the best configurations found, as `--tune --json`
    prints them ({"best": [{"step_time_s", "knobs", ...}, ...], ...});
    policy_out=PATH writes the best as a policy file; allow=["adamw8bit",
    "lora", "nf4"] lets it choose those techniques."""
    _, text = _baton.simulate_args(_flags(knobs) + ["--tune", "--json"])
    return _json.loads(text)


def model_from_hf_config(path_or_dict):
    """The model of a Hugging Face config.json (a path, or the parsed dict):
    {"name", "hidden", "intermediate", "layers", "heads", "kv_heads",
    "head_dim", "vocab", "tie_embeddings", "norm_eps", "rope_theta",
    "parameters"}."""
    if isinstance(path_or_dict, dict):
        return _baton.model_from_hf_config_text(_json.dumps(path_or_dict))
    if isinstance(path_or_dict, str):
        return _baton.model_from_hf_config_file(path_or_dict)
    raise ValueError("model_from_hf_config needs a path or a dict, got "
                     f"{type(path_or_dict).__name__}")


def model(name):
    """A preset model (llama3-8b, ...) as model_from_hf_config's dict."""
    return _baton.model_preset(str(name))


def policy(name):
    """A preset policy (baton, fsdp2, hsdp, ...) as the dict of its policy
    file (scheduler/policy_file.h)."""
    return _json.loads(_baton.policy_preset_json(str(name)))


def read_policy(path):
    """A policy file, checked, as a dict."""
    return _json.loads(_baton.read_policy_file_json(str(path)))


def write_policy(path, policy_or_name):
    """Writes a policy file from a dict (as policy() returns) or a preset
    name; simulate(policy_file=path) runs it."""
    if isinstance(policy_or_name, str):
        text = _baton.policy_preset_json(policy_or_name)
    elif isinstance(policy_or_name, dict):
        text = _json.dumps(policy_or_name)
    else:
        raise ValueError("write_policy needs a policy dict or a preset name, got "
                         f"{type(policy_or_name).__name__}")
    _baton.write_policy_file(str(path), text)


def plan_memory(model, policy="baton", ranks=1, dtype=None):
    """The static memory plan of one data-parallel step (memory/planner.h):
    every gathered parameter, gradient and staging buffer of the step graph
    placed in one arena, against the lower bound. model: a preset name, a
    dict as model() returns, or a Hugging Face config dict; policy: a preset
    name, a policy file (.json) or a dict; ranks: the world size. Returns a
    dict: ranks, buffers, persistent_bytes (shards, masters and optimizer
    state), host_bytes (offload), build_ms and plan (arena_bytes,
    lower_bound_bytes, ratio, strategy, added_edges, and per buffer its name,
    bytes, offset, alignment and first / last node). Activations are the
    trainer's and not in it. ValueError for bad input."""
    if isinstance(ranks, bool) or not isinstance(ranks, int):
        raise ValueError(f"baton.plan_memory: ranks must be an int, got {type(ranks).__name__}")
    who = "baton.plan_memory"
    name, text = _model_config(model, who)
    return _json.loads(_baton.plan_memory_json(name, text, _policy_json(policy, dtype, who),
                                               ranks))


class AdamW:
    """baton's fused AdamW (ops/adamw.h: PyTorch's AdamW, decoupled weight
    decay) on the fp32 master shards, for Session.finish_step."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"baton.AdamW: betas must be a pair, got {betas!r}")
        self.lr, self.betas, self.eps = float(lr), tuple(float(b) for b in betas), float(eps)
        self.weight_decay = float(weight_decay)

    def __repr__(self):
        return (f"baton.AdamW(lr={self.lr}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay})")


def _model_config(model, who="baton.Session"):
    """(name, Hugging Face config.json text) of a preset name, a dict as
    model() returns, or a Hugging Face config dict."""
    if isinstance(model, str):
        model = _baton.model_preset(model)
    if not isinstance(model, dict):
        raise ValueError(f"{who}: model must be a preset name or a dict (baton.model(), "
                         f"or a Hugging Face config), got {type(model).__name__}")
    if "hidden_size" in model:
        return "hf", _json.dumps(model)
    keys = ("hidden", "intermediate", "layers", "heads", "vocab")
    missing = [k for k in keys if k not in model]
    if missing:
        raise ValueError(f"{who}: the model dict lacks {', '.join(missing)}")
    hf = {"architectures": ["LlamaForCausalLM"], "hidden_size": model["hidden"],
          "intermediate_size": model["intermediate"], "num_hidden_layers": model["layers"],
          "num_attention_heads": model["heads"],
          "num_key_value_heads": model.get("kv_heads", model["heads"]),
          "vocab_size": model["vocab"],
          "tie_word_embeddings": model.get("tie_embeddings", False)}
    if "head_dim" in model:
        hf["head_dim"] = model["head_dim"]
    return str(model.get("name", "model")), _json.dumps(hf)


def _policy_json(policy_or_name, dtype, who="baton.Session"):
    if isinstance(policy_or_name, str):
        try:
            if policy_or_name.endswith(".json"):
                pol = read_policy(policy_or_name)
            else:
                pol = policy(policy_or_name)
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
    elif isinstance(policy_or_name, dict):
        pol = dict(policy_or_name)
    else:
        raise ValueError(f"{who}: policy must be a preset name, a policy file (.json) or "
                         f"a dict, got {type(policy_or_name).__name__}")
    if dtype is not None:
        if dtype not in ("f32", "bf16"):
            raise ValueError(f"{who}: dtype must be 'f32' or 'bf16', got {dtype!r}")
        pol["param_dtype"] = dtype
        pol["reduce_dtype"] = dtype
    return _json.dumps(pol)


def _activation_size(seq, micro_batch):
    """seq and micro_batch as the extension takes them (0: not given)."""
    out = []
    for key, value in (("seq", seq), ("micro_batch", micro_batch)):
        if value is None:
            out.append(0)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"baton.Session: {key} must be an int >= 1, got {value!r}")
        else:
            out.append(value)
    return out


class Session:
    """scheduler/session.h from Python: baton's gathers, reduces and
    optimizer under a trainer's own loop (docs/python.md).

    model: a preset name, a dict as model() returns, or a Hugging Face
    config dict. policy: a preset name, a policy file path (.json) or a
    policy dict; dtype ('f32' or 'bf16') overrides its parameter and reduce
    dtypes. Ranks come from the launch environment (RANK, WORLD_SIZE, ...:
    one process per rank over ucx); without one the session is one rank.
    device: 'cpu' (host memory; backends inproc, ucx) or 'cuda' (the GPU of
    the launcher's LOCAL_RANK; backends inproc, one rank, or nccl); without
    a GPU, device='cuda' raises RuntimeError. On CUDA the views' __dlpack__
    follows the DLPack stream handshake, and post_forward / post_backward
    take the stream the caller computed on (None: the legacy default
    stream; -1: none, the caller synchronizes).

    Per step: begin_step(); per unit in forward order pre_forward(u) (its
    UnitViews: params, baton.Tensor views valid until post_forward(u)),
    post_forward(u); per unit in reverse pre_backward(u) (params, grads,
    grad_accumulate: write each gradient with = or += as it says),
    post_backward(u); finish_step(baton.AdamW(...) or None). Units are
    indices or names ("embedding", "block0", ..., "final_norm", "lm_head").
    A call out of plan order raises RuntimeError naming the expected call.
    order() lists a step's hook calls in plan order.

    Pipeline stages: a policy with pipeline_parallel = p > 1 (schedule
    pipeline_schedule: "1f1b", "interleaved" with virtual_stages, "zb-h1")
    makes this rank's stage session; seq (tokens per sequence) and
    micro_batch (sequences per micro-batch, default 1) size the activations
    stages exchange. pipeline describes the stage; the views carry
    pipeline_input / pipeline_output / pipeline_output_grad /
    pipeline_input_grad; under zb-h1 a backward is pre_backward (input
    gradient) and later pre_backward_weight (weight gradients). Tensor and
    context parallelism are refused (ValueError).
    """

    def __init__(self, model, policy="baton", dtype=None, backend="auto", timeout_s=300.0,
                 device="cpu", seq=None, micro_batch=None, _made=None):
        if _made is not None:
            self._s = _made
        else:
            name, text = _model_config(model)
            seq, micro_batch = _activation_size(seq, micro_batch)
            if not isinstance(backend, str):
                raise ValueError(f"baton.Session: backend must be a string, got {backend!r}")
            if not isinstance(device, str):
                raise ValueError(f"baton.Session: device must be 'cpu' or 'cuda', got {device!r}")
            self._s = _baton._Session(name, text, _policy_json(policy, dtype), backend, device,
                                      float(timeout_s), seq, micro_batch)
        self.rank = self._s.rank
        self.world_size = self._s.world_size
        self.backend = self._s.backend
        self.device = self._s.device

    @staticmethod
    def inproc(n, model, policy="baton", dtype=None, timeout_s=300.0, seq=None,
               micro_batch=None):
        """n ranks as threads of this process (inproc backend): a list of n
        sessions, rank r at index r, made together (creation is
        collective). Drive each from its own Python thread; the hooks
        release the GIL while baton waits, and collectives (all_reduce,
        full_master) need every rank's thread to call them."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"baton.Session.inproc: n must be an int, got {type(n).__name__}")
        name, text = _model_config(model)
        seq, micro_batch = _activation_size(seq, micro_batch)
        made = _baton._Session.inproc(n, name, text, _policy_json(policy, dtype),
                                      float(timeout_s), seq, micro_batch)
        return [Session(None, _made=s) for s in made]

    def layout(self):
        """{"units": [{"name", "kind", "params": [{"name", "shape"}]}],
        "buckets": [{"name", "resident", "shard_numel", "padded_numel",
        "params": [{"name", "shape", "offset", "unit"}]}], "shard_ranks",
        "shard_rank"}."""
        return self._s.layout()

    def order(self):
        """The hook calls of one step in the order the plan expects them: a
        list of (kind, unit, micro_step), kind "forward" (pre_forward /
        post_forward), "backward" (pre_backward / post_backward) or
        "weight" (pre_backward_weight / post_backward_weight, zb-h1 only)."""
        return self._s.order()

    @property
    def pipeline(self):
        """None for a data-parallel session. A pipeline stage's session:
        {"stage", "stages", "schedule", "chunks" (this stage's model chunks,
        each a list of unit indices), "passes" (the schedule's passes of
        this stage: (kind, micro_batch, chunk), kind "forward", "backward"
        or "weight"), "activation_shape" ([micro_batch, seq, hidden]),
        "activation_dtype" ("f32" or "bf16")}."""
        return self._s.pipeline

    def init_parameters(self, init):
        """Fills this rank's shards: init(name, shape) returns the whole
        parameter's float32 values (a NumPy array or any buffer)."""
        if not callable(init):
            raise ValueError("baton.Session.init_parameters needs a callable "
                             f"init(name, shape), got {type(init).__name__}")
        self._s.init_parameters(init)

    def begin_step(self):
        self._s.begin_step()

    def pre_forward(self, unit):
        return self._s.pre_forward(unit)

    def post_forward(self, unit, stream=None):
        self._s.post_forward(unit, stream)

    def pre_backward(self, unit):
        return self._s.pre_backward(unit)

    def post_backward(self, unit, stream=None):
        self._s.post_backward(unit, stream)

    def pre_backward_weight(self, unit):
        """zb-h1: the deferred weight-gradient pass of unit (its views have
        params, grads and grad_accumulate, no pipeline tensors)."""
        return self._s.pre_backward_weight(unit)

    def post_backward_weight(self, unit, stream=None):
        self._s.post_backward_weight(unit, stream)

    def finish_step(self, optimizer=None):
        """The rest of the step: reduces, then the optimizer on this rank's
        shards: baton's AdamW (a baton.AdamW), no update (None), or a
        callable optimizer(shard) run once per bucket with a
        baton.OptimizerShard (bucket, step, grad_scale, shard_offset, and
        the views master, grad, moment1, moment2; wrap them with
        torch.from_dlpack): it updates shard.master in place (using
        grad * grad_scale, the mean over ranks and micro-steps); baton casts
        the master into the next gathers. Not under offload."""
        if callable(optimizer) and not isinstance(optimizer, AdamW):
            self._s.finish_step_with(optimizer)
        elif optimizer is None:
            self._s.finish_step("none")
        elif isinstance(optimizer, AdamW):
            self._s.finish_step("adamw", optimizer.lr, optimizer.betas[0], optimizer.betas[1],
                                optimizer.eps, optimizer.weight_decay)
        else:
            raise ValueError("baton.Session.finish_step: optimizer must be a baton.AdamW, a "
                             f"callable or None, got {type(optimizer).__name__}")

    def synchronize(self):
        """Waits for baton's streams; raises the first error of any."""
        self._s.synchronize()

    def read_master(self, bucket):
        """A copy of this rank's fp32 master shard of bucket `bucket` (a
        baton.Tensor that owns its memory)."""
        return self._s.read_master(bucket)

    def full_master(self, bucket):
        """Bucket `bucket`'s whole fp32 master (padded_numel values, every
        parameter at its "offset" of layout()), from every rank's shard.
        Collective: every rank calls it, in the same order, between steps."""
        return self._s.full_master(bucket)

    def all_reduce(self, values):
        """The sums over ranks of a list of floats (collective, in fp32)."""
        return self._s.all_reduce([float(v) for v in values])
