#!/usr/bin/env python3
"""Writes the published peak-memory tables that are small enough to transcribe by hand.

Each row below is copied from the source named with it (repository, commit, path, the quoted
line); the settings come from the same commit's configs and scripts, cited per source. Rows the
engine cannot express are kept with the reason, under "not_expressible", so the record is whole.
Rows whose figure is torch.cuda.max_memory_reserved go under "reserved_only": memplan-accuracy
compares them with the replayed caching allocator, not with the allocated peak.

    python3 tools/accuracy/published_tables.py
    # rewrites tests/data/published/{torchtune_readme,torchtune_lora_tutorial,ms_swift_benchmark}.json
"""
import json
import os

GIB = 1024 ** 3
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# meta-llama/Llama-3.2-3B as in the catalog (docs/models.md: 3,212,749,824 parameters, tied).
LLAMA32_3B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072,
              "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": True,
              "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
# 01-ai/Yi-6B(-Chat): the defaults of InternLM/InternEvo-HFModels
# huggingface_model/yi/yi_6B/configuration_yi.py @ 3850aa4158bc2bd5e1d193807d39378c010b85a0, which mirror the
# checkpoint's config.json (LlamaForCausalLM, GQA with 4 key/value heads, vocabulary 64000, untied).
YI_6B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 4, "vocab_size": 64000, "tie_word_embeddings": False,
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
YI_6B_FLAGS = ["--hidden-size", "4096", "--intermediate-size", "11008", "--num-hidden-layers", "32",
               "--num-attention-heads", "32", "--num-key-value-heads", "4", "--vocab-size", "64000"]


def torchtune():
    commit = "1814feb17a9038e1a8053ce93111bd26774a8db6"
    url = "https://github.com/pytorch/torchtune/blob/%s/README.md" % commit
    env = {"gpu": "NVIDIA A100 (80GB, per the table's header 'Hardware: A100')",
           "torch": "2.5.1 (inferred: the README of this commit says torchtune is tested with the latest stable "
                    "PyTorch release; 2.5.1 was current on 2024-11-18)",
           "torchtune": "main @ %s (2024-11-18)" % commit}
    what = ("torch.cuda.memory_stats()['active_bytes.all.peak'] / 1024**3 over one epoch (torchtune/training/memory.py "
            "get_memory_stats at this commit, logged every step by the recipe with log_peak_memory_stats); active "
            "bytes are the allocated blocks' rounded sizes, the same figure as max_memory_allocated when no block "
            "waits on another stream")
    settings = ("full_finetune_single_device with llama3_2/3B_full_single_device.yaml at %s, changed as the table "
                "says: batch_size 2, tokenizer.max_seq_len 4096, dtype bf16 (weights and compute in bf16, no "
                "autocast), and for the rows before each technique its setting off: dataset.packed False, compile "
                "False, loss torch.nn.CrossEntropyLoss (on TransformerDecoder's output(h).float(), fp32 logits), "
                "enable_activation_checkpointing False, optimizer_in_bwd False, enable_activation_offloading False, "
                "optimizer torch.optim.AdamW (the config's PagedAdamW8bit is the '+ 8-bit AdamW' row). Packed rows: "
                "alpaca_dataset packed to 4096 tokens per row, so every batch is 2 x 4096 tokens, attention with "
                "flex_attention's block-causal mask (torch >= 2.5 on sm80)" % commit)
    flags_packed = ["--model", "meta-llama/Llama-3.2-3B", "--method", "sft", "--batch", "2", "--seq-len", "4096",
                    "--torch-dtype", "bfloat16", "--optim", "adamw_torch", "--device", "cuda", "--num-gpus", "1",
                    "--attn-implementation", "sdpa", "--model-code", "torchtune"]
    cases = [{
        "id": "torchtune-llama3.2-3b-full-packed-b2s4096",
        "source": url, "quote": "| [+ Packed Dataset](https://pytorch.org/torchtune/main/basics/packing.html) | 60.0 | "
                               "+135.16% | 7075 | +238.40% |",
        "model_name": "meta-llama/Llama-3.2-3B", "model": LLAMA32_3B,
        "training": {"method": "sft", "batch": 2, "seq_len": 4096, "torch_dtype": "bfloat16", "optim": "adamw_torch",
                     "attn_implementation": "sdpa", "gradient_checkpointing": False, "device": "cuda", "num_gpus": 1,
                     "model_code": "torchtune"},
        "measured": {"peak_bytes": int(round(60.0 * GIB)), "published_gib": 60.0, "what": what,
                     "precision": "0.1 GiB (the table's rounding: +-0.05 GiB, 0.08 %)"},
        "env": env, "settings_from": settings, "flags": flags_packed, "stack": "torch==2.5.1",
    }]
    ne = []
    rows = [("baseline", 25.5, "| Baseline | 25.5 | - | 2091 | - |",
             "unpacked alpaca, each batch padded to its longest row: the peak is set by the longest pair of rows "
             "in the shuffled epoch (under 4096 tokens, not stated); memplan needs that length or the length "
             "histogram (--length-histogram), which the source does not give"),
            ("compile", 51.0, "| [+ Compile](...) | 51.0 | -14.93% | 8998 | +27.18% |",
             "torch.compile (Inductor fuses the elementwise ops and their saved intermediates); memplan models eager "
             "PyTorch only (docs/formulas.md#compile: an upper bound)"),
            ("chunked-ce", 42.9, "| [+ Chunked Cross Entropy](...) | 42.9 | -15.83% | 9174 | +1.96% |",
             "compile (above); the chunked loss alone is expressible (--loss-kernel chunked)"),
            ("ac", 24.9, "| [+ Activation Checkpointing](...) | 24.9 | -41.93% | 7210 | -21.41% |",
             "compile (above)"),
            ("optimizer-in-bwd", 23.1, "| [+ Fuse optimizer step into backward](...) | 23.1 | -7.29% | 7309 | +1.38% |",
             "compile; and the optimizer step fused into backward (optimizer_in_bwd) is not modelled"),
            ("activation-offloading", 21.8, "| [+ Activation Offloading](...) | 21.8 | -5.48% | 7301 | -0.11% |",
             "compile, optimizer_in_bwd; and activation offloading to the CPU is not modelled"),
            ("adamw8bit", 17.6, "| [+ 8-bit AdamW](...) | 17.6 | -19.63% | 6960 | -4.67% |",
             "compile, optimizer_in_bwd, activation offloading (above)"),
            ("lora", 8.5, "| [LoRA](...) | 8.5 | -51.61% | 8210 | +17.96% |",
             "compile and activation offloading (the LoRA row keeps both, without optimizer_in_bwd and 8-bit AdamW)"),
            ("qlora", 4.6, "| [QLoRA](...) | 4.6 | -45.71% | 8035 | -2.13% |",
             "compile and activation offloading (above); torchtune's NF4 (torchao) weights")]
    for key, gib, quote, why in rows:
        ne.append({"id": "torchtune-llama3.2-3b-%s" % key, "source": url, "quote": quote, "published_gib": gib,
                   "what": what, "why_not_expressible": why})
    commit31 = "30b8519e86d2094879576e16ab1f8d21a6f6f9f7"
    url31 = "https://github.com/pytorch/torchtune/blob/%s/README.md" % commit31
    for model, method, hw, gib in [("Llama 3.1 8B", "Full finetune", "1x 4090", 18.9),
                                   ("Llama 3.1 8B", "Full finetune", "1x A6000", 37.4),
                                   ("Llama 3.1 8B", "LoRA", "1x 4090", 16.2),
                                   ("Llama 3.1 8B", "LoRA", "1x A6000", 30.3),
                                   ("Llama 3.1 8B", "QLoRA", "1x 4090", 7.4),
                                   ("Llama 3.1 70B", "Full finetune", "8x A100", 13.9),
                                   ("Llama 3.1 70B", "LoRA", "8x A100", 27.6),
                                   ("Llama 3.1 405B", "QLoRA", "8x A100", 44.8)]:
        ne.append({"id": "torchtune-readme-%s-%s-%s" % (model.lower().replace(" ", ""), method.lower().replace(" ", ""),
                                                        hw.lower().replace(" ", "")),
                   "source": url31, "quote": "| %s | %s | %s | %s GiB |" % (model, method, hw, gib),
                   "published_gib": gib,
                   "what": "'Peak Memory per GPU' (the README does not say which statistic; the recipes log "
                           "active, allocated and reserved)",
                   "why_not_expressible": "the README's note: 'all the below numbers are provided for batch size 2 "
                                          "(without gradient accumulation), a dataset packed to sequence length "
                                          "2048, and torch compile enabled' - torch.compile is not modelled, and "
                                          "the per-row config overrides (optimizer, optimizer_in_bwd, CPU offload "
                                          "'**' for 70B full) are not stated"})
    return {"source_repo": "pytorch/torchtune", "commit": commit, "path": "README.md",
            "section": "Optimization flags (Llama 3.2 3B); Memory and training speed (Llama 3.1, at %s)" % commit31,
            "env": env, "settings_from": settings, "cases": cases, "not_expressible": ne}


# meta-llama/Llama-2-7b-hf as in the catalog (the fsdp_qlora file's block).
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False,
             "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu"}


def torchtune_tutorial():
    commit = "ff594c23113891c99050f730c6be0aeacf511b2f"
    url = "https://github.com/pytorch/torchtune/blob/%s/docs/source/tutorials/lora_finetune.rst" % commit
    env = {"gpu": "not stated (one GPU)", "torch": "2.2.2 (inferred: the stable release on 2024-04-15)",
           "torchtune": "main @ %s (2024-04-15)" % commit}
    what = ("'Peak Memory' of the lora_finetune_single_device recipe: torch.cuda.max_memory_reserved() / 1e9 "
            "(torchtune/utils/memory.py memory_stats_log at this commit; the QLoRA tutorial of the same tree gives the "
            "first row's 15.57 GB as 'Peak memory reserved, training'), over training")
    settings = ("llama2/7B_lora_single_device.yaml at %s: lora_llama2_7b (lora_dropout 0.05, adapters created in the "
                "model's bf16), dtype bf16 without autocast, batch_size 2, alpaca_cleaned_dataset with its default "
                "max_seq_len 512 and padded_collate (each batch padded to its longest row, so the longest batches are "
                "2 x 512), torch.optim.AdamW (foreach), torch.nn.CrossEntropyLoss on TransformerDecoder's "
                "output(h).float(), enable_activation_checkpointing True (torch.distributed's checkpoint_wrapper, "
                "non-reentrant), SDPA with is_causal, no compile, gradient_accumulation_steps 64" % commit)
    rows = [("q-v-r8", 8, 16, 15.57, "* - Q and V only / - 8 / - 16 / - **15.57 GB**"),
            ("q-v-r64", 64, 128, 15.86, "* - Q and V only / - 64 / - 128 / - 15.86 GB")]
    cases = []
    for key, r, alpha, gb, quote in rows:
        flags = ["--model", "meta-llama/Llama-2-7b-hf", "--method", "sft", "--batch", "2", "--seq-len", "512",
                 "--torch-dtype", "bfloat16", "--optim", "adamw_torch", "--device", "cuda", "--num-gpus", "1",
                 "--attn-implementation", "sdpa", "--gradient-checkpointing", "--use-reentrant", "false",
                 "--use-peft", "--lora-r", str(r), "--lora-alpha", str(alpha), "--lora-dropout", "0.05",
                 "--lora-target-modules", "q_proj,v_proj", "--adapter-dtype", "bfloat16", "--model-code", "torchtune"]
        cases.append({
            "id": "torchtune-tutorial-llama2-7b-lora-%s-b2s512" % key, "source": url, "quote": quote,
            "model_name": "meta-llama/Llama-2-7b-hf", "model": LLAMA2_7B,
            "training": {"method": "sft", "batch": 2, "seq_len": 512, "torch_dtype": "bfloat16", "optim": "adamw_torch",
                         "attn_implementation": "sdpa", "gradient_checkpointing": True, "checkpoint_reentrant": False,
                         "device": "cuda", "num_gpus": 1, "model_code": "torchtune",
                         "lora": {"r": r, "alpha": float(alpha), "dropout": 0.05, "target_modules": ["q_proj", "v_proj"],
                                  "adapter_dtype": "bfloat16"}},
            "measured": {"peak_bytes": int(round(gb * 1e9)), "published_gb": gb, "what": what},
            "env": env, "flags": flags, "stack": "torch==2.2.2"})
    ne = [{"id": "torchtune-tutorial-llama2-7b-lora-all-layers", "source": url,
           "quote": "all layers / 8 / 16 / 15.87 GB; all layers / 64 / 128 / 17.04 GB",
           "why_not_expressible": "apply_lora_to_output puts LoRA on the output projection (lm_head), which memplan's "
                                  "LoRA targets do not cover"},
          {"id": "torchtune-tutorial-llama2-7b-qlora", "source": url.replace("lora_finetune", "qlora_finetune"),
           "quote": "QLoRA  9.13 GB  9.29 GB (peak memory reserved at model init, in training)",
           "why_not_expressible": "torchtune's QLoRA stores the base weights as torchao NF4Tensor (its own block "
                                  "sizes and dequantization), not bitsandbytes' Linear4bit"},
          {"id": "torchtune-tutorial-llama2-7b-lora-init", "source": url.replace("lora_finetune", "qlora_finetune"),
           "quote": "GPU peak memory allocation: 13.96 GB / reserved: 13.98 GB (Memory Stats after model init)",
           "why_not_expressible": "a figure after model initialisation, before training: 0.48e9 B above the bf16 "
                                  "weights (6,738,415,616 x 2 B), kept as a reference for the rows above"}]
    return {"source_repo": "pytorch/torchtune", "commit": commit, "path": "docs/source/tutorials/lora_finetune.rst",
            "section": "the LoRA layers / rank table", "env": env, "settings_from": settings,
            "reserved_only": cases, "not_expressible": ne}


def ms_swift():
    commit = "46922151e06cdfc110882e182757674f12352f2c"
    path = "docs/source_en/LLM/Benchmark.md"
    url = "https://github.com/modelscope/ms-swift/blob/%s/%s" % (commit, path)
    env = {"gpu": "NVIDIA A100 80GB", "torch": "2.1.1", "flash-attn": "2.3.4", "cuda": "11.8",
           "transformers": "4.36.2 (inferred: not printed; the release current in January 2024 with flash_attn 2.3)",
           "peft": "0.7.1 (inferred, same dates)"}
    what = ("ms-swift's 'GPU Memory (GiB)': the largest torch.cuda.max_memory_reserved() / 1024**3 the trainer logged "
            "over the run (swift/trainers/mixin.py get_max_cuda_memory resets the peak at every log and keeps the "
            "maximum), one GPU")
    settings = ("swift sft --model_type yi-6b-chat --sft_type lora --max_length L with the page's defaults: "
                "--batch_size 1 --gradient_checkpointing true --use_flash_attn true --lora_rank 8 "
                "--lora_target_modules DEFAULT (q_proj,k_proj,v_proj for Llama-architecture models; lora_alpha 32, "
                "lora_dropout_p 0.05) --quantization_bit 0 --gradient_accumulation_steps 16, dtype AUTO = bf16 "
                "weights with --bf16 autocast, optimizer adamw_torch, dataset cls-fudan-news-zh whose rows are "
                "3234.4 +- 2547.5 tokens (min 91), truncated to max_length: most steps are L tokens")
    cases = []
    for L, gib in [(512, 13.72), (1024, 15.44), (2048, 16.95), (4096, 28.25), (8192, 43.81)]:
        flags = ["--method", "sft"] + YI_6B_FLAGS + [
            "--batch", "1", "--seq-len", str(L), "--torch-dtype", "bfloat16", "--bf16", "--optim", "adamw_torch",
            "--device", "cuda", "--num-gpus", "1", "--attn-implementation", "flash_attention_2",
            "--gradient-checkpointing", "--use-peft", "--lora-r", "8", "--lora-alpha", "32", "--lora-dropout", "0.05",
            "--lora-target-modules", "q_proj,k_proj,v_proj"]
        cases.append({
            "id": "ms-swift-yi-6b-chat-lora-b1-s%d" % L, "source": url,
            "quote": "yi-6b-chat | %d | ... | %.2f (table 'Model Type & Max Length', LoRA)" % (L, gib),
            "model_name": "01-ai/Yi-6B-Chat", "model": YI_6B,
            "training": {"method": "sft", "batch": 1, "seq_len": L, "torch_dtype": "bfloat16", "autocast": "bfloat16",
                         "optim": "adamw_torch", "attn_implementation": "flash_attention_2",
                         "gradient_checkpointing": True, "device": "cuda", "num_gpus": 1,
                         "lora": {"r": 8, "alpha": 32.0, "dropout": 0.05,
                                  "target_modules": ["q_proj", "k_proj", "v_proj"]}},
            "measured": {"peak_bytes": int(round(gib * GIB)), "published_gib": gib, "what": what},
            "env": env, "flags": flags, "stack": "torch==2.1.1,transformers==4.36.2,peft==0.7.1,flash-attn==2.3.4"})
    ne = [{"id": "ms-swift-qwen-family", "source": url,
           "why_not_expressible": "qwen-1_8b/7b/14b/72b-chat are Qwen (v1) QWenLMHeadModel remote code (fused c_attn "
                                  "with bias, its own RMSNorm/rotary/flash path), not in memplan's catalog nor a "
                                  "transformers architecture; the page's batch-size, flash-attn/checkpointing, LoRA "
                                  "rank and accumulation tables all use qwen-7b-chat"},
          {"id": "ms-swift-chatglm3-baichuan2-openbuddy", "source": url,
           "why_not_expressible": "chatglm3-6b and baichuan2 are remote-code architectures not in the catalog; "
                                  "openbuddy-zephyr-7b-chat's vocabulary is not stated on the page"},
          {"id": "ms-swift-yi-34b-chat", "source": url,
           "why_not_expressible": "Yi-34B's configuration was not collected with provenance in this change"}]
    return {"source_repo": "modelscope/ms-swift", "commit": commit, "path": path,
            "section": "Model Type & Max Length (LoRA)", "env": env, "settings_from": settings,
            "reserved_only": cases, "not_expressible": ne}


def write(name, doc):
    with open(os.path.join(ROOT, "tests", "data", "published", name), "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    write("torchtune_readme.json", torchtune())
    write("ms_swift_benchmark.json", ms_swift())
    write("torchtune_lora_tutorial.json", torchtune_tutorial())
