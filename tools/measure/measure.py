#!/usr/bin/env python3
"""Measures the peak live tensor bytes of one steady-state training step on the CPU.

A case is a JSON object: {"id", "model": {HF config.json fields}, "training": {...}} with training
keys named like memplan's flags: method (sft), batch, seq_len, torch_dtype, autocast (null|bf16),
optim, optim_args, gradient_checkpointing, attn_implementation (eager), lora ({r, alpha, dropout,
target_modules, modules_to_save} or null).

The step follows transformers.Trainer.training_step: the forward (with the loss) under autocast
when enabled, the model outputs dropped before backward (compute_loss returns only the loss),
loss.backward(), optimizer.step(), zero_grad(set_to_none=True). Two warm-up steps create the
optimizer state; the third is measured.

Usage: measure.py CASES.json [-o OUT.json] [--only ID]    (needs Debian's python3-torch)
"""
import argparse
import json
import platform
import sys
import time

import torch

import hf_llama
import memtrace
import optimizers
import peft_lora

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build(case):
    torch.manual_seed(0)
    t = case["training"]
    cfg = hf_llama.Config(case["model"])
    model = hf_llama.LlamaForCausalLM(cfg).to(DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    if lora:
        peft_lora.apply_lora(model, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules"), lora.get("modules_to_save", []))
    if t.get("gradient_checkpointing"):
        reentrant = t.get("checkpoint_reentrant", True)
        model.gradient_checkpointing_enable(use_reentrant=reentrant)
        if lora:
            # TRL's SFTTrainer calls enable_input_require_grads() for PEFT with checkpointing.
            model.enable_input_require_grads()
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"), model.parameters(), t.get("optim_args"))
    b, s = t["batch"], t["seq_len"]
    gen = torch.Generator().manual_seed(1)
    inputs = {
        "input_ids": torch.randint(0, cfg.vocab_size, (b, s), generator=gen),
        "attention_mask": torch.ones(b, s, dtype=torch.long),
    }
    inputs["labels"] = inputs["input_ids"].clone()
    return model, opt, inputs


def train_step(model, opt, inputs, autocast):
    with memtrace.phase("forward"):
        if autocast:
            with torch.autocast("cpu", dtype=DTYPES[autocast]):
                outputs = model(**inputs)
        else:
            outputs = model(**inputs)
        loss = outputs["loss"]
        del outputs
    with memtrace.phase("backward"):
        loss.backward()
    del loss
    with memtrace.phase("optimizer_step"):
        opt.step()
    with memtrace.phase("zero_grad"):
        opt.zero_grad(set_to_none=True)


def run_case(case):
    model, opt, inputs = build(case)
    autocast = case["training"].get("autocast")
    for _ in range(2):
        train_step(model, opt, inputs, autocast)
    t0 = time.time()
    tr = memtrace.trace(lambda: train_step(model, opt, inputs, autocast))
    phases = tr.phase_peaks()
    return {
        "peak_bytes": tr.peak,
        "peak_phase": tr.peak_phase(),
        "baseline_bytes": tr.baseline,
        "phases": {k: v for k, v in phases.items() if k != "zero_grad"},
        "seconds": round(time.time() - t0, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("-o", "--out")
    ap.add_argument("--only", action="append")
    args = ap.parse_args()
    with open(args.cases) as f:
        cases = json.load(f)
    results = []
    for case in cases:
        if args.only and case["id"] not in args.only:
            continue
        r = run_case(case)
        print(f"{case['id']}: peak {r['peak_bytes'] / 2**20:.1f} MiB ({r['peak_phase']}) in {r['seconds']}s",
              file=sys.stderr)
        results.append({**case, "measured": r,
                        "env": {"torch": torch.__version__, "device": "cpu", "python": platform.python_version()}})
    out = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")
    else:
        print(out)


if __name__ == "__main__":
    main()
