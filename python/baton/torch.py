"""baton.torch: a PyTorch nn.Module trained under baton's schedule.

    sharded = baton.torch.shard(model, units=[model.embed, *model.blocks,
                                              model.norm, model.head],
                                config=baton_model_dict, policy="baton")
    for batch in data:
        loss = loss_fn(sharded(batch))     # forward: hooks gather each unit
        loss.backward()                    # backward: gathers, reduces
        sharded.step()                     # baton's AdamW on the shards

shard() takes the model's parameters out of it: baton owns every parameter
and gradient (its layout, scheduler/layout.h; each rank keeps its shard of
the fp32 master and optimizer state) and issues every gather, reduce and
copy. Forward pre/post hooks on each unit call Session.pre_forward /
post_forward and put the gathered views (torch.from_dlpack, no copy) in the
unit's modules for its forward; an autograd boundary on each unit's output
calls pre_backward when the unit's backward starts, and the unit's weights
enter autograd through one function whose backward writes their gradients
into baton's buffers (= or += as the plan says) and calls post_backward.
Weights autograd saves are kept as references (saved-tensor hooks) and
re-resolved to the backward's gathered view, so nothing holds a gathered
buffer from forward to backward beyond what the plan holds. Activations are
PyTorch's own (a policy's recompute flag changes nothing here: autograd
keeps what the forward saved).

Units: baton's (embedding, block0 .. blockL-1, final_norm, lm_head), one
nn.Module each, in forward order; each unit's parameters are matched to
baton's by shape, in declaration order (a Hugging Face LlamaDecoderLayer
and a module declared in baton's order both match). llama_units(model)
finds them in Hugging Face-style Llama modules.

Micro-steps: with a policy of micro_steps = k, run k forward/backward passes
(each on its slice of the batch), then step(). Gradients are summed over
ranks and micro-steps and scaled by 1 / (ranks x k) (a mean, as one big
batch with a mean loss gives).

CPU (host memory) only today; works with PyTorch >= 1.13 (from_dlpack and
saved-tensor hooks). One Python thread drives a sharded model.
"""
import json as _json

import torch
from torch.autograd.graph import saved_tensors_hooks

import baton as _baton

__all__ = ["shard", "ShardedModule", "llama_units"]


def llama_units(model):
    """The units of a Hugging Face-style Llama (LlamaForCausalLM:
    model.model.embed_tokens, model.model.layers, model.model.norm,
    model.lm_head), in forward order."""
    inner = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm")
    if inner is None or not all(hasattr(inner, p) for p in parts) or not hasattr(model, "lm_head"):
        raise ValueError("baton.torch.llama_units: not a Hugging Face-style Llama (needs "
                         "model.model.embed_tokens, .layers, .norm and model.lm_head)")
    return [inner.embed_tokens, *inner.layers, inner.norm, model.lm_head]


class _UnitParams(torch.autograd.Function):
    """Forward: the unit's gathered weights as tensors of the graph.
    Backward (once every use of them has its gradient): writes the
    gradients into baton's buffers, then post_backward."""

    @staticmethod
    def forward(ctx, sharded, unit, anchor, *views):
        ctx.sharded, ctx.unit = sharded, unit
        return tuple(v.view(v.shape) for v in views)

    @staticmethod
    def backward(ctx, *grads):
        ctx.sharded._write_grads(ctx.unit, grads)
        return (None, None, None) + (None,) * len(grads)


class _Boundary(torch.autograd.Function):
    """Identity on a unit's output; its backward (the unit's backward
    about to start) calls pre_backward."""

    @staticmethod
    def forward(ctx, sharded, unit, x):
        ctx.sharded, ctx.unit = sharded, unit
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.sharded._pre_backward(ctx.unit)
        return None, None, grad


class ShardedModule(torch.nn.Module):
    """The model under baton (made by shard()). Call it as the model; call
    step() after the last micro-step's backward. `session` is the
    baton.Session underneath."""

    def __init__(self, model, units, session, optimizer):
        super().__init__()
        self.module = model
        self.session = session
        self.optimizer = optimizer
        self._units = list(units)
        self._owners = []     # per unit, per baton param: [(module, attr), ...]
        self._layout = session.layout()
        self._fwd = {}        # unit -> the forward's weight tensors
        self._bwd = {}        # unit -> (weights, grads, grad_accumulate)
        self._hooks_ctx = None
        self._open = False    # a step is open (begin_step called)
        self._tensors = {}    # (data_ptr, shape, dtype) -> tensor over baton memory
        self._anchor = torch.zeros((), requires_grad=True)
        self._broken = ""     # why the step cannot go on
        self._handles = []
        for u, m in enumerate(self._units):
            self._handles.append(m.register_forward_pre_hook(self._make_pre(u)))
            self._handles.append(m.register_forward_hook(self._make_post(u)))

    def forward(self, *args, **kwargs):
        if self._broken:
            raise RuntimeError(f"baton.torch: {self._broken}; the step cannot go on: shard the "
                               "model again")
        if not torch.is_grad_enabled():
            raise RuntimeError("baton.torch: a forward under torch.no_grad() is not supported: "
                               "baton's plan is a training step (forward, then backward, then "
                               "step())")
        try:
            return self.module(*args, **kwargs)
        except BaseException as e:
            # A unit's forward failed between its hooks: leave no saved-tensor
            # hooks behind, and refuse the rest of this session's step.
            if self._hooks_ctx is not None:
                self._hooks_ctx.__exit__(None, None, None)
                self._hooks_ctx = None
            self._broken = f"a forward failed ({type(e).__name__}: {e})"
            raise

    # -- the step ---------------------------------------------------------
    def step(self):
        """Finishes the step: the remaining reduces and the optimizer on
        the shards. Call after the last micro-step's backward."""
        if not self._open:
            raise RuntimeError("baton.torch: step() with no step open (run forward and backward "
                               "first)")
        self._open = False
        self.session.finish_step(self.optimizer)

    # -- views --------------------------------------------------------------
    def _tensor(self, view):
        """A torch tensor over a baton.Tensor's memory (cached: the plan's
        buffers stay at fixed places, so views recur)."""
        key = (view.data_ptr, tuple(view.shape), view.dtype)
        t = self._tensors.get(key)
        if t is None:
            t = torch.from_dlpack(view)
            self._tensors[key] = t
        return t

    def _make_pre(self, u):
        def pre(module, inputs):
            for name, p in module.named_parameters():
                raise ValueError(f"baton.torch: unit {u} ({self._unit_name(u)}) has a parameter "
                                 f"{name} {list(p.shape)} set after shard(): baton owns the "
                                 "unit's parameters (shard the model again to change them)")
            if u == 0 and not self._open:
                self.session.begin_step()
                self._open = True
            views = self.session.pre_forward(u)
            tensors = [self._tensor(v) for v in views.params]
            weights = _UnitParams.apply(self, u, self._anchor, *tensors)
            self._fwd[u] = tensors
            for w, owners in zip(weights, self._owners[u]):
                for m, attr in owners:
                    setattr(m, attr, w)
            self._hooks_ctx = saved_tensors_hooks(self._pack, self._unpack)
            self._hooks_ctx.__enter__()
            self._packing = u
        return pre

    def _make_post(self, u):
        def post(module, inputs, output):
            if not isinstance(output, torch.Tensor):
                raise ValueError(f"baton.torch: unit {u} ({self._unit_name(u)}) returned "
                                 f"{type(output).__name__}; a unit must return one tensor")
            out = _Boundary.apply(self, u, output)
            self._hooks_ctx.__exit__(None, None, None)
            self._hooks_ctx = None
            for owners in self._owners[u]:
                for m, attr in owners:
                    setattr(m, attr, None)  # stale after post_forward
            del self._fwd[u]
            self.session.post_forward(u)
            return out
        return post

    def _unit_name(self, u):
        return self._layout["units"][u]["name"]

    # saved-tensor hooks: a weight of the unit being run is saved as (unit,
    # index, size, stride, offset) and rebuilt over the backward's view.
    def _pack(self, t):
        u = self._packing
        ptr = t.data_ptr()
        for i, w in enumerate(self._fwd.get(u, ())):
            base = w.data_ptr()
            if t.dtype == w.dtype and base <= ptr < base + w.numel() * w.element_size():
                return (u, i, t.size(), t.stride(), (ptr - base) // w.element_size())
        return t

    def _unpack(self, saved):
        if isinstance(saved, torch.Tensor):
            return saved
        u, i, size, stride, offset = saved
        if u not in self._bwd:
            raise RuntimeError(f"baton.torch: a weight of {self._unit_name(u)} is needed "
                               "outside its backward (is the unit's output used twice?)")
        return torch.as_strided(self._bwd[u][0][i], size, stride, offset)

    def _pre_backward(self, u):
        views = self.session.pre_backward(u)
        weights = [self._tensor(v) for v in views.params]
        grads = [self._tensor(g) if g.name else None for g in views.grads]
        self._bwd[u] = (weights, grads, list(views.grad_accumulate))

    def _write_grads(self, u, grads):
        if u not in self._bwd:
            raise RuntimeError(f"baton.torch: the gradients of {self._unit_name(u)} arrived "
                               "before its backward started")
        _, slots, accumulate = self._bwd.pop(u)
        with torch.no_grad():
            for g, slot, acc in zip(grads, slots, accumulate):
                if slot is None:
                    continue  # frozen: no gradient
                if g is None:
                    if not acc:
                        slot.zero_()
                elif acc:
                    slot.add_(g)
                else:
                    slot.copy_(g)
        self.session.post_backward(u)


def _unique_params(module):
    seen, out = set(), []
    for name, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def _match_unit(u, uname, torch_params, baton_params):
    """baton's params of unit u matched to the unit's torch params by shape,
    in order: the torch Parameter for each baton param."""
    if len(torch_params) != len(baton_params):
        raise ValueError(
            f"baton.torch.shard: unit {u} ({uname}) has {len(torch_params)} parameters "
            f"({', '.join(n for n, _ in torch_params) or 'none'}); baton's layout has "
            f"{len(baton_params)} ({', '.join(p['name'] for p in baton_params)})")
    used, out = set(), []
    for bp in baton_params:
        shape = tuple(bp["shape"])
        for j, (name, p) in enumerate(torch_params):
            if j not in used and tuple(p.shape) == shape:
                used.add(j)
                out.append(p)
                break
        else:
            have = ", ".join(f"{n} {list(p.shape)}" for n, p in torch_params)
            raise ValueError(f"baton.torch.shard: unit {u} ({uname}): no parameter of shape "
                             f"{list(shape)} for {bp['name']} (the unit has {have})")
    return out


def _config(model, config):
    if config is not None:
        return config
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    raise ValueError("baton.torch.shard needs config=: a preset name, a dict as baton.model() "
                     "returns, or a Hugging Face config dict (the model has no .config)")


def shard(model, units, policy="baton", config=None, optimizer=None, dtype="f32",
          backend="auto", timeout_s=300.0, session=None):
    """Shards `model`'s parameters into baton's layout and returns the
    ShardedModule to train.

    units: the model's units as nn.Modules in forward order (embedding,
    every block, final norm, head); config: the model's shape (a preset
    name, a dict as baton.model() returns, or a Hugging Face config dict;
    default model.config); policy: a preset name, a policy file (.json) or
    a policy dict; optimizer: a baton.AdamW (default baton.AdamW()) or a
    callable run on each bucket's shard views (Session.finish_step); dtype:
    the parameter and reduce dtype ('f32'; CPU PyTorch computes in fp32).
    Ranks come from the launch environment (baton.Session), or session= is
    one made for the model (e.g. a rank of baton.Session.inproc(n, config,
    policy, dtype="f32"), one thread per rank; policy and config are then
    the session's). The model's
    current parameter values are the starting point, on every rank alike.
    ValueError for a unit list that misses a parameter of the model or does
    not match the config.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"baton.torch.shard: model must be a torch.nn.Module, got "
                         f"{type(model).__name__}")
    if not isinstance(units, (list, tuple)) or not all(isinstance(m, torch.nn.Module)
                                                      for m in units):
        raise ValueError("baton.torch.shard: units must be a list of the model's nn.Modules")
    if optimizer is None:
        optimizer = _baton.AdamW()
    if not (isinstance(optimizer, _baton.AdamW) or callable(optimizer)):
        raise ValueError(f"baton.torch.shard: optimizer must be a baton.AdamW or a callable "
                         f"optimizer(shard) (Session.finish_step), got "
                         f"{type(optimizer).__name__}")
    if dtype != "f32":
        raise ValueError(f"baton.torch.shard: dtype must be 'f32' (CPU), got {dtype!r}")
    members = {id(m) for m in model.modules()}
    for m in units:
        if id(m) not in members:
            raise ValueError(f"baton.torch.shard: unit {type(m).__name__} is not a submodule "
                             "of the model")
    pipeline = ("baton.torch.shard runs data-parallel sessions; a pipeline stage "
                "(pipeline_parallel > 1) is driven with baton.Session's hooks")
    if session is None:
        pol = _json.loads(_baton._policy_json(policy, dtype, "baton.torch.shard"))
        if pol.get("pipeline_parallel", 1) > 1:
            raise ValueError(pipeline)
        session = _baton.Session(_config(model, config), policy=policy, dtype=dtype,
                                 backend=backend, timeout_s=timeout_s)
    elif not isinstance(session, _baton.Session):
        raise ValueError(f"baton.torch.shard: session must be a baton.Session, got "
                         f"{type(session).__name__}")
    if session.pipeline is not None:
        raise ValueError(pipeline)
    layout = session.layout()
    if len(units) != len(layout["units"]):
        raise ValueError(f"baton.torch.shard: {len(units)} units given; the model's layout has "
                         f"{len(layout['units'])} ("
                         f"{', '.join(u['name'] for u in layout['units'])})")
    matched = [_match_unit(u, layout["units"][u]["name"], _unique_params(m),
                           layout["units"][u]["params"]) for u, m in enumerate(units)]
    covered = {id(p) for ps in matched for p in ps}
    for name, p in model.named_parameters():
        if id(p) not in covered:
            raise ValueError(f"baton.torch.shard: parameter {name} {list(p.shape)} is in no unit")
    values = {}
    for u, ps in enumerate(matched):
        for bp, p in zip(layout["units"][u]["params"], ps):
            values[bp["name"]] = p.detach().to(torch.float32).contiguous().numpy()
    session.init_parameters(lambda name, shape: values[name])
    sharded = ShardedModule(model, units, session, optimizer)
    # Take the parameters out of the modules: baton owns them now.
    for u, (m, ps) in enumerate(zip(units, matched)):
        owners = []
        for p in ps:
            where = [(sub, n) for sub in m.modules() for n, q in sub._parameters.items()
                     if q is p]
            owners.append(where)
        sharded._owners.append(owners)
    for sub in model.modules():
        for n in [n for n, q in sub._parameters.items() if q is not None and id(q) in covered]:
            del sub._parameters[n]
            setattr(sub, n, None)
    return sharded
