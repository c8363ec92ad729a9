#!/usr/bin/env python3
"""Measures the peak live tensor bytes of one steady-state training step on the CPU.

A case is a JSON object: {"id", "model": {HF config.json fields}, "training": {...}} with training
keys named like memplan's flags: method (sft), batch, seq_len, torch_dtype, autocast (null|bf16),
optim, optim_args, gradient_checkpointing, checkpoint_reentrant, checkpoint_policy (full|op:
torchtitan's per-op selective checkpointing, sac.py), attn_implementation (eager), lora ({r, alpha, dropout,
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

import hf_bert
import hf_cohere
import hf_deepseek
import hf_deepseek_v32
import hf_deberta
import hf_gemma3
import hf_gemma3n
import hf_gemma4
import hf_glm
import hf_gpt_oss
import hf_falcon_h1
import hf_granitemoehybrid
import hf_lfm2
import hf_llama
import hf_llama4
import hf_minimax_m2
import hf_mllama
import hf_modernbert
import hf_nemotron_h
import hf_nomic
import hf_pixtral
import hf_qwen_vl
import hf_qwen3_next
import hf_starcoder2
import hf_qwen3_vl
import memtrace
import optimizers
import peft_lora
import torchtune_loss
import trl_steps

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


ENCODERS = ("bert", "roberta", "xlm-roberta", "deberta-v2", "nomic_bert")
# PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the encoders (deberta-v2: query_proj,
# value_proj since PEFT's first release; the cases measured before this was corrected name their
# four targets, query_proj, key_proj, value_proj, dense, in tests/data/measurements)
ENCODER_LORA_TARGETS = {"deberta-v2": ["query_proj", "value_proj"]}


def build_encoder(case):
    """BERT-family, DeBERTa-v2/v3 and NomicBERT cases: training.head (pooling|mlm|classification),
    texts_per_example; DeBERTa also gradient_checkpointing (reentrant unless checkpoint_reentrant
    is false)."""
    torch.manual_seed(0)
    t = case["training"]
    model_type = case["model"].get("model_type")
    if model_type == "deberta-v2":
        cfg = hf_deberta.Config(case["model"])
        model = hf_deberta.Deberta(cfg, t.get("head", "pooling"))
    elif model_type == "nomic_bert":
        cfg = hf_nomic.Config(case["model"])
        model = hf_nomic.NomicBert(cfg, t.get("head", "pooling"))
    else:
        cfg = hf_bert.Config(case["model"])
        model = hf_bert.Bert(cfg, t.get("head", "pooling"))
    model = model.to(DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    if lora:  # PEFT's default targets (BERT-family models: query, value)
        peft_lora.apply_lora(model, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules") or ENCODER_LORA_TARGETS.get(model_type, ["query", "value"]),
                             # PEFT's SEQ_CLS task type saves the new classifier in full
                             ["classifier"] if t.get("head") == "classification" else [])
    if t.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(use_reentrant=t.get("checkpoint_reentrant", True))
        if lora:  # PEFT + checkpointing: enable_input_require_grads() hooks the word embeddings
            model.word_embeddings.register_forward_hook(lambda module, inp, out: out.requires_grad_(True))
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"),
                                    [p for p in model.parameters() if p.requires_grad], t.get("optim_args"))
    b, s = t["batch"], t["seq_len"]
    gen = torch.Generator().manual_seed(1)

    def column():
        return (torch.randint(0, cfg.vocab_size, (b, s), generator=gen), torch.zeros(b, s, dtype=torch.long),
                torch.ones(b, s, dtype=torch.long))
    if t.get("head", "pooling") == "pooling":
        inputs = {"columns": [column() for _ in range(t.get("texts_per_example", 2))]}
        if t.get("cached_mnrl"):
            inputs["mini_batch_size"] = t.get("mini_batch_size", 32)
    else:
        ids, types, am = column()
        labels = ids.clone() if t.get("head") == "mlm" else torch.zeros(b, dtype=torch.long)
        inputs = {"input_ids": ids, "token_type_ids": types, "attention_mask": am, "labels": labels}
    return model, opt, inputs, None


def build_modernbert(case):
    """ModernBERT cases (hf_modernbert.py, the eager path): training.head (pooling|mlm|classification),
    texts_per_example, gradient_checkpointing (reentrant unless checkpoint_reentrant is false)."""
    torch.manual_seed(0)
    t = case["training"]
    cfg = hf_modernbert.Config(case["model"])
    head = t.get("head", "pooling")
    model = hf_modernbert.ModernBert(cfg, head).to(DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    if lora:  # memplan's default target for ModernBERT: attn.Wqkv
        peft_lora.apply_lora(model, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules") or ["Wqkv"],
                             # PEFT's SEQ_CLS task type saves `classifier` in full, not the prediction `head`
                             ["classifier"] if head == "classification" else [])
    if t.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(use_reentrant=t.get("checkpoint_reentrant", True))
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"),
                                    [p for p in model.parameters() if p.requires_grad], t.get("optim_args"))
    b, s = t["batch"], t["seq_len"]
    gen = torch.Generator().manual_seed(1)

    def column():
        return torch.randint(0, cfg.vocab_size, (b, s), generator=gen), torch.ones(b, s, dtype=torch.long)
    if head == "pooling":
        inputs = {"modern_columns": [column() for _ in range(t.get("texts_per_example", 2))]}
    else:
        ids, am = column()
        labels = ids.clone() if head == "mlm" else torch.zeros(b, dtype=torch.long)
        inputs = {"input_ids": ids, "attention_mask": am, "labels": labels}
    return model, opt, inputs, None


def from_pretrained_dtype(model, dtype):
    """The model as from_pretrained(torch_dtype=dtype) leaves it: parameters in dtype, buffers in
    the dtype their __init__ gave them (the rotary tables' inv_freq stays fp32,
    huggingface/transformers#30709). model.to(dtype) would round those buffers too, and the
    vision tower's apply_rotary_pos_emb_vision would then copy bf16 cos/sin to fp32 in every block."""
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def build_vlm(case):
    """Qwen2.5-VL cases: training.images, image_size (pixels a side, a multiple of 28),
    train_vision_tower and train_projector (LLaMA-Factory's freeze_* flags inverted)."""
    torch.manual_seed(0)
    t = case["training"]
    qwen3 = case["model"].get("model_type") == "qwen3_vl"
    mistral3 = case["model"].get("model_type") == "mistral3"
    llama4 = case["model"].get("model_type") == "llama4"
    family = hf_qwen3_vl if qwen3 else hf_pixtral if mistral3 else hf_llama4 if llama4 else hf_qwen_vl
    cls = (hf_qwen3_vl.Qwen3VLForConditionalGeneration if qwen3 else
           hf_pixtral.Mistral3ForConditionalGeneration if mistral3 else
           hf_llama4.Llama4ForConditionalGeneration if llama4 else hf_qwen_vl.Qwen25VLForConditionalGeneration)
    model = from_pretrained_dtype(cls(case["model"]), DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    for p in model.visual.parameters():
        p.requires_grad_(t.get("train_vision_tower", False) and not lora)
    # The projector: Qwen2.5-VL's merger; Qwen3-VL's merger and DeepStack mergers.
    projector = model.projector_modules() if qwen3 or mistral3 or llama4 else [model.visual.merger]
    for mod in projector:
        for p in mod.parameters():
            p.requires_grad_(t.get("train_projector", False) and not lora)
    if lora:
        # LLaMA-Factory: adapters in the language model (and the tower when it is trained); a
        # trained projector is a modules_to_save copy.
        scope = model if t.get("train_vision_tower") else torch.nn.ModuleList(model.language_model_modules())
        for p in model.parameters():
            p.requires_grad_(False)
        peft_lora.apply_lora(scope, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules"))
        if t.get("train_projector") and llama4:
            model.multi_modal_projector = peft_lora.ModulesToSaveWrapper(model.multi_modal_projector)
        elif t.get("train_projector") and mistral3:
            model.model.multi_modal_projector = peft_lora.ModulesToSaveWrapper(model.model.multi_modal_projector)
        elif t.get("train_projector"):
            model.model.visual.merger = peft_lora.ModulesToSaveWrapper(model.model.visual.merger)
            if qwen3:
                model.model.visual.deepstack_merger_list = peft_lora.ModulesToSaveWrapper(
                    model.model.visual.deepstack_merger_list)
    if t.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(use_reentrant=t.get("checkpoint_reentrant", True))
        if lora:
            model.enable_input_require_grads()
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"),
                                    [p for p in model.parameters() if p.requires_grad], t.get("optim_args"))
    inputs = family.make_inputs(case["model"], t, torch.Generator().manual_seed(1))
    return model, opt, inputs, None


def build_mllama(case):
    """Llama 3.2 Vision cases: training.images (tiles of vision_config.image_size each),
    train_projector; the tower stays frozen (LLaMA-Factory's freeze_vision_tower)."""
    torch.manual_seed(0)
    t = case["training"]
    model = hf_mllama.MllamaForConditionalGeneration(case["model"]).to(DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    for p in model.model.vision_model.parameters():
        p.requires_grad_(False)
    for p in model.model.multi_modal_projector.parameters():
        p.requires_grad_(t.get("train_projector", False) and not lora)
    if lora:
        for p in model.parameters():
            p.requires_grad_(False)
        peft_lora.apply_lora(torch.nn.ModuleList(model.language_model_modules()), lora.get("r", 16),
                             lora.get("alpha", 32), lora.get("dropout", 0.05), lora.get("target_modules"))
        if t.get("train_projector"):
            model.model.multi_modal_projector = peft_lora.ModulesToSaveWrapper(model.model.multi_modal_projector)
    if t.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(use_reentrant=t.get("checkpoint_reentrant", True))
        if lora:
            model.enable_input_require_grads()
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"),
                                    [p for p in model.parameters() if p.requires_grad], t.get("optim_args"))
    inputs = hf_mllama.make_inputs(case["model"], t, torch.Generator().manual_seed(1))
    return model, opt, inputs, None


def build_gemma3_embedding(case):
    """EmbeddingGemma's kind of model: Gemma 3's text model (bidirectional as configured) under
    sentence-transformers' mean pooling, Dense modules and Normalize, trained with MNRL."""
    torch.manual_seed(0)
    t = case["training"]
    cfg = hf_gemma3.Config(case["model"])
    dense = t.get("sentence_transformers", {}).get("dense", [])
    model = hf_gemma3.SentenceModel(cfg, dense).to(DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    if lora:  # SentenceTransformer.add_adapter wraps the transformers model only
        peft_lora.apply_lora(model.auto_model, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules"), lora.get("modules_to_save", []))
    if t.get("gradient_checkpointing"):
        model.auto_model.gradient_checkpointing_enable(use_reentrant=t.get("checkpoint_reentrant", True))
        if lora:
            model.auto_model.enable_input_require_grads()
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"), model.parameters(), t.get("optim_args"))
    b, s = t["batch"], t["seq_len"]
    gen = torch.Generator().manual_seed(1)
    inputs = {"gemma_columns": [(torch.randint(0, cfg.vocab_size, (b, s), generator=gen),
                                 torch.ones(b, s, dtype=torch.long))
                                for _ in range(t.get("texts_per_example", 2))]}
    return model, opt, inputs, None


def build(case):
    if case["model"].get("model_type") == "gemma3_text" and case["training"].get("head") == "pooling":
        return build_gemma3_embedding(case)
    if case["model"].get("model_type") in ENCODERS:
        return build_encoder(case)
    if case["model"].get("model_type") == "modernbert":
        return build_modernbert(case)
    if case["model"].get("model_type") == "mllama":
        return build_mllama(case)
    if case["model"].get("model_type") in ("qwen2_5_vl", "qwen3_vl", "mistral3", "llama4"):
        return build_vlm(case)
    torch.manual_seed(0)
    t = case["training"]
    # Gemma 3's text model (hf_gemma3), DeepSeek-V3 (hf_deepseek) and V3.2 (hf_deepseek_v32), the
    # hybrids (hf_qwen3_next, hf_nemotron_h, hf_lfm2), Llama 4's text model (hf_llama4) or the Llama
    # family (hf_llama).
    model_type = case["model"].get("model_type")
    family = {"gemma3_text": hf_gemma3, "gemma2": hf_gemma3, "deepseek_v3": hf_deepseek, "qwen3_next": hf_qwen3_next,
              "qwen3_5_text": hf_qwen3_next, "qwen3_5_moe_text": hf_qwen3_next,
              "nemotron_h": hf_nemotron_h, "lfm2": hf_lfm2, "gpt_oss": hf_gpt_oss, "starcoder2": hf_starcoder2,
              "minimax_m2": hf_minimax_m2, "deepseek_v32": hf_deepseek_v32,
              "llama4_text": hf_llama4, "gemma4_text": hf_gemma4, "cohere": hf_cohere,
              "cohere2": hf_cohere, "granitemoehybrid": hf_granitemoehybrid, "falcon_h1": hf_falcon_h1,
              "gemma3n_text": hf_gemma3n, "glm": hf_glm, "glm4": hf_glm}.get(model_type, hf_llama)
    cfg = family.Config(case["model"])
    causal_lm = {hf_gemma3: hf_gemma3.Gemma3ForCausalLM, hf_deepseek: hf_deepseek.DeepseekV3ForCausalLM,
                 hf_qwen3_next: hf_qwen3_next.Qwen3NextForCausalLM, hf_nemotron_h: hf_nemotron_h.NemotronHForCausalLM,
                 hf_lfm2: hf_lfm2.Lfm2ForCausalLM, hf_gpt_oss: hf_gpt_oss.GptOssForCausalLM,
                 hf_starcoder2: hf_starcoder2.Starcoder2ForCausalLM, hf_minimax_m2: hf_minimax_m2.MiniMaxM2ForCausalLM,
                 hf_deepseek_v32: hf_deepseek_v32.DeepseekV32ForCausalLM, hf_llama4: hf_llama4.Llama4ForCausalLM,
                 hf_gemma4: hf_gemma4.Gemma4ForCausalLM, hf_cohere: hf_cohere.CohereForCausalLM,
                 hf_granitemoehybrid: hf_granitemoehybrid.GraniteMoeHybridForCausalLM,
                 hf_falcon_h1: hf_falcon_h1.FalconH1ForCausalLM,
                 hf_gemma3n: hf_gemma3n.Gemma3nForCausalLM, hf_glm: hf_glm.GlmForCausalLM,
                 hf_llama: hf_llama.LlamaForCausalLM}[family]
    # A decoder embedding model (head pooling): sentence-transformers loads AutoModel, no LM head.
    embedding = t.get("head") == "pooling"
    model = (hf_llama.LlamaModel(cfg) if embedding else causal_lm(cfg)).to(
        DTYPES[t.get("torch_dtype", "float32")])
    lora = t.get("lora")
    if lora:
        peft_lora.apply_lora(model, lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05),
                             lora.get("target_modules"), lora.get("modules_to_save", []))
    if t.get("gradient_checkpointing"):
        reentrant = t.get("checkpoint_reentrant", True)
        model.gradient_checkpointing_enable(use_reentrant=reentrant)
        if t.get("checkpoint_policy", "full") == "op":  # torchtitan's per-op selective policy (sac.py)
            assert not reentrant, "checkpoint_policy op needs checkpoint_reentrant false"
            for m in model.modules():
                if isinstance(m, hf_llama.GradientCheckpointingLayer):
                    m.checkpoint_policy = "op"
        if lora and t.get("embedding_library") != "llm2vec":
            # TRL's SFTTrainer calls enable_input_require_grads() for PEFT with checkpointing
            # (and transformers does for sentence-transformers' adapters); LLM2Vec's scripts do not.
            model.enable_input_require_grads()
    model.train()
    opt = optimizers.make_optimizer(t.get("optim", "adamw_torch"), model.parameters(), t.get("optim_args"))
    method = t.get("method", "sft")
    ref = None
    if method in ("dpo", "grpo") and t.get("ref_model", "auto") != "none" and not lora:
        needs_ref = method == "dpo" and not t.get("precompute_ref_log_probs") or \
            method == "grpo" and t.get("beta", 0.0) != 0.0
        if needs_ref:  # TRL loads a separate frozen copy of the model
            torch.manual_seed(0)
            ref = causal_lm(cfg).to(DTYPES[t.get("torch_dtype", "float32")])
            for p in ref.parameters():
                p.requires_grad_(False)
            ref.eval()
    b, s = t["batch"], t["seq_len"]
    gen = torch.Generator().manual_seed(1)
    if method == "dpo":
        # b pairs -> 2b sequences (chosen, then rejected); the first half of each is the prompt.
        ids = torch.randint(0, cfg.vocab_size, (2 * b, s), generator=gen)
        completion_mask = torch.zeros(2 * b, s, dtype=torch.long)
        completion_mask[:, s // 2:] = 1
        inputs = {"input_ids": ids, "attention_mask": torch.ones(2 * b, s, dtype=torch.long),
                  "completion_mask": completion_mask}
        if t.get("precompute_ref_log_probs"):
            inputs["ref_chosen_logps"] = torch.zeros(b)
            inputs["ref_rejected_logps"] = torch.zeros(b)
    elif method == "grpo":
        P, C = t["max_prompt_length"], t["max_completion_length"]
        inputs = {"prompt_ids": torch.randint(0, cfg.vocab_size, (b, P), generator=gen),
                  "prompt_mask": torch.ones(b, P, dtype=torch.long),
                  "completion_ids": torch.randint(0, cfg.vocab_size, (b, C), generator=gen),
                  "completion_mask": torch.ones(b, C, dtype=torch.long),
                  "advantages": torch.randn(b, generator=gen)}
    elif embedding:
        inputs = {"decoder_columns": [(torch.randint(0, cfg.vocab_size, (b, s), generator=gen),
                                       torch.ones(b, s, dtype=torch.long))
                                      for _ in range(t.get("texts_per_example", 2))],
                  "pooling": t.get("pooling", "mean"),
                  "library": t.get("embedding_library", "sentence-transformers")}
        if t.get("cached_mnrl"):
            inputs["mini_batch_size"] = t.get("mini_batch_size", 32)
    else:
        inputs = {
            "input_ids": torch.randint(0, cfg.vocab_size, (b, s), generator=gen),
            "attention_mask": torch.ones(b, s, dtype=torch.long),
        }
        if t.get("loss_kernel") == "chunked":  # torchtune's recipe: the loss takes the hidden states
            inputs["torchtune_labels"] = inputs["input_ids"].clone()
        else:
            inputs["labels"] = inputs["input_ids"].clone()
    return model, opt, inputs, ref


def forward_loss(model, inputs, autocast, t=None, ref=None):
    """The forward half of a step (with the loss), as the trainer for `method` runs it."""
    method = (t or {}).get("method", "sft")
    ac = DTYPES[autocast] if autocast else None
    if method == "dpo":
        with memtrace.phase("forward"):
            return trl_steps.dpo_compute_loss(model, ref, inputs, ac, t.get("precompute_ref_log_probs", False))
    if method == "grpo":
        temperature, beta = t.get("temperature", 1.0), t.get("beta", 0.0)
        with memtrace.phase("reference_forward"):
            ref_logps = trl_steps.grpo_score(model, ref, inputs, ac, temperature, beta)
        with memtrace.phase("forward"):
            step_inputs = dict(inputs)
            if ref_logps is not None:
                step_inputs["ref_per_token_logps"] = ref_logps
            del ref_logps
            return trl_steps.grpo_compute_loss(model, step_inputs, ac, temperature, beta)
    if "columns" in inputs:  # sentence-transformers MNRL over the text columns
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            if "mini_batch_size" in inputs:  # CachedMultipleNegativesRankingLoss (GradCache)
                return hf_bert.cached_mnrl_loss(model, inputs["columns"], inputs["mini_batch_size"])
            return hf_bert.mnrl_loss(model, inputs["columns"])
    if "decoder_columns" in inputs and "mini_batch_size" in inputs:  # GradCache: autocast per forward
        with memtrace.phase("forward"):
            return hf_bert.decoder_cached_mnrl_loss(model, inputs["decoder_columns"], inputs["pooling"],
                                                    inputs["mini_batch_size"], ac)
    if "decoder_columns" in inputs:
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            return hf_bert.decoder_mnrl_loss(model, inputs["decoder_columns"], inputs["pooling"], inputs["library"])
    if "gemma_columns" in inputs:
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            return hf_gemma3.mnrl_loss(model, inputs["gemma_columns"])
    if "modern_columns" in inputs:
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            return hf_modernbert.mnrl_loss(model, inputs["modern_columns"])
    if isinstance(model, (hf_bert.Bert, hf_deberta.Deberta, hf_nomic.NomicBert, hf_modernbert.ModernBert)):
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            return model(**inputs)
    if "torchtune_labels" in inputs:
        with memtrace.phase("forward"), torch.autocast("cpu", dtype=ac or torch.bfloat16, enabled=ac is not None):
            hidden = model.model(inputs["input_ids"], inputs["attention_mask"])
            targets = torchtune_loss.shifted_labels(inputs["torchtune_labels"])
            return torchtune_loss.linear_cross_entropy(model.lm_head, hidden, targets)
    with memtrace.phase("forward"):
        if autocast:
            with torch.autocast("cpu", dtype=DTYPES[autocast]):
                outputs = model(**inputs)
        else:
            outputs = model(**inputs)
        # Trainer.compute_loss returns the loss alone: the outputs (logits) go before backward.
        return outputs["loss"]


def train_step(model, opt, inputs, autocast, t=None, ref=None):
    loss = forward_loss(model, inputs, autocast, t, ref)
    with memtrace.phase("backward"):
        loss.backward()
    del loss
    with memtrace.phase("optimizer_step"):
        opt.step()
    with memtrace.phase("zero_grad"):
        opt.zero_grad(set_to_none=True)


def run_case(case):
    model, opt, inputs, ref = build(case)
    t = case["training"]
    autocast = t.get("autocast")
    for _ in range(2):
        train_step(model, opt, inputs, autocast, t, ref)
    t0 = time.time()
    tr = memtrace.trace(lambda: train_step(model, opt, inputs, autocast, t, ref))
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
