#!/usr/bin/env python3
"""Which op is running when live memory peaks inside a phase, and the live-byte curve around it
(a debugging aid for the engine). Usage: peakop.py CASES.json --only ID [--phase backward]"""
import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

import measure
import memtrace


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--only", required=True)
    ap.add_argument("--phase", default="backward")
    ap.add_argument("--window", type=int, default=12)
    ap.add_argument("--after", type=int, default=4)
    args = ap.parse_args()
    case = [c for c in json.load(open(args.cases)) if c["id"] == args.only][0]
    model, opt, inputs, ref = measure.build(case)
    t, ac = case["training"], case["training"].get("autocast")
    for _ in range(2):
        measure.train_step(model, opt, inputs, ac, t, ref)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        measure.train_step(model, opt, inputs, ac, t, ref)
    evs = list(prof.profiler.kineto_results.events())
    mem = sorted([(e.start_us(), e.nbytes()) for e in evs if e.name() == "[memory]"], key=lambda x: x[0])
    ops = [(e.start_us(), e.start_us() + e.duration_us(), e.name()) for e in evs
           if e.name() != "[memory]" and not e.name().startswith("memplan::")]
    ph = [(e.start_us(), e.start_us() + e.duration_us()) for e in evs if e.name() == memtrace.PHASE_PREFIX + args.phase][0]
    cur, best, best_i, curve = 0, -1, 0, []
    for i, (ts, d) in enumerate(mem):
        cur += d
        curve.append(cur)
        if ph[0] <= ts <= ph[1] and cur > best:
            best, best_i = cur, i
    for i in range(max(0, best_i - args.window), min(len(mem), best_i + args.after)):
        ts, d = mem[i]
        inner = [o for o in ops if o[0] <= ts <= o[1]]
        name = min(inner, key=lambda o: o[1] - o[0])[2] if inner else "?"
        print(f"{'>>' if i == best_i else '  '} {d / 2**20:+9.2f} MiB -> {curve[i] / 2**20:9.2f}  {name}")


if __name__ == "__main__":
    main()
