"""baton from Python: the simulator, the tuner, models and policies.

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
           "read_policy", "write_policy"]


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
