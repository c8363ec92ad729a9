#!/usr/bin/env python3
"""Generates the committed measurement cases (tests/data/measurements/cases_*.json).

Each case is one steady-state training step of a small Llama-family model on the CPU, chosen to
exercise one mechanism the engine models: dtypes and autocast, every optimizer torch provides
on the CPU, gradient checkpointing, LoRA rank/dropout/targets/modules_to_save, GQA/MQA/MHA,
attention biases, tied embeddings, vocabularies up to Llama-3's 128256, and batch and
sequence lengths. Usage: cases.py > cases.json
"""
import json

MODELS = {
    # GQA, untied: the Llama-3 layout at toy scale
    "gqa": {"vocab_size": 8000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2},
    # MHA with a 32k vocabulary (Llama-2/Mistral vocabulary)
    "mha32k": {"vocab_size": 32000, "hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 3,
               "num_attention_heads": 6, "num_key_value_heads": 6},
    # MQA with the Llama-3 vocabulary: logits dominate
    "mqa128k": {"vocab_size": 128256, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 1},
    # deeper, tied embeddings (Llama-3.2 / SmolLM layout)
    "tied6": {"vocab_size": 16000, "hidden_size": 320, "intermediate_size": 864, "num_hidden_layers": 6,
              "num_attention_heads": 5, "num_key_value_heads": 1, "tie_word_embeddings": True},
    # q/k/v/o biases (attention_bias=True)
    "bias": {"vocab_size": 12000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 3,
             "num_attention_heads": 8, "num_key_value_heads": 2, "attention_bias": True},
    # wider hidden, head_dim 64, one layer (no middle layers to extrapolate)
    "wide1": {"vocab_size": 8000, "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 1,
              "num_attention_heads": 12, "num_key_value_heads": 4},
    # head_dim != hidden/heads (Gemma/Qwen3-style explicit head_dim)
    "hd": {"vocab_size": 8000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 5,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 96},
}


def case(cid, model, batch, seq, dtype="float32", optim="adamw_torch", **kw):
    t = {"method": "sft", "batch": batch, "seq_len": seq, "torch_dtype": dtype, "optim": optim,
         "attn_implementation": "eager"}
    t.update(kw)
    return {"id": cid, "model": dict(MODELS[model]), "training": t}


def lora(r=16, alpha=32, dropout=0.05, targets=None, save=None):
    d = {"r": r, "alpha": alpha, "dropout": dropout}
    if targets is not None:
        d["target_modules"] = targets
    if save:
        d["modules_to_save"] = save
    return d


def all_cases():
    c = []
    # Full fine-tuning: dtypes and autocast
    c.append(case("gqa-fp32-adamw-b2s128", "gqa", 2, 128))
    c.append(case("gqa-bf16-adamw-b2s128", "gqa", 2, 128, "bfloat16"))
    c.append(case("gqa-fp32-ac-adamw-b2s128", "gqa", 2, 128, autocast="bfloat16"))
    c.append(case("gqa-bf16-ac-adamw-b4s64", "gqa", 4, 64, "bfloat16", autocast="bfloat16"))
    c.append(case("gqa-fp32-adamw-b1s512", "gqa", 1, 512))
    c.append(case("gqa-fp32-adamw-b8s64", "gqa", 8, 64))
    c.append(case("gqa-bf16-adamw-b1s1024", "gqa", 1, 1024, "bfloat16"))
    # Optimizers (torch 1.13 CPU implementations, HF Adafactor)
    c.append(case("gqa-fp32-adamw-foreach", "gqa", 2, 128, optim_args={"foreach": "true"}))
    c.append(case("gqa-fp32-adamw-amsgrad", "gqa", 2, 128, optim_args={"amsgrad": "true"}))
    c.append(case("gqa-fp32-sgd", "gqa", 2, 128, optim="sgd"))
    c.append(case("gqa-fp32-sgd-momentum", "gqa", 2, 128, optim="sgd", optim_args={"momentum": "0.9"}))
    c.append(case("gqa-bf16-sgd-nesterov-wd", "gqa", 2, 128, "bfloat16", optim="sgd",
                  optim_args={"momentum": "0.9", "nesterov": "true", "weight_decay": "0.01"}))
    c.append(case("gqa-fp32-adagrad", "gqa", 2, 128, optim="adagrad"))
    c.append(case("gqa-fp32-rmsprop", "gqa", 2, 128, optim="rmsprop"))
    c.append(case("gqa-bf16-rmsprop-centered-momentum", "gqa", 2, 128, "bfloat16", optim="rmsprop",
                  optim_args={"centered": "true", "momentum": "0.9"}))
    c.append(case("gqa-fp32-adafactor", "gqa", 2, 128, optim="adafactor"))
    c.append(case("gqa-bf16-adafactor", "gqa", 2, 128, "bfloat16", optim="adafactor"))
    c.append(case("mha32k-fp32-adafactor-b2s256", "mha32k", 2, 256, optim="adafactor"))
    # Gradient checkpointing
    c.append(case("gqa-fp32-gc-b2s128", "gqa", 2, 128, gradient_checkpointing=True))
    c.append(case("gqa-bf16-gc-b4s256", "gqa", 4, 256, "bfloat16", gradient_checkpointing=True))
    c.append(case("gqa-fp32-ac-gc-b2s256", "gqa", 2, 256, autocast="bfloat16", gradient_checkpointing=True))
    c.append(case("tied6-bf16-gc-sgd-b2s256", "tied6", 2, 256, "bfloat16", optim="sgd", gradient_checkpointing=True))
    c.append(case("mha32k-fp32-gc-b2s512", "mha32k", 2, 512, gradient_checkpointing=True))
    # Vocabulary and attention layouts
    c.append(case("mha32k-fp32-adamw-b2s256", "mha32k", 2, 256))
    c.append(case("mha32k-bf16-adamw-b4s128", "mha32k", 4, 128, "bfloat16"))
    c.append(case("mqa128k-fp32-sgd-b1s256", "mqa128k", 1, 256, optim="sgd"))
    c.append(case("mqa128k-bf16-adamw-b2s128", "mqa128k", 2, 128, "bfloat16"))
    c.append(case("mqa128k-fp32-ac-adamw-b1s256", "mqa128k", 1, 256, autocast="bfloat16"))
    c.append(case("tied6-fp32-adamw-b2s128", "tied6", 2, 128))
    c.append(case("tied6-bf16-ac-adamw-b2s192", "tied6", 2, 192, "bfloat16", autocast="bfloat16"))
    c.append(case("bias-fp32-adamw-b2s128", "bias", 2, 128))
    c.append(case("bias-bf16-rmsprop-b3s100", "bias", 3, 100, "bfloat16", optim="rmsprop"))
    c.append(case("wide1-fp32-adamw-b2s128", "wide1", 2, 128))
    c.append(case("wide1-bf16-gc-b2s256", "wide1", 2, 256, "bfloat16", gradient_checkpointing=True))
    c.append(case("hd-fp32-adamw-b2s160", "hd", 2, 160))
    c.append(case("hd-bf16-ac-sgd-b3s96", "hd", 3, 96, "bfloat16", optim="sgd", autocast="bfloat16"))
    # LoRA
    c.append(case("gqa-bf16-lora-default", "gqa", 2, 128, "bfloat16", lora=lora()))
    c.append(case("gqa-bf16-lora-all-r8", "gqa", 2, 128, "bfloat16", lora=lora(8, 16, 0.05, "all-linear")))
    c.append(case("gqa-fp32-lora-all-r64-nodrop", "gqa", 2, 128, lora=lora(64, 128, 0.0, "all-linear")))
    c.append(case("gqa-fp32-ac-lora-qkvo", "gqa", 2, 128, autocast="bfloat16",
                  lora=lora(16, 32, 0.1, ["q_proj", "k_proj", "v_proj", "o_proj"])))
    c.append(case("gqa-bf16-lora-mlp-gc", "gqa", 4, 128, "bfloat16", gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, ["gate_proj", "up_proj", "down_proj"])))
    c.append(case("gqa-bf16-lora-all-gc-b2s512", "gqa", 2, 512, "bfloat16", gradient_checkpointing=True,
                  lora=lora(8, 16, 0.05, "all-linear")))
    c.append(case("mha32k-bf16-lora-save-lmhead", "mha32k", 2, 128, "bfloat16",
                  lora=lora(16, 32, 0.05, "all-linear", ["lm_head"])))
    c.append(case("mha32k-fp32-lora-save-embed-gc", "mha32k", 2, 128, gradient_checkpointing=True,
                  lora=lora(8, 16, 0.0, None, ["embed_tokens"])))
    c.append(case("mqa128k-bf16-lora-all-b2s128", "mqa128k", 2, 128, "bfloat16", lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("tied6-bf16-lora-all-sgd", "tied6", 2, 128, "bfloat16", optim="sgd", lora=lora(32, 64, 0.05, "all-linear")))
    c.append(case("bias-bf16-ac-lora-all-gc", "bias", 2, 192, "bfloat16", autocast="bfloat16", gradient_checkpointing=True,
                  lora=lora(8, 16, 0.05, "all-linear")))
    c.append(case("hd-fp32-lora-adafactor", "hd", 2, 128, optim="adafactor", lora=lora(16, 32, 0.05, "all-linear")))
    c.append(case("wide1-bf16-lora-default-b4s128", "wide1", 4, 128, "bfloat16", lora=lora()))
    return c


def rl_cases():
    """DPO and GRPO policy-update steps (trl_steps.py)."""
    c = []
    dpo = dict(method="dpo")
    c.append(case("dpo-gqa-fp32-copy-b2s128", "gqa", 2, 128, **dpo))
    c.append(case("dpo-gqa-bf16-copy-b2s128", "gqa", 2, 128, "bfloat16", **dpo))
    c.append(case("dpo-gqa-fp32-ac-copy-b2s96", "gqa", 2, 96, autocast="bfloat16", **dpo))
    c.append(case("dpo-gqa-bf16-precompute-b3s64", "gqa", 3, 64, "bfloat16", precompute_ref_log_probs=True, **dpo))
    c.append(case("dpo-gqa-fp32-gc-copy-b2s128", "gqa", 2, 128, gradient_checkpointing=True, **dpo))
    c.append(case("dpo-gqa-bf16-lora-b2s128", "gqa", 2, 128, "bfloat16", lora=lora(16, 32, 0.05, "all-linear"), **dpo))
    c.append(case("dpo-gqa-fp32-ac-lora-gc-b2s128", "gqa", 2, 128, autocast="bfloat16", gradient_checkpointing=True,
                  lora=lora(8, 16, 0.05, "all-linear"), **dpo))
    c.append(case("dpo-mha32k-bf16-lora-b1s128", "mha32k", 1, 128, "bfloat16", lora=lora(), **dpo))
    c.append(case("dpo-tied6-fp32-sgd-copy-b1s96", "tied6", 1, 96, optim="sgd", **dpo))
    grpo = lambda beta, P, C, **kw: dict(method="grpo", beta=beta, max_prompt_length=P, max_completion_length=C, **kw)
    c.append(case("grpo-gqa-fp32-nobeta-b4", "gqa", 4, 192, **grpo(0.0, 64, 128)))
    c.append(case("grpo-gqa-fp32-beta-b4", "gqa", 4, 192, **grpo(0.04, 64, 128)))
    c.append(case("grpo-gqa-bf16-beta-b2", "gqa", 2, 160, "bfloat16", **grpo(0.04, 32, 128)))
    c.append(case("grpo-gqa-fp32-ac-nobeta-b3", "gqa", 3, 128, autocast="bfloat16", **grpo(0.0, 64, 64)))
    c.append(case("grpo-gqa-fp32-beta-b1", "gqa", 1, 192, **grpo(0.04, 64, 128)))
    c.append(case("grpo-gqa-bf16-lora-beta-gc-b4", "gqa", 4, 160, "bfloat16", gradient_checkpointing=True,
                  lora=lora(16, 32, 0.05, "all-linear"), **grpo(0.04, 32, 128)))
    c.append(case("grpo-mha32k-fp32-ac-lora-b2", "mha32k", 2, 192, autocast="bfloat16", lora=lora(),
                  **grpo(0.0, 64, 128, temperature=0.7)))
    c.append(case("grpo-tied6-fp32-sgd-beta-b2", "tied6", 2, 96, optim="sgd", **grpo(0.1, 32, 64)))
    return c


if __name__ == "__main__":
    import sys
    print(json.dumps(rl_cases() if "--rl" in sys.argv else all_cases(), indent=1))
