#!/usr/bin/env python3
"""Turns foundation-model-stack/fms-acceleration's published A100-80GB benchmark table into
memplan published cases (tests/data/published/fms_acceleration_a100.json).

    python3 tools/accuracy/fms_published.py CSV REQUIREMENTS COMMIT [PATH] > tests/data/published/fms_acceleration_a100.json

CSV is scripts/benchmarks/refs/a100_80gb.csv of that repository at COMMIT, REQUIREMENTS the same
commit's scripts/benchmarks/refs/requirements.txt (library versions: the transformers version
picks the loss path). Every setting that
is not a CSV column comes from the same commit's scripts/benchmarks/{defaults,scenarios,
accelerate}.yaml, benchmark.py (packing True, max_seq_len 4096) and refs/requirements.txt
(library versions); docs/accuracy.md#published lists them. Rows without a peak (the run ran out
of memory), GPTQ rows (auto-gptq kernels are not modelled) and gpt_bigcode rows (no catalog
architecture) are written to "excluded" with the reason."""
import csv
import json
import sys

REPO = "foundation-model-stack/fms-acceleration"
PATH = "scripts/benchmarks/refs/a100_80gb.csv"
CATALOG = {
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "NousResearch/Llama-2-70b-hf": "llama-2-70b",
}
# Models outside the catalog: their config.json committed beside the published tables (relative to
# tests/data/published/, which is where memplan-accuracy resolves a relative --model path).
CONFIGS = {
    "ibm/PowerLM-3b": "configs/ibm-powerlm-3b.json",
}
GAP_COMMITS = {"876e2ed6fc4e966785e3f4315f5ee3cdf8e3d097", "9239802cc91afee62114d67323869a3c7ede570e"}
# TRL installed from git: the version its trl/__init__.py declares at that commit.
TRL_GIT = {
    "9b80f3d50ccb98ceee94bab4145a36e7e58aa4eb": "0.12.0",  # __version__ "0.12.0.dev0", 2024-09-21
}
PACKAGES = ["torch", "transformers", "peft", "accelerate", "bitsandbytes", "flash-attn", "trl", "fms-hf-tuning"]


def versions(path):
    env = {"gpu": "NVIDIA A100-SXM4-80GB"}
    for line in open(path):
        name, sep, ver = line.strip().partition("==")
        if sep and name in PACKAGES:
            env[name] = ver
        elif line.startswith("trl @") and line.strip().endswith(tuple(TRL_GIT)):
            env["trl"] = TRL_GIT[line.strip().split("@")[-1]]
        elif line.startswith("fms-hf-tuning @"):
            env["fms-hf-tuning"] = line.strip().split("@", 2)[-1]
    return env


def loss_path(transformers):
    # docs/formulas.md#logits-and-loss: 4.49 pads the labels (PR #35646); 4.46-4.48 have
    # ForCausalLMLoss with the shifted copy; <= 4.45 upcast and shift inside the model forward.
    major, minor = (int(x) for x in transformers.split(".")[:2])
    if (major, minor) >= (4, 49):
        return "pad_labels"
    return "shift_contiguous" if (major, minor) >= (4, 46) else "upcast_in_model"


def main():
    csv_path, req_path, commit = sys.argv[1], sys.argv[2], sys.argv[3]
    global PATH
    if len(sys.argv) > 4:
        PATH = sys.argv[4]
    env = versions(req_path)
    cases, excluded = [], []
    for row in csv.DictReader(open(csv_path)):
        fw = row["framework_config"]
        model = row["model_name_or_path"]
        gpus = int(row["num_gpus"])
        mb = int(row["per_device_train_batch_size"])
        # The table's torch_dtype column (bfloat16 from mid-2024; the first tables ran float16 with
        # fp16 autocast for the quantized rows): weights, compute and quant storage follow it.
        dtype = row.get("torch_dtype") or "bfloat16"
        lora = row["peft_method"] == "lora"
        method = "full" if not lora else ("qlora" if "bnb" in fw else ("gptq-lora" if "gptq" in fw else "lora"))
        cid = f"fms-{CATALOG.get(model, model.split('/')[-1].lower())}-{method}-{gpus}gpu-mb{mb}"
        if "foak" in fw:
            cid += "-foak"
        if fw == "baseline-peft-bnb":
            cid += "-baseline"
        peak = row["mem_peak_torch_mem_alloc_in_bytes"]
        why = None
        if not peak:
            why = "no peak in the table: the run ran out of memory (nvidia-smi shows the full 80 GB)"
        elif "foak" in fw:
            why = "fused-ops-and-kernels plugin: Triton LoRA/RMSNorm/RoPE/cross-entropy kernels replace the ops memplan simulates"
        elif "gptq" in fw:
            why = "GPTQ (auto-gptq/gptqmodel) quantized linears are not modelled"
        elif model not in CATALOG and model not in CONFIGS:
            why = "gpt_bigcode architecture (multi-query attention with fused c_attn) is not in the catalog"
        if why:
            excluded.append({"id": cid, "reason": why})
            continue
        training = {
            "method": "sft", "batch": mb, "seq_len": 4096, "torch_dtype": dtype,
            "optim": "adamw_torch", "attn_implementation": "flash_attention_2",
            "gradient_checkpointing": True, "checkpoint_reentrant": True, "device": "cuda",
            "num_gpus": gpus, "transformers_loss": loss_path(env["transformers"]),
        }
        if gpus > 1:
            training["fsdp"] = "full_shard"
        if row.get("bf16", "").strip().lower() == "true":
            training["autocast"] = "bfloat16"
        elif row.get("fp16", "").strip().lower() == "true":
            training["autocast"] = "float16"
        if lora:
            training["lora"] = {"r": int(float(row["r"])), "alpha": float(row["lora_alpha"]),
                                "dropout": float(row["lora_dropout"]),
                                "target_modules": [t for t in row["target_modules"].split() if t != "c_attn"]}
            # accelerated-peft-bnb calls get_peft_model itself (autocast_adapter_dtype: fp32 adapters);
            # baseline-peft-bnb leaves PEFT to TRL 0.13, whose casting keeps the adapters fp32 too.
            # Under FSDP TRL detects sharded QLoRA and passes autocast_adapter_dtype=False (bf16).
            sharded_trl = fw == "baseline-peft-bnb" and gpus > 1
            training["lora"]["adapter_dtype"] = dtype if sharded_trl else "float32"
        if method == "qlora":
            training["quant"] = {"load_in_4bit": True, "quant_type": "nf4", "double_quant": True,
                                 "compute_dtype": dtype,
                                 "quant_storage": dtype if gpus > 1 else "uint8",
                                 # accelerated-peft-bnb: its own prepare (freeze only); baseline: TRL 0.13
                                 # prepare_model_for_kbit_training + peft_module_casting_to_bf16, except
                                 # under FSDP (is_sharded_qlora skips both)
                                 "kbit_prepare": "trl_legacy" if fw == "baseline-peft-bnb" and gpus == 1 else "freeze_only"}
        # accelerate >= 0.30 casts every trainable FSDP FlatParameter that is not fp32 to fp32 when
        # the Trainer's mixed precision is on (docs/formulas.md#accelerate-fsdp-upcast): the full
        # fine-tunes run with bf16 and TRL's bf16 adapters of sharded QLoRA.
        trainable16 = not lora or training["lora"]["adapter_dtype"] != "float32"
        acc = tuple(int(x) for x in env.get("accelerate", "0.0").split(".")[:2])
        if gpus > 1 and "autocast" in training and dtype != "float32" and trainable16 and acc >= (0, 30):
            training["fsdp_mixed_precision"] = True
        gap = None
        # Found on the two versions of refs/a100_80gb.csv the engine was first checked on, and kept
        # there; a table collected later (another commit or file) is judged without it.
        if (commit in GAP_COMMITS and PATH == "scripts/benchmarks/refs/a100_80gb.csv" and method == "qlora"
                and fw == "baseline-peft-bnb" and "Mixtral" in model and gpus == 1):
            gap = ("fp32 norms (TRL 0.13 k-bit preparation) feeding Mixtral's experts: over-predicted "
                   "7-12% (docs/accuracy.md#published)")
        if model in CONFIGS:
            cfg = {k: v for k, v in json.load(open(f"tests/data/published/{CONFIGS[model]}")).items()
                   if not k.startswith("_")}
        else:
            cfg = json.load(open(f"configs/models/{CATALOG[model]}.json"))["config"]
        cases.append({
            "id": cid,
            "source": f"https://github.com/{REPO}/blob/{commit}/{PATH}",
            "framework_config": fw or "none",
            **({"known_gap": gap} if gap else {}),
            "model_name": model,
            **({"model_flag": CONFIGS[model]} if model in CONFIGS else {}),
            "model": cfg,
            "training": training,
            "measured": {
                "peak_bytes": int(float(peak)),
                "what": "HF Trainer skip_memory_metrics=False: max over stages of allocated + peaked delta "
                        "(torch.cuda.max_memory_allocated over 100 steps, rank 0)",
                "allocated_after_train_bytes": int(float(row["mem_torch_mem_alloc_in_bytes"])),
                "nvidia_smi_peak_mib": int(float(row["mem_nvidia_mem_reserved"])),
            },
            "env": env,
        })
    json.dump({"source_repo": REPO, "commit": commit, "path": PATH, "env": env, "cases": cases, "excluded": excluded},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
