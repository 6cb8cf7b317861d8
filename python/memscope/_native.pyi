"""Types of memscope's native module (``python/src/lib.rs``, built by maturin): the counting
malloc's readings, memscope's timing statistics and leak verdict, the Record's completion and
writer, model configs, output checks, the machine and the token files — the Rust code the
recorder and the workers call. ``python/tests/test_layout.py`` checks that these names are the
module's."""

SCHEMA_VERSION: int
"""The Record schema version this build writes."""
MEMSCOPE_VERSION: str
"""The memscope version the package was built from."""

def counter_active() -> bool:
    """Whether the counting malloc is preloaded (``python -m memscope run``)."""

def counter_read() -> tuple[int, int, int, int, int]:
    """(bytes live, peak since the last reset, blocks live, allocations made, bytes allocated)."""

def counter_reset_peak() -> int:
    """Resets the peak to the live bytes; returns the peak before."""

def counter_limit(bytes: int) -> None:
    """Holds the counted heap to ``bytes`` (a malloc past it fails); ValueError unless the
    counting malloc is active."""

def counter_refusals() -> tuple[int, int]:
    """(allocations the heap limit refused, bytes the first of them asked for)."""

def phase_timings(samples: list[tuple[str, list[float]]]) -> tuple[str, list[str]]:
    """memscope's statistics of each phase's samples (ms): (JSON of the timings, warnings)."""

def leak_verdict(steps: list[int], values: list[float], label: str) -> str:
    """memscope's leak verdict on a per-step series, as JSON."""

def finish_record(record_json: str, samples: list[tuple[str, list[float]]],
                  path: str | None = None, cli_advice: bool = False) -> str:
    """The Record completed as memscope completes its own (timing, throughput, warnings),
    written to ``path`` when given; returns its JSON."""

def model_config(model: str, config: str | None = None) -> tuple[str, int]:
    """A preset or a config file resolved as memscope resolves it: (config JSON, parameters)."""

def check_outputs(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """memscope's rules for output files (name, path) against the inputs (name, path);
    ValueError naming the flag or argument at fault."""

def environment(threads: int) -> str:
    """The machine as a Record's ``environment``, as JSON."""

def torch_estimate(trace_json: str, device: str, train: bool, threads: int,
                   limit: int | None = None
                   ) -> tuple[str, int, str | None, list[tuple[str, float, str, float]]]:
    """A workload's trace (``_tracer.traced``'s answer, with ``traced_on``) replayed as
    ``estimate --engine torch`` replays its own: (the estimate's JSON, the matmul and attention
    FLOPs of one step, why no step time was predicted or None, the predicted ms by op kind as
    (kind, ms, bound, FLOPs); an op memscope has no formula for is ``uncosted (no formula)``)."""

def parse_bytes(flag: str, text: str) -> int:
    """``text`` as bytes by memscope's one convention (``24GiB``, ``512MiB``: binary units, as
    every flag of the command line takes them); ValueError naming ``flag``."""

class TokenFile:
    """A token file (``--data``: .npy, or raw .bin of ``bin_dtype``) read by memscope's reader."""

    def __init__(self, path: str, bin_dtype: str | None = None) -> None: ...
    def batch(self, k: int, batch: int, seq: int, seed: int, vocab: int) -> list[int]:
        """The k-th batch of windows of ``seq + 1`` tokens, flattened."""
    def __len__(self) -> int: ...
