"""Your own model (``memscope.Workload``): a nanoGPT-style model and a small convolutional network,
written as a user writes them (tests/scripts/own_*.py), estimated under fake tensors and measured
under the counting allocator with the estimate beside: the predicted peak within 2% of the
counted heap's, the parameters, gradients and optimizer state exact, the parameter count exact to
the parameter, the Record opened in the report. Workloads that cannot be run are refused naming
the function, the field or the op, and no output is left half-written."""

import subprocess
import sys

import pytest

from conftest import SCRIPTS, cli, load, rendered_dom

WORKLOADS = {"nanogpt": ("own_nanogpt.py:workload", ["--batch", "4", "--seq", "256"]),
             "cnn": ("own_cnn.py:workload", ["--batch", "64"])}


def module(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "memscope", "module", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_user_module_s_estimate_is_within_2_percent_of_its_counted_heap(name, mode, tmp_path):
    target, values = WORKLOADS[name]
    out = tmp_path / "run.json"
    p = module("bench", SCRIPTS / target, *values, "--mode", mode, "--steps", 2, "--warmup", 1,
               "--threads", 2, "--record", out)
    assert p.returncode == 0, p.stderr
    r = load(out)
    assert r["spec"]["engine"]["memory"] == "malloc usable", "counted, not RSS"
    mem = r["memory"]
    est = mem["estimate"]
    err = (est["peak_bytes"] - mem["heap_peak_bytes"]) / mem["heap_peak_bytes"]
    assert abs(err) < 0.02, (name, mode, est["peak_bytes"], mem["heap_peak_bytes"])
    assert "predicted" in p.stdout and f"{err * 100:+.2f}%" in p.stdout
    b = mem["breakdown"]
    kept = ["parameters"] + (["gradients", "optimizer_state"] if mode == "train" else [])
    for k in kept:
        assert b[k]["estimated_bytes"] == b[k]["measured_bytes"] > 0, (k, b[k])
    # The batch, held from before the first step: the estimate's inputs, the run's unattributed.
    u = b["unattributed"]
    assert abs(u["estimated_bytes"] - u["measured_bytes"]) < 64 * 1024, u
    # Exact: the model built here, counted by PyTorch.
    import torch
    sys.path.insert(0, str(SCRIPTS))
    try:
        mod = __import__(target.split(".")[0])
    finally:
        sys.path.pop(0)
    built = mod.workload().model
    assert r["model"]["params"] == sum(p.numel() for p in built.parameters())
    assert isinstance(built, torch.nn.Module)


def test_the_measured_record_opens_in_the_report_beside_its_estimate(memscope_bin, tmp_path):
    target, values = WORKLOADS["cnn"]
    rec = tmp_path / "cnn.json"
    assert module("bench", SCRIPTS / target, *values, "--steps", 2, "--warmup", 1,
                  "--record", rec).returncode == 0
    page = tmp_path / "cnn.html"
    cli(memscope_bin, "report", rec, "-o", page)
    dom = rendered_dom(page, tmp_path)
    assert "own_cnn.py:workload" in dom
    assert "estimated" in dom and "measured" in dom


def test_the_python_api_estimates_fits_and_labels_its_figures():
    import torch

    import memscope

    def workload(batch, seq=64):
        model = torch.nn.Sequential(torch.nn.Embedding(1000, 128), torch.nn.Linear(128, 1000))
        return memscope.Workload(model=model, inputs=lambda: torch.randint(0, 1000, (batch, seq)),
                                 loss=lambda m, x: torch.nn.functional.cross_entropy(
                                     m(x).flatten(0, 1), x.flatten()))
    e = memscope.estimate(workload, batch=8)
    params = 1000 * 128 + 128 * 1000 + 1000
    assert e.params == params
    assert e.categories["parameters"] == 4 * params
    # AdamW's two moments, and a step count (one f32) per parameter tensor.
    assert e.categories["optimizer_state"] == 2 * 4 * params + 3 * 4
    assert e.categories["inputs"] == 8 * 64 * 8  # the batch's int64 ids
    assert e.peak_bytes > sum(e.categories[k] for k in ("parameters", "optimizer_state"))
    assert e.reserved_peak_bytes is None
    assert e.flops["total"] >= 3 * 2 * 8 * 64 * 128 * 1000  # the head's product, three passes
    assert e.fits(10 * 2 ** 30) and e.fits("10GiB") and not e.fits("1MiB")
    text = str(e)
    assert "allocated" in text and "MiB" in text and f"{params:,} parameters" in text
    # CUDA's reserved bytes, replayed through the caching allocator (traced on the CPU here).
    c = memscope.estimate(workload, batch=8, device="cuda")
    assert c.reserved_peak_bytes >= c.peak_bytes >= e.peak_bytes
    assert "reserved peak" in str(c)
    # A bigger batch needs more: the estimate follows the function's arguments.
    assert memscope.estimate(workload, batch=32).peak_bytes > e.peak_bytes
    with pytest.raises(memscope.WorkloadError, match="mode='generate'"):
        memscope.estimate(workload, batch=8, mode="generate")


@pytest.mark.parametrize("function, says", [
    ("raises", "own_bad.py:raises raised RuntimeError: no data here"),
    ("nothing", "own_bad.py:nothing returned NoneType, not a memscope.Workload"),
    ("module_only", "own_bad.py:module_only returned the model alone"),
    ("two_devices", "own_bad.py:two_devices: the step mixes tensors on two devices"),
    ("data_dependent", "own_bad.py:data_dependent: the step reads a value from its data "
                       "(aten._local_scalar_dense.default"),
    ("nonzero", "own_bad.py:nonzero: the step reads a value from its data (aten.nonzero"),
    ("not_scalar", "own_bad.py:not_scalar: the training step's loss is (2, 4), not a scalar"),
    ("missing", "own_bad.py: defines no 'missing' (its functions: Branchy, data_dependent"),
])
def test_a_workload_that_cannot_run_is_named(function, says):
    import memscope
    with pytest.raises(memscope.WorkloadError) as e:
        memscope.estimate(f"{SCRIPTS}/own_bad.py:{function}")
    assert says in str(e.value), e.value


def test_the_command_line_says_it_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "est.json"
    p = module("estimate", SCRIPTS / "own_bad.py:data_dependent", "--json", out)
    assert p.returncode == 2, p.stdout
    assert p.stderr.startswith("error: own_bad.py:data_dependent: the step reads a value")
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()


def test_an_output_never_replaces_the_workload_file(tmp_path):
    src = tmp_path / "w.py"
    src.write_text((SCRIPTS / "own_cnn.py").read_text())
    before = src.read_text()
    p = module("estimate", f"{src}:workload", "--json", src)
    assert p.returncode == 2 and "--json" in p.stderr and "destroy the input" in p.stderr
    assert src.read_text() == before
    p = module("estimate", "no_such.py:workload", cwd=tmp_path)
    assert p.returncode == 2 and "no_such.py: no such file" in p.stderr


def test_estimate_fits_exits_by_the_device_figure_and_writes_its_json(tmp_path):
    target, values = WORKLOADS["cnn"]
    out = tmp_path / "est.json"
    ok = module("estimate", SCRIPTS / target, *values, "--fits", "1GiB", "--json", out)
    assert ok.returncode == 0 and "fits in 1.00 GiB (allocated peak" in ok.stdout, ok.stderr
    e = load(out)
    assert e["kind"] == "module-estimate" and e["estimate"]["peak_bytes"] > 0
    no = module("estimate", SCRIPTS / target, *values, "--fits", "1MiB")
    assert no.returncode == 1 and "does not fit in" in no.stdout


def test_the_predicted_time_names_every_kind_and_an_op_without_a_formula_as_uncosted(
        memscope_bin, tmp_path, monkeypatch):
    import torch

    import memscope
    monkeypatch.setenv("MEMSCOPE_CACHE_DIR", str(tmp_path))
    no_roofs = memscope.estimate(f"{SCRIPTS}/own_cnn.py:workload", batch=16, threads=1)
    assert no_roofs.predicted_ms == {} and "memscope peaks --engine torch" in no_roofs.no_time
    cli(memscope_bin, "peaks", "--engine", "torch", "--threads", "1")
    cnn = memscope.estimate(f"{SCRIPTS}/own_cnn.py:workload", batch=16, threads=1)
    kinds = {k["kind"]: k for k in cnn.by_kind}
    # conv2: 2 · (16 · 64 · 16 · 16) · (32 · 9) FLOPs forward, three passes' worth in training.
    conv2 = 2 * (16 * 64 * 16 * 16) * (32 * 9)
    assert kinds["convolution"]["flops"] > 2 * conv2
    assert {"pooling", "norm", "matmul"} <= set(kinds)
    assert "uncosted (no formula)" not in kinds

    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(129, 8)

        def forward(self, x):
            return self.head(torch.fft.rfft(x).abs())

    def spectral(batch=64):
        return memscope.Workload(model=Spectral(), inputs=lambda: torch.randn(batch, 256),
                                 loss=lambda m, x: m(x).sum())
    e = memscope.estimate(spectral, threads=1)
    kinds = {k["kind"]: k for k in e.by_kind}
    fft = kinds["uncosted (no formula)"]
    assert fft["ms"] > 0 and fft["flops"] == 0, fft
    assert "uncosted (no formula)" in str(e)


@pytest.mark.parametrize("name, plan", [("nanogpt", "fsdp"), ("cnn", "ddp")])
def test_a_user_module_s_plan_is_measured_per_rank_under_torchrun_within_2_percent(
        name, plan, tmp_path):
    target, values = WORKLOADS[name]
    out = tmp_path / "run.json"
    p = module("bench", SCRIPTS / target, *values, "--nproc", 2, "--parallel", plan,
               "--steps", 2, "--warmup", 1, "--record", out)
    assert p.returncode == 0, p.stderr
    for rank in (0, 1):
        r = load(tmp_path / f"run.rank{rank}.json")
        assert r["spec"]["engine"]["rank"] == rank and r["spec"]["engine"]["world_size"] == 2
        mem = r["memory"]
        err = (mem["estimate"]["peak_bytes"] - mem["heap_peak_bytes"]) / mem["heap_peak_bytes"]
        assert abs(err) < 0.02, (plan, rank, mem["estimate"]["peak_bytes"],
                                 mem["heap_peak_bytes"])
        assert f"rank {rank} of 2 ({plan})" in p.stdout
        b = mem["breakdown"]
        if plan == "fsdp":
            # Each rank holds half of every block's parameters and its own optimizer state.
            assert b["optimizer_state"]["estimated_bytes"] == b["optimizer_state"][
                "measured_bytes"]
            assert mem["estimate"]["categories"]["gathered_parameters"] > 0
        else:
            assert b["gradient_buckets"]["estimated_bytes"] == b["gradient_buckets"][
                "measured_bytes"] > 0


def test_a_plan_a_user_module_cannot_take_is_refused_by_name():
    import memscope
    cnn = f"{SCRIPTS}/own_cnn.py:workload"
    with pytest.raises(memscope.WorkloadError, match="Net has no repeated blocks to shard"):
        memscope.estimate(cnn, nproc=2, parallel="fsdp")
    with pytest.raises(memscope.WorkloadError, match="parallel='tp:2'"):
        memscope.estimate(cnn, nproc=2, parallel="tp:2")
    with pytest.raises(memscope.WorkloadError, match="nproc=1: parallel='ddp' needs 2"):
        memscope.estimate(cnn, nproc=1, parallel="ddp")
    with pytest.raises(memscope.WorkloadError, match="under torchrun"):
        memscope.measure(cnn, parallel="ddp", record=None)
    ddp = memscope.estimate(cnn, batch=8, nproc=4, parallel="ddp")
    params = 60_554
    assert ddp.categories["gradient_buckets"] == 4 * params
    assert ddp.raw["collectives"]["all_reduce"]["bytes"] == 4 * params
    # The fake process group went with the trace: this process is no rank of 4 now.
    import torch
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("function, mode", [("t5", "train"), ("vit", "train"),
                                            ("whisper", "infer")])
def test_encoder_decoder_vision_and_speech_models_run_as_your_own_workload(function, mode,
                                                                          tmp_path):
    # What `--config` refuses (it feeds one sequence of token ids), given the inputs it takes.
    out = tmp_path / "run.json"
    p = module("bench", SCRIPTS / f"own_transformers.py:{function}", "--mode", mode,
               "--steps", 2, "--warmup", 1, "--threads", 2, "--record", out)
    assert p.returncode == 0, p.stderr
    mem = load(out)["memory"]
    err = (mem["estimate"]["peak_bytes"] - mem["heap_peak_bytes"]) / mem["heap_peak_bytes"]
    assert abs(err) < 0.02, (function, mem["estimate"]["peak_bytes"], mem["heap_peak_bytes"])
