#!/usr/bin/env python3
"""Writes tests/data/published/hf_docs_single_gpu_v100.json: the nine training runs of transformers'
guide "Efficient Training on a Single GPU" (bert-large-uncased on a Tesla V100 16 GB), transcribed by
hand from huggingface/transformers @ 98513dfd0db6dab00d26c1ef3a0e5f7410ce2035,
docs/source/en/perf_train_gpu_one.mdx.

What the guide measures: pynvml's nvmlDeviceGetMemoryInfo(handle).used // 1024**2 ("GPU memory
occupied: N MB", so MiB) after trainer.train() returns, in a fresh Python process per run. The same
page measures what the process holds before any model: 1343 MB after torch.ones((1, 1)).to("cuda")
(the CUDA context with torch's kernels loaded), and 2631 MB after the fp32 model is loaded (1288 MiB
more: the 335,143,938 parameters x 4 B are 1278.5 MiB). What the caching allocator holds at the end
of training is therefore the figure less 1343 MiB; nothing empties the cache in Trainer.train, so
that is the run's max_memory_reserved, plus the few MiB cuBLAS's own workspace takes outside the
allocator. The rows are stored as "reserved_only" with that difference as the published figure, and
memplan-accuracy compares them with the replayed caching allocator.

    python3 tools/accuracy/hf_docs_single_gpu.py
"""
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MIB = 1024 ** 2
CONTEXT_MIB = 1343  # "GPU memory occupied: 1343 MB." after torch.ones((1, 1)).to("cuda")
COMMIT = "98513dfd0db6dab00d26c1ef3a0e5f7410ce2035"
PATH = "docs/source/en/perf_train_gpu_one.mdx"
URL = "https://github.com/huggingface/transformers/blob/%s/%s" % (COMMIT, PATH)
ENV = {
    "gpu": "Tesla V100-SXM2 16 GB (16160 MiB; the page's nvidia-smi output: driver 460.91.03, CUDA 11.2)",
    "torch": "1.10 (inferred: the release current on 2022-01-11, the date of the page's nvidia-smi output; "
             "the page prints no versions)",
    "transformers": "4.16 (inferred: the guide's optimizer list adamw_hf, adamw_torch, adamw_torch_xla, "
                    "adamw_apex_fused, adafactor is 4.16's; adamw_bnb_8bit came in 4.18)",
    "bitsandbytes": "0.26 (inferred from the date; the 8-bit rows build bnb.optim.Adam8bit by hand)",
}
# One stack for every row: memplan reads the transformers version for its loss and attention paths.
STACK = "torch==1.10.1,transformers==4.16.2"
SETTINGS = ("bert-large-uncased loaded with AutoModelForSequenceClassification (BertForSequenceClassification, "
            "num_labels 2 by default, fp32 weights, eager attention: transformers 4.16 has no SDPA path), moved to "
            "the GPU; a dataset of 512 rows of 512 random token ids (every batch 512 tokens long, no padding) with "
            "integer labels; TrainingArguments(output_dir, evaluation_strategy='steps', num_train_epochs=1, "
            "log_level='error', report_to='none') plus each row's arguments: the default optimizer adamw_hf "
            "(transformers' AdamW, two fp32 states), fp16=True is torch.cuda.amp autocast with a GradScaler over "
            "the fp32 weights, gradient_checkpointing=True is BERT's torch.utils.checkpoint per layer (reentrant "
            "in 4.16); 128 optimizer steps, so the Trainer never evaluates (eval_steps 500)")

ROWS = [
    # id suffix, section, quoted output, occupied MiB, extra flags
    ("b4", "Vanilla Training", "per_device_train_batch_size=4", 14949, []),
    ("b1-ga4", "Gradient Accumulation", "per_device_train_batch_size=1, gradient_accumulation_steps=4", 8681,
     ["--grad-accum", "4"]),
    ("b1-ga4-gc", "Gradient Checkpointing",
     "per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True", 6775,
     ["--grad-accum", "4", "--gradient-checkpointing", "--use-reentrant", "true"]),
    ("b4-fp16", "FP16 Training", "per_device_train_batch_size=4, fp16=True", 13939, ["--fp16"]),
    ("b1-ga4-gc-fp16", "FP16 Training",
     "per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True, fp16=True", 7275,
     ["--grad-accum", "4", "--gradient-checkpointing", "--use-reentrant", "true", "--fp16"]),
    ("b4-adafactor", "Adafactor", "per_device_train_batch_size=4, optim=\"adafactor\"", 12295,
     ["--optim", "adafactor"]),
    ("b1-ga4-gc-fp16-adafactor", "Adafactor",
     "per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True, fp16=True, "
     "optim=\"adafactor\"", 4847,
     ["--grad-accum", "4", "--gradient-checkpointing", "--use-reentrant", "true", "--fp16", "--optim", "adafactor"]),
    ("b4-adam8bit", "8-bit Adam", "per_device_train_batch_size=4, optimizers=(bnb.optim.Adam8bit(...), None)", 13085,
     ["--optim", "adamw_bnb_8bit"]),
    ("b1-ga4-gc-fp16-adam8bit", "8-bit Adam",
     "per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True, fp16=True, "
     "optimizers=(bnb.optim.Adam8bit(...), None)", 5363,
     ["--grad-accum", "4", "--gradient-checkpointing", "--use-reentrant", "true", "--fp16", "--optim",
      "adamw_bnb_8bit"]),
]


def flag_value(flags, name, default):
    return flags[flags.index(name) + 1] if name in flags else default


def main():
    # The catalog's bert-large-uncased (configs/models/bert-large-uncased.json, provenance there).
    with open(os.path.join(ROOT, "configs", "models", "bert-large-uncased.json")) as fh:
        bert = json.load(fh)["config"]
    rows = []
    for suffix, section, args, occupied, extra in ROWS:
        batch = "1" if "per_device_train_batch_size=1" in args else "4"
        flags = ["--model", "bert-large-uncased", "--method", "sft", "--head", "classification", "--num-labels", "2",
                 "--batch", batch, "--seq-len", "512", "--torch-dtype", "float32", "--device", "cuda", "--num-gpus",
                 "1", "--attn-implementation", "eager"]
        if "--optim" not in extra:
            flags += ["--optim", "adamw_hf"]
        flags += extra
        reserved_mib = occupied - CONTEXT_MIB
        rows.append({
            "id": "hf-docs-bert-large-v100-" + suffix,
            "source": URL,
            "section": section,
            "quote": "TrainingArguments(%s) ... GPU memory occupied: %d MB." % (args, occupied),
            "model_name": "bert-large-uncased",
            "model": bert,
            "training": {
                "method": "sft", "head": "classification", "num_labels": 2, "batch": int(batch), "seq_len": 512,
                "grad_accum": int(flag_value(extra, "--grad-accum", "1")), "torch_dtype": "float32",
                "autocast": "float16" if "--fp16" in extra else None,
                "optim": flag_value(flags, "--optim", "adamw_hf"), "attn_implementation": "eager",
                "gradient_checkpointing": "--gradient-checkpointing" in extra,
                "device": "cuda", "num_gpus": 1,
            },
            "measured": {
                "peak_bytes": reserved_mib * MIB,
                "nvidia_smi_used_mib": occupied,
                "context_mib": CONTEXT_MIB,
                "what": ("nvidia-smi used memory (pynvml) after training, %d MiB, less the %d MiB the same page "
                         "measures for the CUDA context and torch's kernels: what the caching allocator still holds "
                         "when train() returns, its max_memory_reserved (nothing empties the cache), plus cuBLAS's "
                         "own small workspace" % (occupied, CONTEXT_MIB)),
            },
            "env": ENV,
            "flags": flags,
            "stack": STACK,
        })
    doc = {
        "source_repo": "huggingface/transformers",
        "commit": COMMIT,
        "path": PATH,
        "section": "Efficient Training on a Single GPU: every run's print_summary",
        "env": ENV,
        "settings_from": SETTINGS,
        "reserved_only": rows,
        "not_expressible": [{
            "id": "hf-docs-bert-large-v100-accelerate-loop",
            "source": URL,
            "quote": "the Accelerate training loop with the 8-bit optimizer, batch 1, GA 4, checkpointing, fp16",
            "why_not_expressible": "the page prints no memory figure for it",
        }],
    }
    out = os.path.join(ROOT, "tests", "data", "published", "hf_docs_single_gpu_v100.json")
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
