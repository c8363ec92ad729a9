"""torchtitan's per-op selective activation checkpointing, emulated on torch 1.13.

torch >= 2.4 has torch.utils.checkpoint.create_selective_checkpoint_contexts; Debian's torch 1.13
has neither it nor checkpoint's context_fn, but it has what they are built from: TorchDispatchMode
and non-reentrant checkpointing (saved_tensors_hooks). This file rebuilds the two modes with the
same memory behaviour (pytorch/pytorch torch/utils/checkpoint.py, _CachingTorchDispatchMode and
_CachedTorchDispatchMode, v2.4.0 on):

- forward: every op runs; the output of an op the policy marks MUST_SAVE is stored, detached (an
  alias: the same storage, no copy), in a per-op list of a storage dict;
- recomputation (the first unpack of a saved tensor in backward reruns the function): an op the
  policy marks MUST_SAVE does not run, it pops (list.pop(0)) the stored output instead; every
  other op runs again.

The storage dict is reachable only from the checkpoint's closures (as torch's is from the
recompute context), so it lives until the layer's graph is freed, and each entry until it is
popped. The checkpoint itself is torch 1.13's non-reentrant one (what memplan's simulator models).

The policy is torchtitan's _get_custom_policy (pytorch/torchtitan
torchtitan/distributed/activation_checkpoint.py at 25413d224, and parallelize_llama.py before it):
save the outputs of the ops in _save_list, except every second aten.mm, counting mm calls per
checkpoint call, forward and recomputation separately. The CUDA attention kernels in the list never
run on the CPU (eager attention here).
"""
from collections import defaultdict

import torch
import torch.utils.checkpoint
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

# torchtitan's _save_list, by name (the c10d and CUDA-only ops do not exist in torch 1.13's CPU build).
SAVE_LIST_NAMES = (
    "aten::mm",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention",
    "_c10d_functional::reduce_scatter_tensor",
    "aten::max",
)
MM = torch.ops.aten.mm.default
DETACH = torch.ops.aten.detach.default


def _in_save_list(func):
    return func.name() in SAVE_LIST_NAMES and func._overloadname == "default"


def torchtitan_policy(meta):
    """_custom_policy: True is MUST_SAVE, False PREFER_RECOMPUTE."""
    def policy(is_recompute, func):
        key = ("recompute" if is_recompute else "forward") + "_mm_count"
        if func == MM:
            meta[key] += 1
        return _in_save_list(func) and not (func == MM and meta[key] % 2 == 0)
    return policy


class CachingMode(TorchDispatchMode):
    def __init__(self, policy, storage):
        super().__init__()
        self.policy, self.storage = policy, storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.policy(False, func):
            self.storage[func].append(tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, out))
        return out


class CachedMode(TorchDispatchMode):
    def __init__(self, policy, storage):
        super().__init__()
        self.policy, self.storage = policy, storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func == DETACH and not isinstance(args[0], torch.Tensor):
            # torch 1.13's inner pack hook detaches each saved tensor under this mode, and a
            # wrapped number (x * 0.125's scalar) reaches the mode as a Python float: the 0-dim
            # double it stood for (8 bytes; same type promotion).
            return torch.tensor(args[0], dtype=torch.float64)
        if self.policy(True, func):
            return self.storage[func].pop(0)
        return func(*args, **(kwargs or {}))


def checkpoint(function, *args):
    """checkpoint(function, *args, use_reentrant=False, context_fn=selective_checkpointing_context_fn)."""
    meta = defaultdict(int)      # selective_checkpointing_context_fn: one per checkpoint call
    storage = defaultdict(list)
    policy = torchtitan_policy(meta)
    calls = [0]

    def run(*a):
        calls[0] += 1
        with (CachingMode if calls[0] == 1 else CachedMode)(policy, storage):
            return function(*a)
    return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False)
