"""Writes tests/data/published/fsdp_qlora_3090.json: Answer.AI's FSDP-QLoRA benchmark numbers
(AnswerDotAI/fsdp_qlora benchmarks_03_2024.md) with the settings of its train.py, as memplan flags.
Rerun from the repository root: python3 tools/accuracy/fsdp_qlora_published.py
"""
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GIB = 2**30
model = json.load(open(os.path.join(ROOT, 'configs/models/llama-2-7b.json')))['config']
SRC = "https://github.com/AnswerDotAI/fsdp_qlora/blob/23fafdfb4af403d0808038adafbfd74de265d33a/benchmarks_03_2024.md"
STACK = "torch==2.2.1,transformers==4.38.2,peft==0.9.0,bitsandbytes==0.43.0"
ENV = {"gpu": "2x NVIDIA GeForce RTX 3090 24GB (no NVLink, power-limited to 280 W), 128 GB CPU RAM",
       "torch": "2.2 (inferred: train.py's comment 'torch 2.2 sdpa uses flash attn 2'; the post does not print versions)",
       "transformers": "4.38 (inferred from the benchmark dates, February-March 2024)",
       "peft": "0.9 (inferred from the dates)", "bitsandbytes": ">= 0.43.0 (the README's requirement for quant_storage)"}
COMMON = ["--model", "meta-llama/Llama-2-7b-hf", "--method", "sft", "--torch-dtype", "bfloat16",
          "--optim", "adamw_torch", "--device", "cuda", "--num-gpus", "2", "--attn-implementation", "sdpa",
          "--gradient-checkpointing", "--use-reentrant", "true"]
LORA = ["--use-peft", "--lora-r", "64", "--lora-alpha", "16", "--lora-dropout", "0.1",
        "--lora-target-modules", "k_proj,q_proj,v_proj,up_proj,down_proj,gate_proj"]
QLORA = LORA + ["--load-in-4bit", "--bnb-4bit-quant-storage", "bfloat16", "--kbit-prepare", "freeze_only"]

def case(cid, b, s, lora, fsdp, gib, what, offload=False, model_name="meta-llama/Llama-2-7b-hf", extra_note=""):
    flags = list(COMMON)
    flags[1] = model_name
    flags += ["--batch", str(b), "--seq-len", str(s), "--fsdp", fsdp] + (QLORA if lora == "qlora" else LORA)
    if offload: flags += ["--offload-params"]
    training = {"method": "sft", "batch": b, "seq_len": s, "torch_dtype": "bfloat16", "optim": "adamw_torch",
                "attn_implementation": "sdpa", "gradient_checkpointing": True, "checkpoint_reentrant": True,
                "device": "cuda", "num_gpus": 2, "fsdp": fsdp,
                "lora": {"r": 64, "alpha": 16.0, "dropout": 0.1,
                         "target_modules": ["k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"],
                         "adapter_dtype": "bfloat16"}}
    c = {"id": cid, "source": SRC, "model_name": model_name, "model": model, "training": training,
         "measured": {"peak_bytes": round(gib * GIB), "published_gib": gib, "what": what},
         "env": ENV, "flags": flags, "stack": STACK}
    if extra_note: c["note"] = extra_note
    return c

ALLOC = ("torch.cuda.max_memory_allocated(rank 0) over the first epoch (train.py resets the peak stats before "
         "the loop and prints 'Peak allocated memory' after epoch 0); the post's text gives it to 0.01 GiB")
RES = "torch.cuda.max_memory_reserved(rank 0) over the first epoch (the tables' 'Peak Memory (GiB)')"
cmd = ("python train.py --model_name meta-llama/Llama-2-7b-hf --batch_size 1 --context_length {s} --train_type lora "
       "--use_gradient_checkpointing True --reentrant_checkpointing True --use_cpu_offload False --log_to wandb "
       "--dataset dummy --dataset_samples 1024")
cases = [
    case("fsdp-qlora-llama-2-7b-lora-2gpu-fsdp-mb1-s512", 1, 512, "lora", "full_shard", 8.28, ALLOC,
         extra_note="command: " + cmd.format(s=512)),
    case("fsdp-qlora-llama-2-7b-lora-2gpu-fsdp-mb1-s2048", 1, 2048, "lora", "full_shard", 9.16, ALLOC,
         extra_note="command: " + cmd.format(s=2048)),
]
# Reserved-only figures of the same post: not compared by memplan-accuracy (it compares allocated
# peaks); kept for the reserved-memory work (issue 30 item 2).
reserved = [
    case("fsdp-qlora-llama-2-7b-qlora-fsdp-mb1-s512", 1, 512, "qlora", "full_shard", 4.98, RES),
    case("fsdp-qlora-llama-2-7b-qlora-fsdp-mb1-s2048", 1, 2048, "qlora", "full_shard", 5.21, RES),
    case("fsdp-qlora-llama-2-7b-lora-fsdp-mb1-s512", 1, 512, "lora", "full_shard", 10.24, RES),
    case("fsdp-qlora-llama-2-7b-lora-fsdp-mb1-s2048", 1, 2048, "lora", "full_shard", 10.22, RES),
    case("fsdp-qlora-llama-2-7b-qlora-fsdp-mb4-s2048", 4, 2048, "qlora", "full_shard", 11.22, RES),
    case("fsdp-qlora-llama-2-7b-qlora-fsdp-mb10-s2048", 10, 2048, "qlora", "full_shard", 20.97, RES),
    case("fsdp-qlora-llama-2-7b-lora-fsdp-mb4-s2048", 4, 2048, "lora", "full_shard", 16.14, RES),
    case("fsdp-qlora-llama-2-7b-lora-fsdp-mb6-s2048", 6, 2048, "lora", "full_shard", 21.35, RES),
    case("fsdp-qlora-llama-2-7b-qlora-noshard-mb8-s2048", 8, 2048, "qlora", "no_shard", 20.94, RES,
         extra_note="--sharding_strategy ddp: FSDP NO_SHARD, not DistributedDataParallel (the post's footnote)"),
    case("fsdp-qlora-llama-2-7b-lora-noshard-mb4-s2048", 4, 2048, "lora", "no_shard", 22.04, RES,
         extra_note="--sharding_strategy ddp: FSDP NO_SHARD, not DistributedDataParallel (the post's footnote)"),
]
out = {
    "source_repo": "AnswerDotAI/fsdp_qlora",
    "commit": "23fafdfb4af403d0808038adafbfd74de265d33a",
    "path": "benchmarks_03_2024.md",
    "settings_from": ("AnswerDotAI/fsdp_qlora train.py (the version with --sharding_strategy and "
                      "--reentrant_checkpointing; same defaults as 02586ac7de37f32b66a12465d64386ac2043c87a): "
                      "precision bf16 = model loaded and trained in bf16 without autocast or an FSDP "
                      "MixedPrecision policy; train_type lora = PEFT get_peft_model, r 64, alpha 16, dropout 0.1, "
                      "targets k/q/v/up/down/gate_proj; torch.optim.AdamW (foreach), lr 1e-5, wd 0.1; FSDP1 "
                      "FULL_SHARD (or NO_SHARD for 'ddp'), use_orig_params False, limit_all_gathers, BACKWARD_PRE, "
                      "each LoRA Linear and each LlamaDecoderLayer its own unit; checkpoint_wrapper REENTRANT per "
                      "decoder layer with enable_input_require_grads(); attn sdpa; labels from the dummy dataset "
                      "truncated to context_length (every row full length); the model's own loss "
                      "(LlamaForCausalLM.forward, logits.float())"),
    "env": ENV,
    "cases": cases,
    "reserved_only": reserved,
}
json.dump(out, open(os.path.join(ROOT, 'tests/data/published/fsdp_qlora_3090.json'), 'w'), indent=1)
print(len(cases), len(reserved))
