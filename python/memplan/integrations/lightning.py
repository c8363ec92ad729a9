"""``MemplanLightningCallback``: a Lightning ``Callback`` that checks the run it is attached to.

    from memplan.integrations.lightning import MemplanLightningCallback
    trainer = L.Trainer(precision="bf16-mixed", callbacks=[MemplanLightningCallback(seq_len=2048)])

At fit start (before the first step) it reads the Trainer (precision, accumulate_grad_batches,
world size, the DeepSpeed or FSDP strategy), the LightningModule's transformers model
(``module.model`` or the module itself: config, dtype, PEFT, quantization) and the batch size
(``datamodule.batch_size``, ``module.hparams.batch_size``, or ``batch_size=``), then predicts as
the transformers callback does (memplan.integrations.transformers).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ._common import Monitor, MemplanWontFit, model_arguments

try:
    from lightning.pytorch import Callback as _Base
except ImportError:  # pragma: no cover - depends on the environment
    try:
        from pytorch_lightning import Callback as _Base
    except ImportError:
        _Base = object

__all__ = ["MemplanLightningCallback", "MemplanWontFit", "trainer_arguments"]

# Lightning's precision names (Trainer(precision=...)) to memplan's flags.
_PRECISION = {
    "bf16-mixed": {"bf16": True}, "bf16": {"bf16": True},
    "16-mixed": {"fp16": True}, "16": {"fp16": True},
    "bf16-true": {"torch_dtype": "bfloat16"}, "16-true": {"torch_dtype": "float16"},
    "32-true": {}, "32": {},
}


def _batch_size(trainer: Any, module: Any) -> Optional[int]:
    for holder in (getattr(trainer, "datamodule", None), module):
        for name in ("batch_size", "train_batch_size"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and value > 0:
                return value
    hparams = getattr(module, "hparams", None) or {}
    value = hparams.get("batch_size") if isinstance(hparams, dict) else getattr(hparams, "batch_size", None)
    return value if isinstance(value, int) and value > 0 else None


def trainer_arguments(trainer: Any, module: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    precision = str(getattr(trainer, "precision", "32-true"))
    out.update(_PRECISION.get(precision, {}))
    accumulate = getattr(trainer, "accumulate_grad_batches", 1)
    if isinstance(accumulate, int) and accumulate > 1:
        out["grad_accum"] = accumulate
    world = getattr(trainer, "world_size", 1)
    if isinstance(world, int) and world > 1:
        out["num_gpus"] = world
    strategy = getattr(trainer, "strategy", None)
    name = type(strategy).__name__.lower() if strategy is not None else ""
    if "deepspeed" in name:
        stage = (getattr(strategy, "config", None) or {}).get("zero_optimization", {}).get("stage")
        if stage is not None:
            out["zero_stage"] = int(stage)
    elif "fsdp" in name:
        sharding = str(getattr(strategy, "sharding_strategy", "FULL_SHARD")).lower().split(".")[-1]
        out["fsdp"] = sharding if sharding in ("full_shard", "shard_grad_op", "hybrid_shard") else "full_shard"
    batch = _batch_size(trainer, module)
    if batch:
        out["batch"] = batch
    return out


class MemplanLightningCallback(_Base):
    def __init__(self, *, gpu: Optional[str] = None, gpu_memory: Optional[str] = None, seq_len: Optional[int] = None,
                 batch_size: Optional[int] = None, warn_at: float = 0.9, steps: int = 3, save: bool = False,
                 on_fail: str = "raise", extra: Optional[Dict[str, Any]] = None):
        extra = dict(extra or {})
        if seq_len:
            extra["seq_len"] = seq_len
        if batch_size:
            extra["batch"] = batch_size
        self.monitor = Monitor(gpu=gpu, gpu_memory=gpu_memory, warn_at=warn_at, steps=steps, save=save,
                               on_fail=on_fail, extra=extra)

    def on_fit_start(self, trainer, pl_module):
        model = getattr(pl_module, "model", None) or pl_module
        arguments = trainer_arguments(trainer, pl_module)
        arguments.update(model_arguments(model, self.monitor.workdir))
        if not self.monitor.predict(arguments):
            trainer.should_stop = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.monitor.record_step(int(getattr(trainer, "global_step", batch_idx + 1)))
