"""torchtune's LinearCrossEntropyLoss (torchtune/modules/loss/cross_entropy_loss.py at 02b12d36,
num_output_chunks = 8, its compile strategy disabled there) as the full_finetune recipes call it:
the model's output layer skipped, the labels shifted with torch.hstack onto an ignore column, and
the loss on the final norm's hidden states, chunk by chunk along the sequence.

Written from the upstream source, op for op, for the CPU measurements (measure.py, training
loss_kernel "chunked"); the decoder itself is hf_llama's.
"""
import torch
import torch.nn.functional as F


def shifted_labels(labels, ignore_index=-100):
    """The recipes' `torch.hstack((labels[..., 1:], self.ignore_labels_cache[: labels.shape[0]]))`."""
    ignore = torch.full((labels.shape[0], 1), ignore_index, dtype=labels.dtype)
    return torch.hstack((labels[..., 1:], ignore))


def compute_cross_entropy(linear_projection, hidden_chunk, target_chunk, ignore_index=-100):
    mask_chunk = target_chunk != ignore_index
    if mask_chunk.sum() == 0:
        mask_chunk[0] = True
    target_chunk = target_chunk[mask_chunk]
    hidden_chunk = hidden_chunk[mask_chunk]
    logits = linear_projection(hidden_chunk)
    return F.cross_entropy(logits.float(), target_chunk, reduction="sum", ignore_index=ignore_index)


def linear_cross_entropy(linear_projection, outputs, targets, num_output_chunks=8, ignore_index=-100):
    mask = targets != ignore_index
    total_elements = mask.sum()
    hidden_chunks = outputs.tensor_split(num_output_chunks, dim=1)
    target_chunks = targets.tensor_split(num_output_chunks, dim=1)
    total_loss = 0.0
    for idx in range(len(hidden_chunks)):
        total_loss += compute_cross_entropy(linear_projection, hidden_chunks[idx], target_chunks[idx], ignore_index)
    if total_elements == 0:
        return total_loss
    return total_loss / total_elements
