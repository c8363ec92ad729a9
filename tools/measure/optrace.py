#!/usr/bin/env python3
"""Prints the ATen ops of one training step with the bytes each allocates, what autograd saves,
and the live-byte curve: the evidence behind each op in the engine's step program
(docs/formulas.md). Usage: optrace.py CASES.json --only ID [--phase forward|backward|optimizer_step]
"""
import argparse
import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import measure


def nbytes(t):
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class OpLog(TorchDispatchMode):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        r = func(*args, **(kwargs or {}))
        outs = r if isinstance(r, (tuple, list)) else [r]
        desc = []
        for o in outs:
            if isinstance(o, torch.Tensor):
                desc.append(f"{tuple(o.shape)}:{str(o.dtype)[6:]}:{nbytes(o)}")
        self.out.append(("op", str(func.overloadpacket.__name__), " ".join(desc)))
        return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--only", required=True)
    ap.add_argument("--phase", default="forward")
    args = ap.parse_args()
    case = [c for c in json.load(open(args.cases)) if c["id"] == args.only][0]
    model, opt, inputs, ref = measure.build(case)
    autocast = case["training"].get("autocast")
    for _ in range(2):
        measure.train_step(model, opt, inputs, autocast, case['training'], ref)
    log = []

    def pack(t):
        log.append(("save", "", f"{tuple(t.shape)}:{str(t.dtype)[6:]}:{nbytes(t)} ptr={t.storage().data_ptr() % 100000}"))
        return t

    t = case["training"]
    if args.phase == "forward":
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), OpLog(log):
            loss = measure.forward_loss(model, inputs, autocast, t, ref)
    else:
        loss = measure.forward_loss(model, inputs, autocast, t, ref)
        with OpLog(log):
            if args.phase == "backward":
                loss.backward()
            else:
                loss.backward()
                log.clear()
                opt.step()
    for kind, name, desc in log:
        print(f"{kind:4} {name:28} {desc}")


if __name__ == "__main__":
    main()
