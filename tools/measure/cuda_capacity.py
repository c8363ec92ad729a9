#!/usr/bin/env python3
"""Finds the largest micro-batch that really trains on this GPU, to check memplan's capacity
predictions and its plan's safety margin (docs/accuracy.md#capacity-on-a-real-gpu).

For each configuration, runs cuda_trainer.run_sft at increasing batch sizes until the step
raises torch.cuda.OutOfMemoryError; records the peak (allocated and reserved) of every batch that
ran and the allocator's retry count (cudaMalloc retries after freeing cached blocks).

Usage: cuda_capacity.py CASES.json -o OUT.json   (each case: a cuda_cases.py case with "batches")
"""
import argparse
import gc
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_trainer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    with open(args.cases) as f:
        cases = json.load(f)
    env = {**cuda_trainer.env_info(), **cuda_trainer.runtime_baseline()}
    tmp = tempfile.mkdtemp(prefix="memplan-cap-")
    out = []
    for case in cases:
        rec = {**case, "runs": [], "env": env}
        for b in case["batches"]:
            c = {**case, "training": {**case["training"], "batch": b}}
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            try:
                m = cuda_trainer.run_sft(c, tmp)
                m["batch"] = b
                m["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
                rec["runs"].append(m)
                print(f"{case['id']} b={b}: ran, peak {m['peak_bytes'] / 2**30:.2f} GiB reserved "
                      f"{m['reserved_bytes'] / 2**30:.2f} GiB retries {m['num_alloc_retries']}", flush=True)
            except torch.cuda.OutOfMemoryError as e:
                rec["runs"].append({"batch": b, "oom": True, "message": str(e).splitlines()[0][:300]})
                print(f"{case['id']} b={b}: OOM", flush=True)
                break
            finally:
                gc.collect()
                torch.cuda.empty_cache()
        out.append(rec)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
