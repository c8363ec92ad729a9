"""``MemplanCallback``: a ``transformers.TrainerCallback`` that checks the run it is attached to.

    from memplan.integrations.transformers import MemplanCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemplanCallback(seq_len=2048)])

At train start (before the first step) it reads the real ``TrainingArguments`` (batch,
accumulation, precision, checkpointing, optimizer, world size, DeepSpeed/FSDP), the model
(config, dtype, PEFT adapters, bitsandbytes quantization) and the GPU torch sees, predicts the
peak, and raises ``MemplanWontFit`` with the fix (``on_fail="raise"``, the default), stops the
run (``"stop"``) or warns (``"warn"``) when it will not fit; it warns when the peak is above
``warn_at`` of the budget. In the first ``steps`` steps it records
``torch.cuda.max_memory_allocated()``/``max_memory_reserved()`` beside the prediction
(``callback.monitor.records``); with ``save=True`` it adds the run to the calibration store that
``memplan calibrate`` fits from.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ._common import Monitor, MemplanWontFit, model_arguments

try:  # the real base class when transformers is installed; the callback protocol is duck-typed
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object

__all__ = ["MemplanCallback", "MemplanWontFit", "training_arguments"]


def _value(x: Any) -> Any:
    return getattr(x, "value", x)  # enums (OptimizerNames, FSDPOption) to their strings


def training_arguments(args: Any, workdir: str) -> Dict[str, Any]:
    """memplan's arguments for a ``TrainingArguments`` (or TRL's SFTConfig/DPOConfig/GRPOConfig)."""
    out: Dict[str, Any] = {}
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    if g("per_device_train_batch_size"):
        out["batch"] = int(g("per_device_train_batch_size"))
    if g("gradient_accumulation_steps"):
        out["grad_accum"] = int(g("gradient_accumulation_steps"))
    for name in ("max_length", "max_seq_length"):  # TRL's configs
        if g(name):
            out["seq_len"] = int(g(name))
            break
    if g("bf16"):
        out["bf16"] = True
    elif g("fp16"):
        out["fp16"] = True
    if g("gradient_checkpointing"):
        out["gradient_checkpointing"] = True
        kwargs = g("gradient_checkpointing_kwargs") or {}
        if "use_reentrant" in kwargs:
            out["use_reentrant"] = "true" if kwargs["use_reentrant"] else "false"
    if g("optim") is not None:
        out["optim"] = str(_value(g("optim")))
    world = g("world_size")
    if isinstance(world, int) and world > 1:
        out["num_gpus"] = world
    deepspeed = g("deepspeed")
    if isinstance(deepspeed, (str, os.PathLike)) and deepspeed:
        out.setdefault("config", []).append(os.fspath(deepspeed))
    elif isinstance(deepspeed, dict):
        import json
        path = os.path.join(workdir, "deepspeed.json")
        with open(path, "w") as f:
            json.dump(deepspeed, f)
        out.setdefault("config", []).append(path)
    fsdp = g("fsdp")
    words = fsdp.split() if isinstance(fsdp, str) else [str(_value(w)) for w in (fsdp or [])]
    for strategy in ("full_shard", "shard_grad_op", "hybrid_shard"):
        if strategy in words:
            out["fsdp"] = strategy
    if "offload" in words:
        out["offload_params"] = True
    fsdp_config = g("fsdp_config") or {}
    if isinstance(fsdp_config, dict) and str(fsdp_config.get("fsdp_version", fsdp_config.get("version", ""))) == "2":
        out["fsdp_version"] = 2
    return out


class MemplanCallback(_Base):
    def __init__(self, *, gpu: Optional[str] = None, gpu_memory: Optional[str] = None, seq_len: Optional[int] = None,
                 warn_at: float = 0.9, steps: int = 3, save: bool = False, on_fail: str = "raise",
                 extra: Optional[Dict[str, Any]] = None):
        extra = dict(extra or {})
        if seq_len:
            extra["seq_len"] = seq_len
        self.monitor = Monitor(gpu=gpu, gpu_memory=gpu_memory, warn_at=warn_at, steps=steps, save=save,
                               on_fail=on_fail, extra=extra)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        arguments = training_arguments(args, self.monitor.workdir)
        arguments.update(model_arguments(model, self.monitor.workdir))
        if not self.monitor.predict(arguments):
            control.should_training_stop = True
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.monitor.record_step(int(getattr(state, "global_step", len(self.monitor.records) + 1)))
        return control
