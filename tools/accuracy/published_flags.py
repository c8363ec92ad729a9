#!/usr/bin/env python3
"""Writes each published case's "flags": the memplan command line a user types for that run.

The published runs (tests/data/published/*.json) state their model, batch, sequence length,
precision, PEFT, quantization and GPU layout, and the library versions they ran with ("env").
memplan-accuracy evaluates every case through these flags plus --stack built from "env", the same
door a user has (issue 35): nothing the engine reads comes from a field only the tests can set.
The "training" block stays as the record of what the source says.

    python3 tools/accuracy/published_flags.py tests/data/published/fms_acceleration_a100*.json
"""
import json
import sys

# fms-acceleration's accelerated-peft-bnb plugin loads and prepares the quantized model itself:
# it freezes it without casting (no prepare_model_for_kbit_training) and keeps PEFT's fp32
# adapters (framework_plugin_bnb.py) - settings a user of the plugin gives memplan as flags.
PLUGIN_FLAGS = {
    "accelerated-peft-bnb": ["--kbit-prepare", "freeze_only", "--adapter-dtype", "float32"],
}


def flags_for(case):
    t = case["training"]
    f = ["--model", case.get("model_flag", case["model_name"]), "--method", t.get("method", "sft"),
         "--batch", str(t["batch"]), "--seq-len", str(t["seq_len"]),
         "--torch-dtype", t.get("torch_dtype", "float32"), "--optim", t.get("optim", "adamw_torch"),
         "--device", t.get("device", "cuda"), "--num-gpus", str(t.get("num_gpus", 1))]
    if t.get("attn_implementation"):
        f += ["--attn-implementation", t["attn_implementation"]]
    if t.get("gradient_checkpointing"):
        f.append("--gradient-checkpointing")
    if t.get("autocast") == "bfloat16":
        f.append("--bf16")
    elif t.get("autocast") == "float16":
        f.append("--fp16")
    if t.get("fsdp"):
        f += ["--fsdp", t["fsdp"]]
    lora = t.get("lora")
    if lora:
        f += ["--use-peft", "--lora-r", str(lora["r"]), "--lora-alpha", "%g" % lora["alpha"],
              "--lora-dropout", "%g" % lora["dropout"],
              "--lora-target-modules", ",".join(lora["target_modules"])]
    q = t.get("quant")
    if q:
        if q.get("load_in_4bit"):
            f.append("--load-in-4bit")
        f += ["--bnb-4bit-quant-type", q.get("quant_type", "nf4")]
        if q.get("double_quant"):
            f.append("--use-bnb-nested-quant")
        if q.get("quant_storage", "uint8") != "uint8":
            f += ["--bnb-4bit-quant-storage", q["quant_storage"]]
    f += PLUGIN_FLAGS.get(case.get("framework_config", "none"), [])
    return f


def stack_for(env):
    libs = ["torch", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "deepspeed",
            "liger-kernel", "vllm", "flash-attn", "torchao"]
    return ",".join("%s==%s" % (k, env[k]) for k in libs if k in env)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        with open(path) as fh:
            doc = json.load(fh)
        doc["stack"] = stack_for(doc["env"])
        for case in doc["cases"]:
            case["flags"] = flags_for(case)
            case["stack"] = stack_for(case.get("env", doc["env"]))
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
