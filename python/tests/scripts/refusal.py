"""Under the counting malloc: a heap limit refuses an allocation past it, and says so after."""

import json

from memscope import _native

before = _native.counter_refusals()
live = _native.counter_read()[0]
_native.counter_limit(live + 64 * 2**20)
try:
    bytearray(256 * 2**20)
    refused = False
except MemoryError:
    refused = True
_native.counter_limit(0)
small = bytearray(1024)  # within any limit: no refusal
print(json.dumps({"before": before, "refused": refused, "after": _native.counter_refusals()}))
