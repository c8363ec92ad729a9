"""Peak live tensor bytes of a piece of PyTorch work on the CPU.

PyTorch's CPU allocator reports every allocation and free to the profiler when
profile_memory=True (c10's ProfiledCPUMemoryReporter). Replaying that stream in order gives the
exact live-byte curve of the work; adding the bytes that were already live when it started (every
tensor storage reachable from Python, counted once) gives absolute live bytes, the CPU analogue of
torch.cuda.max_memory_allocated. Phases are marked with record_function ranges and attributed by
timestamp.
"""
import gc

import torch
from torch.profiler import ProfilerActivity, profile, record_function

PHASE_PREFIX = "memplan::"


def live_storage_bytes():
    """Bytes of every distinct tensor storage reachable from Python right now."""
    seen = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and not obj.is_meta:
                st = obj.storage()
                ptr = st.data_ptr()
                if ptr and ptr not in seen:
                    seen[ptr] = st.nbytes()
        except Exception:  # noqa: BLE001 - tensors in odd states (e.g. freed storages) are skipped
            continue
    return sum(seen.values())


class Trace:
    def __init__(self, baseline, events, phases):
        self.baseline = baseline      # live bytes before the traced work started
        self.events = events          # [(t_us, delta_bytes)] in allocation order
        self.phases = phases          # {name: (start_us, end_us)}
        cur = 0
        self.peak_delta = 0
        self.peak_time = None
        self.phase_peak_delta = {name: None for name in phases}
        for t, d in events:
            cur += d
            if cur > self.peak_delta:
                self.peak_delta = cur
                self.peak_time = t
            for name, (a, b) in phases.items():
                if a <= t <= b:
                    v = self.phase_peak_delta[name]
                    self.phase_peak_delta[name] = cur if v is None else max(v, cur)
        self.end_delta = cur

    @property
    def peak(self):
        return self.baseline + self.peak_delta

    def peak_phase(self):
        for name, (a, b) in self.phases.items():
            if self.peak_time is not None and a <= self.peak_time <= b:
                return name
        return None

    def phase_peaks(self):
        return {n: (self.baseline + v if v is not None else None) for n, v in self.phase_peak_delta.items()}


def trace(fn):
    """Runs fn() under the memory profiler and returns a Trace. fn may use phase(name)."""
    gc.collect()
    baseline = live_storage_bytes()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = []
    phases = {}
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if name == "[memory]":
            events.append((e.start_us(), e.nbytes()))
        elif name.startswith(PHASE_PREFIX):
            phases[name[len(PHASE_PREFIX):]] = (e.start_us(), e.start_us() + e.duration_us())
    # Kineto keeps memory records in the order they were reported; sort is stable on equal stamps.
    events.sort(key=lambda x: x[0])
    return Trace(baseline, events, phases)


def phase(name):
    return record_function(PHASE_PREFIX + name)
