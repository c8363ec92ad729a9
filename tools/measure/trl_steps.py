"""TRL's DPO and GRPO policy-update steps, transcribed for memory fidelity (TRL v1.9, read at
commit f2cd577; see docs/research/trl-dpo-grpo.md for the line references).

- accelerate's mixed-precision wrapper: under bf16/fp16 autocast, model outputs are converted with
  .float() (convert_outputs_to_fp32), so TRL sees fp32 logits; the reference model is wrapped too.
- selective_log_softmax and entropy_from_logits as in trl/trainer/utils.py.
- DPOTrainer._compute_loss: one policy forward on [2b, s] (chosen then rejected), the no-grad
  reference forward (a separate frozen copy, or the policy with adapters disabled under PEFT),
  the sigmoid loss, then the logged metrics (entropy, masked mean logits, argmax accuracy), which
  run before backward.
- GRPOTrainer: the scoring pass (no grad, reference log-probs when beta > 0) and _compute_loss
  with logits_to_keep = C + 1, the in-place temperature division, the entropy under no_grad, and
  the clipped-ratio loss (loss_type "dapo"), then backward.
"""
import contextlib

import torch
import torch.nn.functional as F

import peft_lora

# torch.autocast's device type: "cpu" for the committed CPU measurements, "cuda" in cuda_trainer.py.
AUTOCAST_DEVICE = "cpu"


def selective_log_softmax(logits, index):
    squeeze = index.ndim == logits.ndim - 1
    if squeeze:
        index = index.unsqueeze(-1)
    if logits.dtype in [torch.float32, torch.float64]:
        selected_logits = torch.gather(logits, dim=-1, index=index)
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        per_token_logps = selected_logits - logsumexp_values.unsqueeze(-1)
    else:
        per_token_logps = []
        for row_logits, row_labels in zip(logits, index):
            row_logps = F.log_softmax(row_logits, dim=-1)
            row_per_token_logps = row_logps.gather(dim=-1, index=row_labels)
            per_token_logps.append(row_per_token_logps)
        per_token_logps = torch.stack(per_token_logps)
    if squeeze:
        per_token_logps = per_token_logps.squeeze(-1)
    return per_token_logps


def entropy_from_logits(logits, chunk_size=128):
    original_shape = logits.shape[:-1]
    num_classes = logits.shape[-1]
    flat_logits = logits.reshape(-1, num_classes)
    entropies = []
    for chunk in flat_logits.split(chunk_size, dim=0):
        logps = F.log_softmax(chunk, dim=-1)
        chunk_entropy = -(torch.exp(logps) * logps).sum(-1)
        entropies.append(chunk_entropy)
    entropies = torch.cat(entropies, dim=0)
    return entropies.reshape(original_shape)


def call_model(model, autocast_dtype, **kwargs):
    """accelerate: autocast around forward, then convert_outputs_to_fp32 on 16-bit outputs."""
    if autocast_dtype is None:
        return model(**kwargs)
    with torch.autocast(AUTOCAST_DEVICE, dtype=autocast_dtype):
        outputs = model(**kwargs)
    converted = {k: (v.float() if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16) else v)
                 for k, v in outputs.items()}
    del outputs
    return converted


def ref_context(model, ref_model):
    if ref_model is None:
        if hasattr(model, "disable_adapter"):  # a real peft.PeftModel
            return model.disable_adapter()
        return peft_lora.disable_adapter(model)
    return contextlib.nullcontext()


def dpo_compute_loss(model, ref_model, inputs, autocast_dtype, precompute, beta=0.1):
    outputs = call_model(model, autocast_dtype, input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    input_ids = inputs["input_ids"]
    completion_mask = inputs["completion_mask"]
    shift_logits = outputs["logits"][..., :-1, :]
    shift_labels = input_ids[..., 1:]
    shift_completion_mask = completion_mask[..., 1:]
    per_token_logps = selective_log_softmax(shift_logits, shift_labels)
    per_token_logps[shift_completion_mask == 0] = 0.0
    logps = per_token_logps.sum(dim=1)
    chosen_logps, rejected_logps = logps.chunk(2, dim=0)
    if precompute:
        ref_chosen_logps, ref_rejected_logps = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
    else:
        with torch.no_grad(), ref_context(model, ref_model):
            ref_outputs = call_model(ref_model if ref_model is not None else model, autocast_dtype,
                                     input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        ref_shift_logits = ref_outputs["logits"][..., :-1, :]
        ref_per_token_logps = selective_log_softmax(ref_shift_logits, shift_labels)
        ref_per_token_logps[shift_completion_mask == 0] = 0.0
        ref_logps = ref_per_token_logps.sum(dim=1)
        ref_chosen_logps, ref_rejected_logps = ref_logps.chunk(2, dim=0)
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    logits = chosen_logratios - rejected_logratios
    loss = -F.logsigmoid(beta * logits).mean()
    # Logged metrics, computed before backward.
    per_token_entropy = entropy_from_logits(shift_logits.detach())
    mask = shift_completion_mask
    _ = ((per_token_entropy * mask).sum() / mask.sum()).item()
    chosen_logits, rejected_logits = shift_logits.detach().chunk(2, dim=0)
    chosen_mask, rejected_mask = shift_completion_mask.chunk(2, dim=0)
    _ = chosen_logits[chosen_mask.bool()].mean(-1).sum().item()
    _ = rejected_logits[rejected_mask.bool()].mean(-1).sum().item()
    predictions = chosen_logits.argmax(dim=-1)
    chosen_mask = shift_completion_mask[: len(shift_completion_mask) // 2].bool()
    chosen_labels = shift_labels[: len(shift_labels) // 2]
    _ = ((predictions == chosen_labels) & chosen_mask).sum().item()
    return loss


def grpo_logps(model, input_ids, attention_mask, logits_to_keep, autocast_dtype, temperature, compute_entropy):
    outputs = call_model(model, autocast_dtype, input_ids=input_ids, attention_mask=attention_mask,
                         logits_to_keep=logits_to_keep + 1)
    logits = outputs["logits"]
    logits = logits[:, :-1, :]
    logits = logits[:, -logits_to_keep:, :]
    logits.div_(temperature)
    completion_ids = input_ids[:, -logits_to_keep:]
    logps = selective_log_softmax(logits, completion_ids)
    entropies = None
    if compute_entropy:
        with torch.no_grad():
            entropies = entropy_from_logits(logits)
    return logps, entropies


def grpo_score(model, ref_model, inputs, autocast_dtype, temperature, beta):
    """The no-grad scoring pass of _generate_and_score_completions: reference log-probs."""
    if beta == 0.0:
        return None
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad(), ref_context(model, ref_model):
        ref_logps, _ = grpo_logps(ref_model if ref_model is not None else model, input_ids, attention_mask,
                                  inputs["completion_ids"].size(1), autocast_dtype, temperature, False)
    return ref_logps


def grpo_compute_loss(model, inputs, autocast_dtype, temperature, beta, epsilon=0.2):
    prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logits_to_keep = completion_ids.size(1)
    mask = completion_mask
    per_token_logps, entropies = grpo_logps(model, input_ids, attention_mask, logits_to_keep, autocast_dtype,
                                            temperature, True)
    advantages = inputs["advantages"].unsqueeze(1)
    old_per_token_logps = per_token_logps.detach()
    log_ratio = per_token_logps - old_per_token_logps
    coef_1 = torch.exp(log_ratio)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss1 = coef_1 * advantages
    per_token_loss2 = coef_2 * advantages
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    if beta != 0.0:
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        per_token_loss = per_token_loss + beta * per_token_kl
    loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    _ = ((entropies * mask).sum() / mask.sum()).item()
    return loss
