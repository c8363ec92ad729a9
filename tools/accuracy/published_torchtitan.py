#!/usr/bin/env python3
"""Writes the fourth collection's published tables: torchtitan runs of Llama 3(.1) 8B under FSDP2.

Each row is copied from the source named with it (repository, commit, path, the quoted line); the
settings come from torchtitan's own config and code at the commit the source names, cited per
source (docs/accuracy.md#published-held-out-4). Both sources print torchtitan's logged
"memory: X GiB", which is torch.cuda.memory_stats()["reserved_bytes.all.peak"] (torchtitan/metrics.py
DeviceMemoryMonitor.get_peak_stats at 9dec370a), so every expressible row is "reserved_only".
Rows the engine cannot express (torch.compile, Float8, context/tensor/pipeline parallelism with
them) are kept under "not_expressible" with the reason.

    python3 tools/accuracy/published_torchtitan.py
    # rewrites tests/data/published/{torchtitan_performance_2025-01,torchao_float8nocompile_2025-02}.json
"""
import json
import os

GIB = 1024 ** 3
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# torchtitan's llama3 "8B" flavor (torchtitan/models/llama/__init__.py: dim 4096, 32 layers, 32 heads,
# 8 KV heads, ffn_dim_multiplier 1.3, multiple_of 1024 -> 14336; the Llama 3 tokenizer's 128256 tokens),
# the shape of meta-llama/Llama-3.1-8B in the catalog (8,030,261,248 parameters, untied).
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
             "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu"}

# What torchtitan runs whatever the table: FSDP2 (fully_shard) over every TransformerBlock and the
# root, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) on fp32 parameters
# (training.mixed_precision_param/reduce defaults), AdamW with foreach=True (optimizer.fused is a
# store_true flag, default False: torchtitan/optimizer.py passes "foreach": not fused), SDPA,
# cross-entropy on pred.float(), non-reentrant checkpoint_wrapper.
TORCHTITAN_FLAGS = ["--model", "meta-llama/Llama-3.1-8B", "--method", "sft", "--torch-dtype", "bfloat16",
                    "--optim", "adamw_torch", "--device", "cuda", "--attn-implementation", "sdpa",
                    "--fsdp", "full_shard", "--fsdp-version", "2", "--fsdp-mixed-precision"]


def training(batch, seq, gpus, ac, every=1):
    t = {"method": "sft", "batch": batch, "seq_len": seq, "torch_dtype": "bfloat16", "optim": "adamw_torch",
         "attn_implementation": "sdpa", "gradient_checkpointing": ac != "none", "device": "cuda",
         "num_gpus": gpus, "fsdp": "full_shard", "fsdp_mixed_precision": True}
    if ac != "none":
        t["checkpoint_reentrant"] = False
    if ac == "op":
        t["checkpoint_policy"] = "op"
    if every > 1:
        t["checkpoint_every"] = every
    return t


def flags(batch, seq, gpus, ac, every=1):
    f = TORCHTITAN_FLAGS + ["--batch", str(batch), "--seq-len", str(seq), "--num-gpus", str(gpus)]
    if ac != "none":
        f += ["--gradient-checkpointing", "--use-reentrant", "false"]
    if ac == "op":
        f += ["--checkpoint-policy", "op"]
    if every > 1:
        f += ["--checkpoint-every", str(every)]
    return f


def row(rid, url, quote, gib, what, env, stack, batch, seq, gpus, ac, every=1):
    return {"id": rid, "source": url, "quote": quote, "model_name": "meta-llama/Llama-3.1-8B",
            "model": LLAMA3_8B, "training": training(batch, seq, gpus, ac, every),
            "measured": {"peak_bytes": round(gib * GIB), "published_gib": gib, "what": what},
            "env": env, "flags": flags(batch, seq, gpus, ac, every), "stack": stack}


def torchtitan_performance():
    commit = "d4c86e3758a84cf23e2e879ab3c995cba9d5e410"
    url = "https://github.com/pytorch/torchtitan/blob/%s/docs/performance.md" % commit
    env = {"gpu": "8 or 128 NVIDIA H100 with 96GB HBM2e (Grand Teton, 500 W), per the page",
           "torch": "nightly 1963fc83a1c32e162162e2414f78b043f0674bae (2024-12-23, main after the 2.6 branch cut: 2.7.0.dev), per the page's version table",
           "torchtitan": "9dec370ad26b5f8e9a7333a0e36165018262644b (2024-12-26), per the page's version table"}
    what = ("torchtitan's logged 'memory: X GiB' = max_memory_reserved (reserved_bytes.all.peak; "
            "torchtitan/metrics.py at 9dec370a), 'the maximum across all GPUs', stable across the run")
    stack = "torch==2.7.0"
    out = {
        "source_repo": "pytorch/torchtitan", "commit": commit, "path": "docs/performance.md",
        "section": "Tables 1-6 (Llama 3.1 8B/70B/405B on H100s)", "env": env,
        "settings_from": ("train_configs/llama3_8b.toml at 9dec370a (batch_size 1 -> the table's local batch 2, "
                          "seq_len 8192, AdamW lr 3e-4, data_parallel_shard_degree -1, compile false, "
                          "activation_checkpoint mode selective, selective_ac_option op) and "
                          "torchtitan/config_manager.py (optimizer.fused default False; mixed_precision_param "
                          "bfloat16, mixed_precision_reduce float32); tests/data/published/configs/"
                          "torchtitan-llama3-8b-performance-table1.toml is that config at local batch 2"),
        "reserved_only": [
            row("torchtitan-perf-llama3.1-8b-fsdp8-sac-op-b2s8192", url, "| FSDP | 5,762 | 82.4 |  (Table 1: "
                "1D Parallelism (FSDP). Llama 3.1 8B model. 8 GPUs. Local batch size 2, global batch size 16. "
                "Selective activation checkpointing.)", 82.4, what, env, stack, 2, 8192, 8, "op"),
            row("torchtitan-perf-llama3.1-8b-fsdp128-sac-op-b2s8192", url, "| FSDP | 5,605 | 67.0 |  (Table 3: "
                "1D Parallelism (FSDP). Llama 3.1 8B model. 128 GPUs. Local batch size 2, global batch size 256. "
                "Selective activation checkpointing.)", 67.0, what, env, stack, 2, 8192, 128, "op"),
        ],
        "not_expressible": [
            {"id": "torchtitan-perf-table1-compile", "source": url,
             "quote": "| FSDP + torch.compile | 6,667 | 77.0 |; | FSDP + torch.compile + Float8 | 8,532 | 76.8 |",
             "why_not_expressible": "torch.compile (fused kernels that skip intermediates) and Float8 linears"},
            {"id": "torchtitan-perf-table3-compile", "source": url,
             "quote": "| FSDP | 5,605 | 67.0 | (eager, kept); | FSDP + torch.compile | 6,514 | 62.0 |; "
                      "| FSDP + torch.compile + Float8 | 8,380 | 61.8 |",
             "why_not_expressible": "torch.compile and Float8 linears"},
            {"id": "torchtitan-perf-table2-cp", "source": url,
             "quote": "FSDP + CP + torch.compile + Float8 ... 83.9 / 84.2 / 84.0 / 84.5",
             "why_not_expressible": "torch.compile and Float8 (context parallelism itself is modelled)"},
            {"id": "torchtitan-perf-table4-70b-2d", "source": url, "quote": "| 2D | 829 | 71.9 |; | 2D + AsyncTP | 876 | 67.6 |",
             "why_not_expressible": "torch.compile, Float8 and async TP's symmetric-memory buffers"},
            {"id": "torchtitan-perf-table5-6-405b", "source": url,
             "quote": "1F1B 82.5, Interleaved 1F1B 72.7; FSDP 8/4/2/1 x CP 1/2/4/8: 75.3 / 75.9 / 77.1 / 84.9",
             "why_not_expressible": "torch.compile, Float8 and async TP"},
        ],
    }
    return out


def torchao_float8nocompile():
    commit = "d99785c0fdaa1dbfdbaf57923326edf2b8a7f1f8"
    url = "https://github.com/pytorch/ao/blob/%s/torchao/prototype/float8nocompile/README.md" % commit
    env = {"gpu": "8 NVIDIA H100 (the README's headings; pytorch/torchtitan#778's summary says 4, but its "
                  "tables say 8 GPUs, and 8B x 16 B of fp32 state over 4 GPUs alone is 29.9 GiB, above the "
                  "full-AC row's 28.07)",
           "torch": "a nightly of early January 2025, 2.7.0.dev (not stated; torchtitan#778 is dated 2025-01-07)",
           "torchtitan": "main of early January 2025 via pytorch/torchtitan#778 (branch off 90567fc9)"}
    what = ("'Peak memory (GB)' of torchtitan's log line 'memory: X GiB' (the same numbers appear as "
            "'28.07 GB' in pytorch/torchtitan#778): max_memory_reserved in GiB")
    stack = "torch==2.7.0"
    q = "(## {} (seq len 4096) - 8 H100s)"
    out = {
        "source_repo": "pytorch/ao", "commit": commit, "path": "torchao/prototype/float8nocompile/README.md",
        "section": "Performance Comparison of Different Configurations on 8 H100s", "env": env,
        "settings_from": ("pytorch/torchtitan#778 ('Model: Llama3 8b ... batch size of 1, seq len of 4096'); the "
                          "rest from train_configs/llama3_8b.toml and torchtitan/config_manager.py at 90567fc9 "
                          "(2025-01-07): AdamW foreach, FSDP2 bf16/fp32 mixed precision, compile false; "
                          "activation_checkpoint mode none / selective with selective_ac_option 2 / full"),
        "reserved_only": [
            row("torchao-f8nc-llama3-8b-fsdp8-noac-b1s4096", url, "| bfloat16, eager | 5339.0 | 53.12 | 0% | 0.00% | "
                + q.format("No AC"), 53.12, what, env, stack, 1, 4096, 8, "none"),
            row("torchao-f8nc-llama3-8b-fsdp8-ac-every2-b1s4096", url, "| bfloat16, eager | 4882.4 | 40.6 | 0% | "
                "0.00% | " + q.format("Selective per layer AC (AC every 2nd layer"), 40.6, what, env, stack,
                1, 4096, 8, "full", every=2),
            row("torchao-f8nc-llama3-8b-fsdp8-fullac-b1s4096", url, "| bfloat16, eager | 4502.0 | 28.07 | 0% | "
                "0.00% | " + q.format("Full AC"), 28.07, what, env, stack, 1, 4096, 8, "full"),
        ],
        "not_expressible": [
            {"id": "torchao-f8nc-float8nocompile", "source": url,
             "quote": "float8nocompile prototype: 52.7 (no AC), 40.97 (every 2nd layer), 28.07 (full AC)",
             "why_not_expressible": "Float8 linears (torchao's Triton-kernel float8 conversion)"},
            {"id": "torchao-f8nc-float8-compile", "source": url,
             "quote": "float8 + torch.compile: 46.64 (no AC), 37.38 (every 2nd layer), 28.03 (full AC)",
             "why_not_expressible": "torch.compile and Float8 linears"},
        ],
    }
    return out


def main():
    for name, doc in (("torchtitan_performance_2025-01", torchtitan_performance()),
                      ("torchao_float8nocompile_2025-02", torchao_float8nocompile())):
        path = os.path.join(ROOT, "tests", "data", "published", name + ".json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(path)


if __name__ == "__main__":
    main()
