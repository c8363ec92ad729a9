#!/usr/bin/env python3
"""Generates the CUDA measurement cases for cuda_trainer.py (tests/data/measurements/cuda_cases.json).

Real model shapes from the catalog (configs/models/), trained the way users train them: bf16
weights with --bf16, fp32 weights with --bf16, SDPA (the CUDA default) and eager attention, the
torch.optim implementations Trainer selects on CUDA (foreach, fused), 8-bit optimizers, Adafactor,
gradient checkpointing, LoRA through PEFT and QLoRA through bitsandbytes; DPO and GRPO policy
updates. Usage: cuda_cases.py [--validation] > cases.json
"""
import json
import os

from cases import lora  # the same LoRA settings helper as the CPU cases

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def model(short):
    with open(os.path.join(ROOT, "configs", "models", short + ".json")) as f:
        return json.load(f)["config"]


def case(cid, short, batch, seq, dtype="bfloat16", autocast="bfloat16", optim="adamw_torch", **kw):
    t = {"method": "sft", "batch": batch, "seq_len": seq, "torch_dtype": dtype, "autocast": autocast,
         "optim": optim, "attn_implementation": "sdpa", "device": "cuda"}
    t.update(kw)
    return {"id": cid, "model_name": short, "model": model(short), "training": t}


def all_cases():
    c = []
    L1, Q05, S360, L3, L8, Q3 = "llama-3.2-1b", "qwen2.5-0.5b", "smollm2-360m", "llama-3.2-3b", "llama-3.1-8b", "qwen3-0.6b"
    # Full fine-tuning, bf16 weights + --bf16 (the common setup), optimizer implementations
    c.append(case("l1b-bf16-adamw-b4s512", L1, 4, 512))
    c.append(case("l1b-bf16-adamwfused-b4s512", L1, 4, 512, optim="adamw_torch_fused"))
    c.append(case("l1b-bf16-adamw8bit-b4s512", L1, 4, 512, optim="adamw_8bit"))
    c.append(case("l1b-bf16-adafactor-b4s512", L1, 4, 512, optim="adafactor"))
    c.append(case("l1b-bf16-sgd-b4s512", L1, 4, 512, optim="sgd"))
    c.append(case("l1b-bf16-noac-adamw-b4s512", L1, 4, 512, autocast=None))
    # fp32 weights with --bf16 (Trainer's default dtype when torch_dtype is not given)
    c.append(case("l1b-fp32ac-adamw-b4s512", L1, 4, 512, dtype="float32"))
    c.append(case("l1b-fp32ac-adamwfused-gc-b8s1024", L1, 8, 1024, dtype="float32", optim="adamw_torch_fused",
                  gradient_checkpointing=True))
    c.append(case("l1b-fp32-noac-adamw-b2s512", L1, 2, 512, dtype="float32", autocast=None))
    # batch / sequence / attention implementation / checkpointing
    c.append(case("l1b-bf16-adamw-b1s2048", L1, 1, 2048))
    c.append(case("l1b-bf16-adamw-b16s256", L1, 16, 256))
    c.append(case("l1b-bf16-eager-b2s512", L1, 2, 512, attn_implementation="eager"))
    c.append(case("l1b-bf16-gc-b8s1024", L1, 8, 1024, gradient_checkpointing=True))
    c.append(case("l1b-bf16-gc-b2s4096", L1, 2, 4096, gradient_checkpointing=True))
    c.append(case("l1b-bf16-gc-reentrant-b8s1024", L1, 8, 1024, gradient_checkpointing=True, checkpoint_reentrant=True))
    c.append(case("l1b-bf16-gc-nonreentrant-b8s1024", L1, 8, 1024, gradient_checkpointing=True,
                  checkpoint_reentrant=False))
    # other families: Qwen2 (qkv bias, 152k vocabulary), SmolLM2 (deep, narrow), Qwen3 (q/k norms)
    c.append(case("q05b-bf16-adamw-b8s512", Q05, 8, 512))
    c.append(case("q05b-bf16-gc-b16s1024", Q05, 16, 1024, gradient_checkpointing=True))
    c.append(case("s360m-bf16-adamw-b8s512", S360, 8, 512))
    c.append(case("s360m-fp32ac-gc-b8s1024", S360, 8, 1024, dtype="float32", gradient_checkpointing=True))
    c.append(case("q3-06b-bf16-adamw-b4s1024", Q3, 4, 1024))
    c.append(case("l3b-bf16-adamw-gc-b4s1024", L3, 4, 1024, gradient_checkpointing=True))
    # LoRA (PEFT)
    c.append(case("l1b-bf16-lora-default-b4s512", L1, 4, 512, lora=lora()))
    c.append(case("l1b-bf16-lora-all-r64-b4s512", L1, 4, 512, lora=lora(64, 128, 0.05, "all-linear")))
    c.append(case("l1b-fp32ac-lora-qkvo-b4s512", L1, 4, 512, dtype="float32",
                  lora=lora(16, 32, 0.1, ["q_proj", "k_proj", "v_proj", "o_proj"])))
    c.append(case("l1b-bf16-lora-all-gc-b8s2048", L1, 8, 2048, gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("l8b-bf16-lora-default-b2s512", L8, 2, 512, lora=lora()))
    c.append(case("l8b-bf16-lora-all-gc-b4s1024", L8, 4, 1024, gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, "all-linear")))
    # QLoRA (bitsandbytes NF4)
    c.append(case("l8b-qlora-all-gc-dq-b4s1024", L8, 4, 1024, gradient_checkpointing=True, load_in_4bit=True,
                  bnb_4bit_use_double_quant=True, lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("l8b-qlora-default-b2s512", L8, 2, 512, load_in_4bit=True, lora=lora()))
    c.append(case("l1b-qlora-all-gc-paged8bit-b4s512", L1, 4, 512, gradient_checkpointing=True, load_in_4bit=True,
                  optim="paged_adamw_8bit", lora=lora(16, 32, 0.05, "all-linear")))
    # DPO / GRPO policy updates (trl_steps.py on transformers' model)
    c.append(case("dpo-l1b-bf16-copy-b2s512", L1, 2, 512, method="dpo"))
    c.append(case("dpo-l1b-bf16-lora-gc-b4s512", L1, 4, 512, method="dpo", gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("grpo-l1b-bf16-beta-b8", L1, 8, 768, method="grpo", beta=0.04, max_prompt_length=256,
                  max_completion_length=512))
    c.append(case("grpo-l1b-bf16-lora-nobeta-gc-b16", L1, 16, 768, method="grpo", beta=0.0, max_prompt_length=256,
                  max_completion_length=512, gradient_checkpointing=True, lora=lora(16, 32, 0.05, "all-linear")))
    return c


def validation_cases():
    """Measured after the engine's CUDA rules were fixed against all_cases(), and not used to fit
    anything: other model families and sizes, fp16, padding-free long sequences, DPO/GRPO variants."""
    c = []
    c.append(case("v-q15b-bf16-adamw-b4s1024", "qwen2.5-1.5b", 4, 1024))
    c.append(case("v-q15b-fp32ac-gc-b8s2048", "qwen2.5-1.5b", 8, 2048, dtype="float32", gradient_checkpointing=True))
    c.append(case("v-m7b-bf16-lora-all-gc-b2s2048", "mistral-7b-v0.3", 2, 2048, gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("v-l3b-fp32ac-lora-default-b4s1024", "llama-3.2-3b", 4, 1024, dtype="float32", lora=lora()))
    c.append(case("v-s17b-bf16-adamwfused-gc-b8s1024", "smollm2-1.7b", 8, 1024, optim="adamw_torch_fused",
                  gradient_checkpointing=True))
    c.append(case("v-tl11b-fp32-fp16ac-adamw-b4s1024", "tinyllama-1.1b", 4, 1024, dtype="float32", autocast="float16"))
    c.append(case("v-q17b-bf16-adamw-b2s2048", "qwen3-1.7b", 2, 2048))
    c.append(case("v-l1b-bf16-sgdmom-gc-b8s1024", "llama-3.2-1b", 8, 1024, optim="sgd", optim_args={"momentum": "0.9"},
                  gradient_checkpointing=True))
    c.append(case("v-l1b-bf16-eager-gc-b4s1024", "llama-3.2-1b", 4, 1024, attn_implementation="eager",
                  gradient_checkpointing=True))
    c.append(case("v-l8b-bf16-lora-r64-qkvo-b1s4096", "llama-3.1-8b", 1, 4096,
                  lora=lora(64, 128, 0.1, ["q_proj", "k_proj", "v_proj", "o_proj"])))
    c.append(case("v-dpo-l1b-fp32ac-copy-b2s512", "llama-3.2-1b", 2, 512, dtype="float32", method="dpo"))
    c.append(case("v-dpo-q05b-bf16-precompute-b4s1024", "qwen2.5-0.5b", 4, 1024, method="dpo",
                  precompute_ref_log_probs=True))
    c.append(case("v-grpo-q05b-bf16-beta-gc-b16", "qwen2.5-0.5b", 16, 384, method="grpo", beta=0.04,
                  max_prompt_length=128, max_completion_length=256, gradient_checkpointing=True))
    c.append(case("v-grpo-l3b-bf16-lora-nobeta-b8", "llama-3.2-3b", 8, 640, method="grpo", beta=0.0,
                  max_prompt_length=128, max_completion_length=512, lora=lora(16, 32, 0.05, "all-linear")))
    return c


if __name__ == "__main__":
    import sys
    print(json.dumps(validation_cases() if "--validation" in sys.argv else all_cases(), indent=1))
