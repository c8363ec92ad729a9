#!/usr/bin/env python3
"""A stand-in training command for memplan profile's tests (tests/cli/test_cmd_profile.cpp).

It allocates memory at a given rate, touching every page so the resident set grows, then does
what the test asks: exit 0, exit with a code, print PyTorch's CUDA OOM message, hang, or leave
children behind. Python 3 only, no numpy.

  standin.py --per-batch-mb 40 --batch 4 --rate-mbps 1000 --then exit
  standin.py --config rung.yaml --per-batch-mb 40          (reads per_device_train_batch_size)
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

MIB = 1 << 20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--config", help="read per_device_train_batch_size from this YAML file")
    p.add_argument("--per-batch-mb", type=float, default=0, help="MiB to allocate per unit of batch")
    p.add_argument("--mb", type=float, default=0, help="MiB to allocate in addition")
    p.add_argument("--rate-mbps", type=float, default=1000, help="allocation rate in MiB/s")
    p.add_argument("--then", default="exit", choices=["exit", "oom", "hang", "sleep"])
    p.add_argument("--sleep", type=float, default=0.0, help="--then sleep: seconds to hold the memory")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--from-batch", type=int, default=1, help="--then and --exit-code apply from this batch on")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (SIGKILL is needed)")
    p.add_argument("--token", default="", help="extra argument given to children, so tests can find them")
    p.add_argument("--children", type=int, default=0, help="children left running (one in its own session)")
    p.add_argument("--child-alloc", action="store_true", help="allocate in a child process instead")
    p.add_argument("--started", help="create this file once running")
    p.add_argument("--log-args", help="append the arguments to this file")
    a = p.parse_args()

    if a.log_args:
        with open(a.log_args, "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\n")
    batch = a.batch
    if a.config:
        text = open(a.config).read()
        m = re.search(r"per_device_train_batch_size:\s*(\d+)", text)
        batch = int(m.group(1))
    print(f"standin: pid {os.getpid()} batch {batch}", flush=True)

    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if batch < a.from_batch:
        a.then, a.exit_code = "exit", 0
    kids = []
    for i in range(a.children):
        kids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", a.token],
                                     start_new_session=(i == 0)))
    if a.started:
        open(a.started, "w").close()

    total = int((a.per_batch_mb * batch + a.mb) * MIB)
    if a.child_alloc:
        child = [sys.executable, __file__, "--mb", str(total / MIB), "--rate-mbps", str(a.rate_mbps),
                 "--then", a.then, "--sleep", str(a.sleep), "--token", a.token]
        sys.exit(subprocess.call(child))

    held = []
    chunk = 4 * MIB
    start = time.monotonic()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        held.append(b"\x01" * n)  # written, so resident
        done += n
        ahead = done / (a.rate_mbps * MIB) - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)

    if a.then == "oom":
        sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                         "GPU 0 has a total capacity of 79.10 GiB of which 1.12 GiB is free.\n")
        sys.exit(1)
    if a.then == "hang":
        while True:
            time.sleep(1)
    if a.then == "sleep":
        time.sleep(a.sleep)
    sys.exit(a.exit_code)


if __name__ == "__main__":
    main()
