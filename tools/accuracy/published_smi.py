#!/usr/bin/env python3
"""memplan's total (max_memory_reserved from the allocator replay + the CUDA context) against the
nvidia-smi peaks that published tables keep beside max_memory_allocated ("nvidia_smi_peak_mib";
docs/accuracy.md#published-reserved). nvidia-smi also counts NCCL's own buffers, which memplan does
not have, so this is a check of direction and size, not a target.

    python3 tools/accuracy/published_smi.py [--memplan build/src/memplan] [--fsdp-only] FILE...
"""
import argparse
import json
import statistics
import subprocess
import sys


def find(o, key):
    if isinstance(o, dict):
        if key in o:
            return o[key]
        o = list(o.values())
    if isinstance(o, list):
        for v in o:
            x = find(v, key)
            if x is not None:
                return x
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--memplan", default="build/src/memplan")
    ap.add_argument("--fsdp-only", action="store_true")
    a = ap.parse_args()
    errors = []
    for path in a.files:
        for c in json.load(open(path)).get("cases", []):
            smi = c["measured"].get("nvidia_smi_peak_mib")
            if smi is None or (a.fsdp_only and not c["training"].get("fsdp")):
                continue
            flags = list(c["flags"])
            if "stack" in c and "--stack" not in flags:
                flags += ["--stack", c["stack"]]
            r = subprocess.run([a.memplan, "estimate", *flags, "--format", "json"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{c['id']}: {r.stderr.strip()}", file=sys.stderr)
                continue
            total = find(json.loads(r.stdout), "total_bytes") / 2**20
            err = 100 * (total - smi) / smi
            errors.append(err)
            print(f"{c['id']:<55} nvidia-smi {smi:8.0f} MiB  memplan total {total:8.0f} MiB  {err:+7.2f}%")
    if errors:
        print(f"{len(errors)} rows: median |error| {statistics.median(abs(e) for e in errors):.2f}%, "
              f"lowest {min(errors):+.2f}%, highest {max(errors):+.2f}%")


if __name__ == "__main__":
    main()
