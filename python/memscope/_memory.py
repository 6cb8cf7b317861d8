"""Where a phase's memory figures come from, one reader per device kind.

- ``CudaReader``: PyTorch's CUDA caching allocator (``torch.cuda.memory_stats``): allocated and
  reserved bytes, current and peak (the peak window restarted with
  ``torch.cuda.reset_peak_memory_stats`` at every phase start), allocation retries and OOMs.
- ``CountedReader``: every malloc of the process, counted by memscope's preloaded allocator
  (``python -m memscope run``) in usable bytes; PyTorch's CPU tensors are malloc blocks.
- ``RssReader``: resident set size from /proc when the allocator was not preloaded; its peak
  window restarts by writing 5 to /proc/self/clear_refs (VmHWM). Labelled ``rss``.

All of them only read host-side counters: nothing is allocated on the device.
"""

import os

from . import _native

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    """Resident set size of this process (/proc/self/statm), or None off Linux."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return None


def vm_hwm():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class CudaReader:
    memory = "cuda allocated"
    allocator = "PyTorch CUDA caching allocator (allocated bytes; reserved beside)"

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device

    def _stats(self):
        return self.torch.cuda.memory_stats(self.device)

    def reset_peak(self):
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def read(self):
        s = self._stats()
        return {
            "live": s.get("allocated_bytes.all.current", 0),
            "peak": s.get("allocated_bytes.all.peak", 0),
            "reserved": s.get("reserved_bytes.all.current", 0),
            "reserved_peak": s.get("reserved_bytes.all.peak", 0),
            "blocks": s.get("active.all.current", 0),
            "allocations": s.get("allocation.all.allocated", 0),
            "allocated_bytes": s.get("allocated_bytes.all.allocated", 0),
            "alloc_retries": s.get("num_alloc_retries", 0),
            "ooms": s.get("num_ooms", 0),
        }


class CountedReader:
    memory = "malloc usable"
    allocator = "glibc malloc (every block counted by memscope's preloaded allocator, usable bytes)"

    def reset_peak(self):
        _native.counter_reset_peak()

    def read(self):
        live, peak, blocks, allocs, alloc_bytes = _native.counter_read()
        return {
            "live": live,
            "peak": peak,
            "reserved": None,
            "reserved_peak": None,
            "blocks": blocks,
            "allocations": allocs,
            "allocated_bytes": alloc_bytes,
            "alloc_retries": 0,
            "ooms": 0,
        }


class RssReader:
    memory = "rss"
    allocator = ("glibc malloc, not counted (run under `python -m memscope run` to count it): "
                 "memory figures are RSS")

    def reset_peak(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass

    def read(self):
        live = rss_bytes() or 0
        return {
            "live": live,
            "peak": max(vm_hwm() or 0, live),
            "reserved": None,
            "reserved_peak": None,
            "blocks": 0,
            "allocations": 0,
            "allocated_bytes": 0,
            "alloc_retries": 0,
            "ooms": 0,
        }


def reader_for(torch, device):
    """The reader for ``device`` (a torch.device)."""
    if device.type == "cuda":
        return CudaReader(torch, device)
    if device.type == "cpu":
        return CountedReader() if _native.counter_active() else RssReader()
    raise ValueError(
        f"device {device}: memscope records cpu and cuda; move the model to one of them "
        "or pass device='cpu' / 'cuda:N'")


class Since:
    """A CPU reader whose live and peak bytes count from ``base`` (the libraries' bytes before
    the model was built)."""

    def __init__(self, reader, base):
        self.inner, self.base = reader, base
        self.memory, self.allocator = reader.memory, reader.allocator

    def reset_peak(self):
        self.inner.reset_peak()

    def read(self):
        r = dict(self.inner.read())
        r["live"] = max(r["live"] - self.base, 0)
        r["peak"] = max(r["peak"] - self.base, 0)
        return r
