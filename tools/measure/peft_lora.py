"""LoRA adapters following PEFT's lora.Linear (peft/tuners/lora/layer.py, 2026):

    result = base_layer(x)
    x = x.to(lora_A.weight.dtype)            # _cast_input_dtype
    result = result + lora_B(lora_A(dropout(x))) * scaling
    result = result.to(torch_result_dtype)

Adapters are created in float32: PEFT's get_peft_model(autocast_adapter_dtype=True) upcasts bf16/fp16
adapter weights to fp32. Dropout is nn.Dropout(p) when p > 0, else nn.Identity. The base weights
are frozen; modules_to_save are trained in full (PEFT keeps a trainable copy of the module).
"""
import math

import torch
import torch.nn as nn

# PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["llama"]
DEFAULT_TARGETS = ["q_proj", "v_proj"]


class LoraLinear(nn.Module):
    def __init__(self, base_layer, r, alpha, dropout):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False, dtype=torch.float32)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False, dtype=torch.float32)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.lora_dropout = nn.Dropout(p=dropout) if dropout > 0.0 else nn.Identity()
        self.scaling = alpha / r
        self.disable_adapters = False

    def forward(self, x):
        if self.disable_adapters:  # PeftModel.disable_adapter(): the base layer alone
            return self.base_layer(x)
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        if x.dtype != self.lora_A.weight.dtype:
            x = x.to(dtype=self.lora_A.weight.dtype)
        result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        result = result.to(torch_result_dtype)
        return result


class ModulesToSaveWrapper(nn.Module):
    """peft.utils.other.ModulesToSaveWrapper: the original module stays (frozen) and a trainable
    deep copy is used in forward."""

    def __init__(self, module):
        super().__init__()
        import copy
        self.original_module = module
        self.modules_to_save = copy.deepcopy(module)
        for p in self.original_module.parameters():
            p.requires_grad_(False)
        for p in self.modules_to_save.parameters():
            p.requires_grad_(True)

    def forward(self, *args, **kwargs):
        return self.modules_to_save(*args, **kwargs)


def linear_names(model):
    """PEFT 'all-linear': every nn.Linear except the output layer (lm_head)."""
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not name.endswith("lm_head"):
            names.add(name.split(".")[-1])
    return sorted(names)


def apply_lora(model, r, alpha, dropout, target_modules, modules_to_save=()):
    """Freeze the model, replace target Linear modules by LoraLinear, unfreeze modules_to_save."""
    for p in model.parameters():
        p.requires_grad_(False)
    if target_modules == "all-linear":
        targets = set(linear_names(model))
    else:
        targets = set(target_modules or DEFAULT_TARGETS)
    replaced = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in targets and not child_name == "lm_head":
                setattr(module, child_name, LoraLinear(child, r, alpha, dropout))
                replaced += 1
    if replaced == 0:
        raise ValueError(f"no module matched target_modules={target_modules}")
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in modules_to_save:
                setattr(module, child_name, ModulesToSaveWrapper(child))
    return model


class disable_adapter:
    """PeftModel.disable_adapter(): run the base model (the DPO/GRPO reference under PEFT)."""

    def __init__(self, model):
        self.layers = [m for m in model.modules() if isinstance(m, LoraLinear)]

    def __enter__(self):
        for m in self.layers:
            m.disable_adapters = True

    def __exit__(self, *exc):
        for m in self.layers:
            m.disable_adapters = False
