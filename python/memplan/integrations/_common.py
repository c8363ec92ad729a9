"""What the transformers and Lightning callbacks share: reading a model (config, dtype, PEFT,
quantization), the GPU torch sees, the prediction and its verdict, the measured peaks of the
first steps, and saving them to the calibration store ``memplan calibrate`` reads."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from typing import Any, Dict, List, Optional

import memplan
from memplan import _memplan


class MemplanWontFit(memplan.MemplanError):
    """Raised at train start, before the first step, when the run will not fit the GPU."""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def unwrap_model(model: Any) -> Any:
    """The transformers model inside a PEFT or DDP wrapper (``.get_base_model()``, ``.module``)."""
    seen = 0
    while model is not None and seen < 8:
        seen += 1
        if hasattr(model, "get_base_model") and callable(model.get_base_model):
            inner = model.get_base_model()
            if inner is not model:
                model = inner
                continue
        if hasattr(model, "module") and not hasattr(model, "config"):
            model = model.module
            continue
        break
    return model


def _config_dict(config: Any) -> Dict[str, Any]:
    if config is None:
        return {}
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    if isinstance(config, dict):
        return dict(config)
    return {k: v for k, v in vars(config).items() if not k.startswith("_")}


def _dtype_name(dtype: Any) -> Optional[str]:
    if dtype is None:
        return None
    name = str(dtype).replace("torch.", "")
    return name if name in ("float32", "bfloat16", "float16") else None


def model_arguments(model: Any, workdir: str) -> Dict[str, Any]:
    """memplan's arguments for a model object: its config.json (written to ``workdir``), the dtype
    its weights are in, its LoRA adapters and its bitsandbytes quantization."""
    args: Dict[str, Any] = {}
    peft_config = _get(model, "peft_config")
    base = unwrap_model(model)
    config = _get(base, "config")
    cfg = _config_dict(config)
    if cfg:
        path = os.path.join(workdir, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f, default=str)
        args["model"] = path
    dtype = _dtype_name(_get(base, "dtype")) or _dtype_name(cfg.get("torch_dtype"))
    if dtype:
        args["torch_dtype"] = dtype
    if isinstance(peft_config, dict) and peft_config:
        lora = next(iter(peft_config.values()))
        args["use_peft"] = True
        for key, flag in (("r", "lora_r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout")):
            value = _get(lora, key)
            if value is not None:
                args[flag] = value
        targets = _get(lora, "target_modules")
        if isinstance(targets, str):
            args["lora_target_modules"] = [targets]
        elif targets:
            args["lora_target_modules"] = sorted(str(t) for t in targets)
    quant = cfg.get("quantization_config") or _config_dict(_get(config, "quantization_config"))
    if _get(quant, "load_in_4bit") or _get(base, "is_loaded_in_4bit"):
        args["load_in_4bit"] = True
        if _get(quant, "bnb_4bit_quant_type"):
            args["bnb_4bit_quant_type"] = _get(quant, "bnb_4bit_quant_type")
        if _get(quant, "bnb_4bit_use_double_quant"):
            args["bnb_4bit_use_double_quant"] = True
    elif _get(quant, "load_in_8bit") or _get(base, "is_loaded_in_8bit"):
        args["load_in_8bit"] = True
    return args


def detected_gpu() -> Optional[Dict[str, Any]]:
    """The GPU torch will train on: its name and total memory, or None without CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811
        except ImportError:
            return None
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {"name": props.name, "total_memory": int(props.total_memory), "index": index}


def gpu_arguments(gpu: Optional[str], gpu_memory: Optional[str]) -> Dict[str, Any]:
    """An explicit gpu= / gpu_memory= wins; else the device torch sees, by its driver name, or by
    its memory when no profile has that name; else nothing (the check is skipped)."""
    if gpu:
        return {"gpu": gpu}
    if gpu_memory:
        return {"gpu_memory": gpu_memory}
    found = detected_gpu()
    if found is None:
        return {}
    # The driver's name finds the profile (its usable memory, bf16 support); Monitor._estimate
    # falls back to the memory torch reports when no profile has that name.
    return {"gpu": found["name"], "_fallback_gpu_memory": f"{found['total_memory'] // (1 << 20)}MiB"}


class Monitor:
    """The prediction for one run and what its first steps measured."""

    def __init__(self, *, gpu: Optional[str] = None, gpu_memory: Optional[str] = None, warn_at: float = 0.9,
                 steps: int = 3, save: bool = False, on_fail: str = "raise", extra: Optional[Dict[str, Any]] = None):
        if on_fail not in ("raise", "stop", "warn"):
            raise ValueError("on_fail must be 'raise', 'stop' or 'warn'")
        self.gpu = gpu
        self.gpu_memory = gpu_memory
        self.warn_at = warn_at
        self.steps = steps
        self.save = save
        self.on_fail = on_fail
        self.extra = dict(extra or {})
        self.arguments: Dict[str, Any] = {}
        self.prediction: Optional[memplan.Result] = None
        self.fix: Optional[memplan.Result] = None
        self.message = ""
        self.records: List[Dict[str, Any]] = []
        self._workdir = tempfile.TemporaryDirectory(prefix="memplan-")

    @property
    def workdir(self) -> str:
        return self._workdir.name

    def _estimate(self, arguments: Dict[str, Any]) -> memplan.Result:
        fallback = arguments.pop("_fallback_gpu_memory", None)
        try:
            return memplan.estimate(args=arguments)
        except memplan.MemplanError as e:
            if fallback is None or "gpu" not in arguments or e.kind != "run":
                raise
            arguments.pop("gpu")
            arguments["gpu_memory"] = fallback
            return memplan.estimate(args=arguments)

    def predict(self, arguments: Dict[str, Any]) -> bool:
        """Predicts; returns False when training should not start (on_fail="stop"), raises
        MemplanWontFit (on_fail="raise"), or warns."""
        arguments = {**arguments, **self.extra}
        arguments.update({k: v for k, v in gpu_arguments(self.gpu, self.gpu_memory).items() if k not in arguments})
        self.prediction = self._estimate(arguments)
        arguments.pop("_fallback_gpu_memory", None)
        self.arguments = arguments
        fit = self.prediction.get("fit")
        peak = self.prediction["estimate"]["peak_bytes"]
        if not fit:
            self.message = f"memplan: predicted peak {peak / 2**30:.2f} GiB (no GPU to compare with)"
            return True
        budget = fit["budget_bytes"]
        if fit["fits"]:
            if peak > self.warn_at * budget:
                self.message = (f"memplan: predicted peak {peak / 2**30:.2f} GiB is {100 * peak / budget:.0f}% of the "
                                f"{budget / 2**30:.2f} GiB budget: little room left")
                warnings.warn(self.message, stacklevel=3)
            else:
                self.message = f"memplan: fits: predicted peak {peak / 2**30:.2f} GiB <= budget {budget / 2**30:.2f} GiB"
            return True
        self.fix = memplan.plan(args=arguments)
        self.message = self._fix_message(peak, budget)
        if self.on_fail == "raise":
            raise MemplanWontFit(self.message, exit_code=1, kind="does-not-fit", text=self.message)
        warnings.warn(self.message, stacklevel=3)
        return self.on_fail == "warn"

    def _fix_message(self, peak: int, budget: int) -> str:
        lines = [f"memplan: this run will not fit: predicted peak {peak / 2**30:.2f} GiB > budget "
                 f"{budget / 2**30:.2f} GiB"]
        rec = self.fix.get("recommendation", {}) if self.fix else {}
        if rec.get("fits"):
            lines.append(f"fix: per_device_train_batch_size={rec['micro_batch']}, "
                         f"gradient_accumulation_steps={rec['grad_accum']} keeps the global batch "
                         f"{rec['global_batch']} (flags: --batch {rec['micro_batch']} --grad-accum {rec['grad_accum']})")
        else:
            for s in (self.fix or {}).get("suggestions", []):
                if s.get("fits"):
                    lines.append(f"fix: {s['description']} (flags: {s['flags']})")
                    break
            else:
                lines.append("no single change fits; see `memplan plan` for the ranked changes")
        return "\n".join(lines)

    def record_step(self, step: int) -> None:
        """max_memory_allocated()/reserved() after one of the first steps, beside the prediction."""
        if len(self.records) >= self.steps:
            return
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return
        record = {"step": step, "max_memory_allocated": int(torch.cuda.max_memory_allocated()),
                  "max_memory_reserved": int(torch.cuda.max_memory_reserved())}
        if self.prediction is not None:
            record["predicted_peak_bytes"] = self.prediction["estimate"]["peak_bytes"]
            record["predicted_reserved_bytes"] = self.prediction["estimate"].get("reserved_bytes")
        self.records.append(record)
        if self.save and len(self.records) == self.steps:
            self.save_records()

    def save_records(self) -> None:
        """Appends the largest measured peak to the calibration store (``memplan calibrate``)."""
        if not self.records or self.prediction is None:
            return
        measured = max(r["max_memory_allocated"] for r in self.records)
        gpu = detected_gpu()
        _memplan.save_measurement(json.dumps({
            "gpu": self.arguments.get("gpu") or (gpu["name"] if gpu else "none"),
            "watch": "torch",
            "model": str(self.arguments.get("model", "")),
            "method": "lora" if self.arguments.get("use_peft") else "sft",
            "config": "",
            "command": "memplan callback",
            "micro_batch": int(self.arguments.get("batch", 1)),
            "grad_accum": int(self.arguments.get("grad_accum", 1)),
            "seq_len": int(self.arguments.get("seq_len", 0)),
            "measured_bytes": measured,
            "predicted_bytes": self.prediction["estimate"]["peak_bytes"],
        }))
