"""The counting allocator, under `python -m memscope run`: a tensor's storage shows in bytes live
to the byte, up to glibc's rounding; a freed 10 MiB block stays in the peak; realloc moves bytes.
Prints one JSON object of what it saw."""

import ctypes
import json

import torch

from memscope import _native

out = {"active": _native.counter_active()}
live = lambda: _native.counter_read()[0]  # noqa: E731
# A tensor's own objects (TensorImpl, StorageImpl, the Python object) are malloc blocks too:
# an empty tensor's bytes, measured the same way, are subtracted.
ts = [torch.empty(0, dtype=torch.uint8) for _ in range(3)]
t0 = live()
t = torch.empty(0, dtype=torch.uint8)
out["empty"] = live() - t0
t0 = live()
u = torch.empty(1000, dtype=torch.uint8)
out["small"] = live() - t0
del t, u, ts
t0 = live()
t = torch.empty(3 * 2**20 + 5, dtype=torch.uint8)
out["large"] = live() - t0
del t
base = _native.counter_reset_peak()
t = torch.ones(10 * 2**20, dtype=torch.uint8)
del t
out["peak_over_base"] = _native.counter_read()[1] - base
out["after_free"] = live() - base
libc = ctypes.CDLL(None)
libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p
libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
t0 = live()
p = libc.malloc(100)
p = libc.realloc(p, 200000)
out["realloc"] = live() - t0
libc.free(p)
out["freed"] = live() - t0
print(json.dumps(out))
