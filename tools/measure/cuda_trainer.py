#!/usr/bin/env python3
"""Measures peak CUDA memory of steady-state training steps with the real Hugging Face stack.

Unlike measure.py (CPU, torch 1.13, our own transcription of the Llama code), this runs what users
run: transformers' own model classes built from a config.json (random weights), PEFT's LoRA,
bitsandbytes' 4-bit weights and 8-bit optimizers, on a CUDA GPU.

* method sft: transformers.Trainer itself (optimizer from `optim`, accelerate autocast for
  bf16/fp16, gradient checkpointing as Trainer enables it). TRL's SFTTrainer PEFT preparation
  is reproduced: adapters cast to bf16 on 4-bit models under bf16, input grads enabled for
  checkpointing.
* method dpo / grpo: the policy-update step of trl_steps.py (TRL's code path, transcribed) on
  transformers' model, with a torch.optim / bitsandbytes optimizer made by Trainer's factory.

For each case, three steps run; the third is measured. The peak is split into phases with hooks:
forward (a forward hook on the causal-LM module), backward (an optimizer step pre-hook), the
optimizer step (a step post-hook). Recorded: torch.cuda.max_memory_allocated (the figure memplan
calls peak_bytes), max_memory_reserved, and the process's memory outside the caching allocator
(cudaMemGetInfo used minus reserved: CUDA context, kernel images, cuBLAS handles), so that
peak reserved + outside = what nvidia-smi shows for the process.

Usage: cuda_trainer.py CASES.json -o OUT.json [--only ID]...   (cases: cuda_cases.py)
"""
import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import tempfile
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trl_steps  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MiB = 2**20


def outside_bytes():
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def env_info():
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0), "gpu_total_bytes": torch.cuda.mem_get_info()[1]}
    for mod in ("transformers", "peft", "accelerate", "bitsandbytes", "trl", "flash_attn"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod] = None
    return info


def runtime_baseline():
    """Memory outside the allocator after CUDA init, and after the first cuBLAS matmul."""
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    r = {"outside_after_init_bytes": outside_bytes()}
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    before = torch.cuda.memory_allocated()
    (a @ a).sum().item()
    torch.cuda.synchronize()
    r["allocated_by_first_matmul_bytes"] = torch.cuda.memory_allocated() - before
    r["outside_after_matmul_bytes"] = outside_bytes()
    del a
    return r


_saved_4bit = {}


def build_model(case, tmp):
    import transformers
    t = case["training"]
    cfg = transformers.AutoConfig.for_model(**case["model"])
    dtype = DTYPES[t.get("torch_dtype", "float32")]
    attn = t.get("attn_implementation", "sdpa")
    torch.manual_seed(0)
    if t.get("load_in_4bit"):
        key = json.dumps(case["model"], sort_keys=True)
        if key not in _saved_4bit:
            with torch.device("cuda"):
                m = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
            path = tempfile.mkdtemp(dir=tmp)
            m.save_pretrained(path)
            del m
            gc.collect()
            torch.cuda.empty_cache()
            _saved_4bit[key] = path
        bnb = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=t.get("bnb_4bit_quant_type", "nf4"),
            bnb_4bit_use_double_quant=t.get("bnb_4bit_use_double_quant", False),
            bnb_4bit_compute_dtype=DTYPES[t.get("bnb_4bit_compute_dtype", "bfloat16")])
        model = transformers.AutoModelForCausalLM.from_pretrained(
            _saved_4bit[key], quantization_config=bnb, torch_dtype=dtype, device_map={"": 0},
            attn_implementation=attn)
    else:
        with torch.device("cuda"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation=attn)
    lora = t.get("lora")
    if lora:
        import peft
        lc = peft.LoraConfig(r=lora.get("r", 16), lora_alpha=lora.get("alpha", 32),
                             lora_dropout=lora.get("dropout", 0.05), target_modules=lora.get("target_modules"),
                             modules_to_save=lora.get("modules_to_save"), task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lc)
        if t.get("load_in_4bit") and t.get("autocast") == "bfloat16":
            # TRL SFTTrainer: adapters of a quantized model are cast to bf16 under --bf16.
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(torch.bfloat16)
        if t.get("gradient_checkpointing"):
            model.enable_input_require_grads()
    return model


def training_args(t, tmp, batch):
    import transformers
    kw = dict(output_dir=tmp, per_device_train_batch_size=batch, gradient_accumulation_steps=1, max_steps=3,
              learning_rate=1e-5, lr_scheduler_type="constant", optim=t.get("optim", "adamw_torch"),
              bf16=t.get("autocast") == "bfloat16", fp16=t.get("autocast") == "float16",
              gradient_checkpointing=bool(t.get("gradient_checkpointing")), report_to=[], save_strategy="no",
              logging_strategy="no", disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0,
              seed=0)
    if t.get("optim_args"):
        kw["optim_args"] = ",".join(f"{k}={v}" for k, v in t["optim_args"].items())
    if "checkpoint_reentrant" in t:
        kw["gradient_checkpointing_kwargs"] = {"use_reentrant": t["checkpoint_reentrant"]}
    return transformers.TrainingArguments(**kw)


class PhaseRecorder:
    """Peak allocated/reserved per phase of the measured step."""

    def __init__(self):
        self.active = False
        self.phases = {}
        self.reserved = 0

    def start(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.phases = {}
        self.reserved = 0
        self.start_allocated = torch.cuda.memory_allocated()
        self.active = True

    def mark(self, phase):
        if not self.active:
            return
        torch.cuda.synchronize()
        self.phases[phase] = max(self.phases.get(phase, 0), torch.cuda.max_memory_allocated())
        self.reserved = max(self.reserved, torch.cuda.max_memory_reserved())
        self.outside = outside_bytes()
        torch.cuda.reset_peak_memory_stats()

    def hook_optimizer(self, opt):
        inner = getattr(opt, "optimizer", opt)
        inner.register_step_pre_hook(lambda *a, **k: self.mark("backward"))
        inner.register_step_post_hook(lambda *a, **k: self.mark("optimizer_step"))

    def hook_model(self, model):
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.register_forward_hook(lambda *a, **k: self.mark("forward"))

    def result(self):
        peak_phase = max(self.phases, key=self.phases.get)
        return {"peak_bytes": self.phases[peak_phase], "peak_phase": peak_phase, "phases": dict(self.phases),
                "reserved_bytes": self.reserved, "outside_allocator_bytes": self.outside,
                "step_start_allocated_bytes": self.start_allocated}


def sft_dataset(vocab, batch, seq, pad_tokens=0):
    """Fixed-length rows; with pad_tokens, every other row ends in that many padding positions
    (attention_mask 0, labels -100), as DataCollatorWithPadding leaves a batch of unequal rows."""
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(batch * 3):
        r = torch.randint(0, vocab, (seq,), generator=g)
        mask = torch.ones(seq, dtype=torch.long)
        labels = r.clone()
        if pad_tokens and i % 2:
            mask[seq - pad_tokens:] = 0
            labels[seq - pad_tokens:] = -100
        out.append({"input_ids": r, "attention_mask": mask, "labels": labels})
    return out


def run_sft(case, tmp):
    import transformers
    t = case["training"]
    model = build_model(case, tmp)
    rec = PhaseRecorder()

    class Cb(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kw):
            rec.hook_optimizer(optimizer)

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                rec.start()

        def on_step_end(self, args, state, control, **kw):
            rec.mark("zero_grad")
            rec.active = False

    rec.hook_model(model)
    trainer = transformers.Trainer(model=model, args=training_args(t, tmp, t["batch"]),
                                   train_dataset=sft_dataset(case["model"]["vocab_size"], t["batch"], t["seq_len"],
                                                             t.get("pad_tokens", 0)),
                                   callbacks=[Cb()])
    trainer.train()
    r = rec.result()
    r["phases"].pop("zero_grad", None)
    r["optimizer_class"] = type(getattr(trainer.optimizer, "optimizer", trainer.optimizer)).__name__
    r["use_cache"] = getattr(getattr(model, "config", None), "use_cache", None)
    layer_fn = None
    for m in model.modules():
        f = getattr(m, "_gradient_checkpointing_func", None)
        if f is not None:
            layer_fn = f
            break
    if layer_fn is not None:
        r["checkpoint_kwargs"] = {k: str(v) for k, v in getattr(layer_fn, "keywords", {}).items()}
    del trainer, model
    return r


def rl_inputs(case, batch):
    t = case["training"]
    vocab = case["model"]["vocab_size"]
    g = torch.Generator().manual_seed(1)
    if t["method"] == "dpo":
        s = t["seq_len"]
        ids = torch.randint(0, vocab, (2 * batch, s), generator=g)
        cm = torch.zeros(2 * batch, s, dtype=torch.long)
        cm[:, s // 2:] = 1
        inputs = {"input_ids": ids, "attention_mask": torch.ones(2 * batch, s, dtype=torch.long), "completion_mask": cm}
        if t.get("precompute_ref_log_probs"):
            inputs["ref_chosen_logps"] = torch.zeros(batch)
            inputs["ref_rejected_logps"] = torch.zeros(batch)
    else:
        P, C = t["max_prompt_length"], t["max_completion_length"]
        inputs = {"prompt_ids": torch.randint(0, vocab, (batch, P), generator=g),
                  "prompt_mask": torch.ones(batch, P, dtype=torch.long),
                  "completion_ids": torch.randint(0, vocab, (batch, C), generator=g),
                  "completion_mask": torch.ones(batch, C, dtype=torch.long),
                  "advantages": torch.randn(batch, generator=g)}
    return {k: v.cuda() for k, v in inputs.items()}


def run_rl(case, tmp):
    import transformers
    t = case["training"]
    trl_steps.AUTOCAST_DEVICE = "cuda"
    model = build_model(case, tmp)
    model.config.use_cache = False  # TRL's trainers train with use_cache=False
    if t.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": t.get("checkpoint_reentrant", False)})
    model.train()
    ref = None
    method = t["method"]
    needs_ref = (method == "dpo" and not t.get("precompute_ref_log_probs")) or (method == "grpo" and t.get("beta", 0.0) != 0.0)
    if needs_ref and not t.get("lora") and t.get("ref_model", "auto") != "none":
        ref = build_model({**case, "training": {**t, "lora": None}}, tmp)
        ref.config.use_cache = False
        for p in ref.parameters():
            p.requires_grad_(False)
        ref.eval()
    args = training_args(t, tmp, t["batch"])
    cls, kw = transformers.Trainer.get_optimizer_cls_and_kwargs(args, model)
    opt = cls([p for p in model.parameters() if p.requires_grad], **kw)
    rec = PhaseRecorder()
    rec.hook_optimizer(opt)
    rec.hook_model(model)
    inputs = rl_inputs(case, t["batch"])
    ac = DTYPES[t["autocast"]] if t.get("autocast") else None

    def step():
        if method == "dpo":
            loss = trl_steps.dpo_compute_loss(model, ref, inputs, ac, t.get("precompute_ref_log_probs", False))
        else:
            temperature, beta = t.get("temperature", 1.0), t.get("beta", 0.0)
            ref_logps = trl_steps.grpo_score(model, ref, inputs, ac, temperature, beta)
            rec.mark("reference_forward")
            step_inputs = dict(inputs)
            if ref_logps is not None:
                step_inputs["ref_per_token_logps"] = ref_logps
            del ref_logps
            loss = trl_steps.grpo_compute_loss(model, step_inputs, ac, temperature, beta)
            del step_inputs
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    rec.start()
    step()
    rec.mark("zero_grad")
    rec.active = False
    r = rec.result()
    r["phases"].pop("zero_grad", None)
    if method == "dpo":
        # The forward hook fires once per model call (policy, then the reference under
        # disable_adapter); the phase named "forward" is the max over both, up to the last call.
        pass
    r["optimizer_class"] = type(opt).__name__
    del model, ref, opt, inputs
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--only", action="append")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new cases after this many seconds")
    args = ap.parse_args()
    t_start = time.time()
    with open(args.cases) as f:
        cases = json.load(f)
    env = env_info()
    base = runtime_baseline()
    print(json.dumps({"env": env, "runtime": base}), flush=True)
    results = []
    tmp = tempfile.mkdtemp(prefix="memplan-cuda-")
    for case in cases:
        if args.only and case["id"] not in args.only:
            continue
        if time.time() - t_start > args.budget_s:
            print(f"{case['id']}: skipped (time budget)", flush=True)
            continue
        t0 = time.time()
        rec = {**case}
        try:
            run = run_rl if case["training"].get("method", "sft") in ("dpo", "grpo") else run_sft
            rec["measured"] = run(case, tmp)
            m = rec["measured"]
            print(f"{case['id']}: peak {m['peak_bytes'] / MiB:.1f} MiB ({m['peak_phase']}) reserved "
                  f"{m['reserved_bytes'] / MiB:.1f} MiB outside {m['outside_allocator_bytes'] / MiB:.1f} MiB "
                  f"in {time.time() - t0:.1f}s", flush=True)
        except torch.cuda.OutOfMemoryError as e:
            rec["error"] = "OutOfMemoryError: " + str(e).splitlines()[0]
            print(f"{case['id']}: OOM", flush=True)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
            print(f"{case['id']}: FAILED {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        rec["env"] = {**env, **base}
        results.append(rec)
        gc.collect()
        torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
