"""simllm.sweep (simllm.search.sweep, simllm.search.spec, simllm.search.store): grids, Monte Carlo samples
and seeds, validated before any work, run on threads, processes or dask with identical results,
and resumable from a journal."""
import math
import textwrap
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import pytest

import simllm
from simllm.errors import ConfigError
from simllm.report.progress import Progress
from simllm.search import sweep as sw
from simllm.search.spec import load_sweep_spec, make_spec

MODEL = "llama-3.1-8b"
HARDWARE = "h100-sxm"


def _workload(n=100, rate=10.0, **kw):
    return {"num_prompts": n, "request_rate": rate, "input_len": {"distribution": "uniform", "low": 100, "high": 600},
            "output_len": {"distribution": "uniform", "low": 10, "high": 100}, **kw}


def _base(**workload):
    return {"model": MODEL, "hardware": HARDWARE, "serving": {"max_num_seqs": 64}, "workload": _workload(**workload)}


def _same_tables(a, b):
    assert a.dtype == b.dtype
    for name in a.dtype.names:
        if a.dtype[name].kind == "f":
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)  # NaN == NaN here
        else:
            assert a[name].tolist() == b[name].tolist(), name


class RecordingExecutor(Executor):
    """Runs tasks inline and counts them (and the configurations they carry)."""

    def __init__(self):
        self.tasks = 0
        self.configs = 0
        self._max_workers = 1

    def submit(self, fn, /, *args, **kwargs):
        from concurrent.futures import Future

        self.tasks += 1
        self.configs += len(args[1])
        f = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001
            f.set_exception(exc)
        return f


class Interrupt(Exception):
    pass


class StopAfter:
    """A progress object that interrupts the sweep after ``k`` completed configurations."""

    def __init__(self, k):
        self.k = k
        self.done = 0

    def advance(self, n=1):
        self.done += n
        if self.done >= self.k:
            raise Interrupt


# ----------------------------------------------------------------------------- results

def test_max_concurrency_grid_reproduces_simulate():
    values = [1, 4, 32, 256]
    res = sw.sweep(_base(n=120, rate="inf"), grid={"workload.max_concurrency": values}, seeds=[3])
    t = res.table
    assert t["workload.max_concurrency"].tolist() == values
    assert t["seed"].tolist() == [3] * 4 and t["config_id"].tolist() == [0, 1, 2, 3]
    assert set(t["error"]) == {""}
    m, h = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    s = simllm.ServingConfig(max_num_seqs=64)
    base_w = simllm.workload_from_dict(_workload(n=120, rate="inf"))
    for i, c in enumerate(values):
        w = simllm.Workload(**{**base_w.__dict__, "max_concurrency": c, "seed": 3})
        summary = simllm.simulate(m, h, s, w, keep_requests=False, percentiles=(50, 90, 99)).summary
        for name in ("mean_ttft_ms", "p99_ttft_ms", "p90_tpot_ms", "median_itl_ms", "p99_e2el_ms",
                     "request_throughput", "output_throughput", "kv_cache_usage_peak", "num_preemptions",
                     "compute_utilization", "bandwidth_utilization", "error_rate"):
            assert t[name][i] == summary[name], (c, name)
        assert t["max_concurrency"][i] == c
        assert t["gpus"][i] == 1 and t["output_throughput_per_gpu"][i] == summary["output_throughput"]
    # throughput rises with concurrency; the wall-clock keys are not columns (they differ run to run)
    assert np.all(np.diff(t["output_throughput"]) > 0)
    assert "simulation_wall_s" not in t.dtype.names


@pytest.mark.slow  # seconds interpreted: the compiled pass covers it
def test_band_narrows_as_num_prompts_grows():
    res = sw.sweep(_base(rate=8.0), grid={"workload.num_prompts": [50, 2000]}, seeds=5)
    agg = res.aggregate()
    assert agg["n"].tolist() == [5, 5] and agg["workload.num_prompts"].tolist() == [50, 2000]
    for metric in ("mean_e2el_ms", "request_throughput", "mean_ttft_ms"):
        width = (agg[f"{metric}_p95"] - agg[f"{metric}_p5"]) / agg[f"{metric}_mean"]
        assert width[1] < width[0] / 2, (metric, width)
    # the band is numpy's percentiles over the seeds
    for g, n in enumerate([50, 2000]):
        vals = res.table["mean_e2el_ms"][res.table["workload.num_prompts"] == n]
        np.testing.assert_allclose([agg["mean_e2el_ms_p5"][g], agg["mean_e2el_ms_p50"][g], agg["mean_e2el_ms_p95"][g]],
                                   np.percentile(vals, [5, 50, 95]), rtol=1e-12)
        assert agg["mean_e2el_ms_mean"][g] == pytest.approx(vals.mean(), rel=1e-12)


def test_failed_configurations_get_nan_and_the_reason():
    res = sw.sweep(_base(n=20), grid={"serving.tensor_parallel_size": [1, 3], "serving.gpu_memory_utilization": [0.9, 0.1]})
    t = res.table
    ok = t["error"] == ""
    assert ok.tolist() == [True, False, False, False]
    assert "serving.tensor_parallel_size = 3" in t["error"][2] and "divisor" in t["error"][2]
    assert "memory" in t["error"][1].lower()  # a simulated OOM: 10% of the GPU does not hold the weights
    assert np.isnan(t["mean_ttft_ms"][~ok]).all() and np.isfinite(t["mean_ttft_ms"][ok]).all()
    agg = res.aggregate()
    assert agg["n_failed"].tolist() == [0, 1, 1, 1] and np.isnan(agg["mean_ttft_ms_mean"][1])
    text = sw.format_sweep(res)
    assert "failed: config 2, 3: serving.tensor_parallel_size = 3" in text


def test_whole_hardware_swap_and_field_override():
    res = sw.sweep(_base(n=50), grid={"hardware": ["h100-sxm", "h200-sxm"], "hardware.bandwidth_utilization": [0.5, 0.9]})
    t = res.table
    assert t["hardware"].tolist() == ["h100-sxm", "h100-sxm", "h200-sxm", "h200-sxm"]
    assert t["hardware.bandwidth_utilization"].tolist() == [0.5, 0.9, 0.5, 0.9]
    # more bandwidth, faster decode; the H200 has more than the H100
    assert t["mean_tpot_ms"][0] > t["mean_tpot_ms"][1] and t["mean_tpot_ms"][0] > t["mean_tpot_ms"][2]


# ----------------------------------------------------------------------------- Monte Carlo samples

def test_samples_within_bounds_reproducible_and_rounded():
    samples = {"hardware.bandwidth_utilization": {"uniform": [0.6, 0.9]},
               "workload.request_rate": {"loguniform": [1.0, 100.0]},
               "serving.max_num_seqs": {"loguniform": [8, 512]},
               "serving.gpu_memory_utilization": {"normal": [0.85, 0.01]},
               "serving.dtype": {"choice": ["bf16", "fp8"]}}
    spec = make_spec(_base(n=10), samples=samples, num_samples=400, sample_seed=7)
    cols = list(zip(*sw.plan(spec).displays))
    bw, rate, seqs, util, dtype = (np.array(c) for c in cols)
    assert len(bw) == 400 and 0.6 <= bw.min() and bw.max() <= 0.9
    assert 1.0 <= rate.min() and rate.max() <= 100.0
    assert np.median(np.log(rate)) == pytest.approx(np.log(10.0), abs=0.4)  # log-uniform: median at the geometric mean
    assert seqs.dtype.kind == "i" and 8 <= seqs.min() and seqs.max() <= 512  # an integer field: rounded
    assert abs(util.mean() - 0.85) < 4 * 0.01 / math.sqrt(400) and 0.005 < util.std() < 0.02
    assert set(dtype) == {"bf16", "fp8"}
    again = sw.plan(make_spec(_base(n=10), samples=samples, num_samples=400, sample_seed=7))
    assert list(zip(*again.displays)) == cols
    other = sw.plan(make_spec(_base(n=10), samples=samples, num_samples=400, sample_seed=8))
    assert list(zip(*other.displays))[0] != cols[0]
    # each path has its own stream: dropping one leaves the others' draws unchanged
    fewer = {k: v for k, v in samples.items() if k != "workload.request_rate"}
    kept = list(zip(*sw.plan(make_spec(_base(n=10), samples=fewer, num_samples=400, sample_seed=7)).displays))
    assert kept[0] == cols[0]


def test_grid_times_samples_table_and_aggregate_by_grid():
    res = sw.sweep(_base(n=30), grid={"serving.max_num_seqs": [8, 64]},
                   samples={"hardware.compute_utilization": {"uniform": [0.3, 0.6]}}, num_samples=3, seeds=2)
    t = res.table
    assert len(t) == 2 * 3 * 2
    assert t["config_id"].tolist() == [c for c in range(6) for _ in range(2)]
    assert t["grid_id"].tolist() == [0] * 6 + [1] * 6 and t["sample"].tolist() == [0, 0, 1, 1, 2, 2] * 2
    # common random numbers: both grid points get the same draws
    assert t["hardware.compute_utilization"][:6].tolist() == t["hardware.compute_utilization"][6:].tolist()
    by_grid = res.aggregate(by="grid")
    assert by_grid["n"].tolist() == [6, 6] and "hardware.compute_utilization" not in by_grid.dtype.names
    assert by_grid["serving.max_num_seqs"].tolist() == [8, 64]
    assert len(res.aggregate()) == 6
    df = pytest.importorskip("pandas") and res.to_pandas()
    assert len(df) == 12 and "serving.max_num_seqs" in df.columns


# ----------------------------------------------------------------------------- refusing bad specs

@pytest.mark.parametrize("kwargs, key, words", [
    ({"grid": {"serving.max_num_seq": [1, 2]}}, "grid.serving.max_num_seq", "did you mean serving.max_num_seqs"),
    ({"grid": {"workload.max_concurency": [1]}}, "grid.workload.max_concurency", "workload.max_concurrency"),
    ({"grid": {"max_num_seqs": [1]}}, "grid.max_num_seqs", "serving.max_num_seqs"),
    ({"grid": {"serving.max_num_seqs": []}}, "grid.serving.max_num_seqs", "non-empty list"),
    ({"grid": {"serving.max_num_seqs": 8}}, "grid.serving.max_num_seqs", "non-empty list"),
    ({"grid": {"serving.max_num_seqs": [8, "many"]}}, "grid.serving.max_num_seqs", "integer"),
    ({"grid": {"serving.max_num_seqs": [0]}}, "grid.serving.max_num_seqs", "an integer in [1, "),
    ({"grid": {"serving.gpu_memory_utilization": [1.5]}}, "grid.serving.gpu_memory_utilization", "(0, 1]"),
    ({"grid": {"serving.dtype": ["fp7"]}}, "grid.serving.dtype", "fp8"),
    ({"grid": {"hardware.bandwidth_utilization": [1.2]}}, "grid.hardware.bandwidth_utilization", "(0, 1]"),
    ({"grid": {"model.layers": [2.5]}}, "grid.model.layers", "integer"),
    ({"grid": {"hardware": ["h100-sxn"]}}, "grid.hardware", "h100-sxm"),
    ({"grid": {"workload.num_prompts": [0]}}, "grid.workload.num_prompts", ">= 1"),
    ({"grid": {"workload.request_rate": [-1]}}, "grid.workload.request_rate", "> 0"),
    ({"grid": {"workload.input_len": ["long"]}}, "grid.workload.input_len", "length"),
    ({"grid": {"workload.seed": [1, 2]}}, "grid.workload.seed", "seeds"),
    ({"samples": {"workload.request_rate": {"loguniform": [0, 10]}}, "num_samples": 4},
     "samples.workload.request_rate", "0 < lo < hi"),
    ({"samples": {"workload.request_rate": {"loguniform": [-1, 10]}}, "num_samples": 4},
     "samples.workload.request_rate", "0 < lo < hi"),
    ({"samples": {"hardware.compute_utilization": {"normal": [0.5, 0]}}, "num_samples": 4},
     "samples.hardware.compute_utilization", "std > 0"),
    ({"samples": {"hardware.compute_utilization": {"uniform": [0.9, 0.5]}}, "num_samples": 4},
     "samples.hardware.compute_utilization", "lo < hi"),
    ({"samples": {"hardware.compute_utilization": {"gaussian": [0.5, 0.1]}}, "num_samples": 4},
     "samples.hardware.compute_utilization", "known distribution"),
    ({"samples": {"hardware.compute_utilization": {"uniform": [0.5, 0.9]}}}, "num_samples", "num_samples"),
    ({"samples": {"hardware.compute_utilization": {"normal": [0.9, 0.5]}}, "num_samples": 50},
     "samples.hardware.compute_utilization", "(0, 1]"),  # a draw out of range
    ({"seeds": 0}, "seeds", "number of seeds in [1, 10000000]"),
    ({"seeds": 10**8}, "seeds", "number of seeds in [1, 10000000]"),
    ({"seeds": [1, -2]}, "seeds", ">= 0"),
])
def test_bad_specs_are_refused_before_any_simulation(kwargs, key, words):
    ex = RecordingExecutor()
    with pytest.raises(ConfigError) as info:
        sw.sweep(_base(n=10), executor=ex, **kwargs)
    assert ex.tasks == 0
    text = str(info.value)
    assert key in text and words in text, text
    assert "\n" not in text


def test_bad_spec_file_names_file_and_line(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(textwrap.dedent("""\
        base:
          model: llama-3.1-8b
          hardware: h100-sxm
          workload: {num_prompts: 10}
        grid:
          workload.max_concurrency: [1, 2]
          serving.max_num_seq: [8, 16]
        """))
    with pytest.raises(ConfigError) as info:
        load_sweep_spec(spec)
    text = str(info.value)
    assert text.startswith(f"{spec}:7: grid.serving.max_num_seq") and "did you mean serving.max_num_seqs" in text
    spec.write_text(textwrap.dedent("""\
        base: {model: llama-3.1-8b}
        samples:
          workload.request_rate:
            loguniform: [0, 10]
        num_samples: 4
        """))
    with pytest.raises(ConfigError,
                       match=r"sweep\.yaml:4: samples\.workload\.request_rate = \[0, 10\]: expected loguniform: .*0 < lo"):
        load_sweep_spec(spec)
    spec.write_text("base:\n  serving: {max_num_seqs: 0}\n")
    with pytest.raises(ConfigError, match=r"sweep\.yaml:2: base\.serving\.max_num_seqs = 0"):
        load_sweep_spec(spec)
    spec.write_text("base: {}\ngird: {}\n")
    with pytest.raises(ConfigError, match=r"sweep\.yaml:2: gird: unknown key \(did you mean grid\?\)"):
        load_sweep_spec(spec)


def test_spec_file_runs(tmp_path):
    (tmp_path / "wl.yaml").write_text("workload: {num_prompts: 40, request_rate: 5, input_len: 300, output_len: 30}\n")
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(textwrap.dedent("""\
        base:
          model: llama-3.1-8b
          hardware: h100-sxm
          serving: {max_num_seqs: 32}
          workload: wl.yaml              # next to the spec
        grid:
          serving.max_num_seqs: [4, 32]
          workload.input_len: [300, {distribution: uniform, low: 100, high: 500}]
        seeds: [0, 5]
        slo: {ttft: 200, tpot: 20}
        output: out/results.csv
        """))
    spec = load_sweep_spec(spec_path)
    assert spec.output == str(tmp_path / "out" / "results.csv") and len(spec) == 8
    res = sw.run_spec(spec, executor=RecordingExecutor())
    t = res.table
    assert t["workload.input_len"].tolist()[::2] == ["300", "uniform [100, 500)"] * 2
    assert "request_goodput" in t.dtype.names and np.isfinite(t["request_goodput"]).all()
    assert (tmp_path / "out" / "results.csv").is_file()
    assert sw.SweepResult.load(tmp_path / "out" / "results.csv").paths == res.paths


# ----------------------------------------------------------------------------- disaggregated sweeps

@pytest.mark.heavy
def test_disaggregated_grid_reproduces_simulate_disagg():
    """A base.disagg or a prefill. / decode. / disagg. path makes every row a disaggregated run:
    each equals simllm.simulate_disagg of its pools; the gpus column counts both pools."""
    base = {**_base(n=120, rate=20.0), "disagg": {"decode": {"max_num_seqs": 32}}}
    res = sw.sweep(base, grid={"disagg.prefill_instances": [1, 2], "decode.tensor_parallel_size": [1, 2],
                               "prefill.max_num_batched_tokens": [2048]}, executor=RecordingExecutor())
    t = res.table
    assert len(t) == 4 and not any(t["error"])
    m, h = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    w = make_spec(_base(n=120, rate=20.0)).workload
    for row in t:
        p, d_tp = int(row["disagg.prefill_instances"]), int(row["decode.tensor_parallel_size"])
        d = simllm.DisaggConfig(prefill_instances=p, prefill=(("max_num_batched_tokens", 2048),),
                                decode=(("max_num_seqs", 32), ("tensor_parallel_size", d_tp)))
        s = simllm.simulate_disagg(m, h, simllm.ServingConfig(max_num_seqs=64), w, d, keep_requests=False,
                                   percentiles=sw.PERCENTILES).summary
        for key in ("mean_ttft_ms", "p99_tpot_ms", "output_throughput", "request_throughput"):
            assert row[key] == pytest.approx(s[key], rel=1e-12), key
        assert row["gpus"] == p + d_tp
    # a link swept alone makes the base disaggregated (one prefill, one decode instance)
    res = sw.sweep(_base(n=40), grid={"disagg.kv_transfer_bandwidth_gbps": [1.0, 100.0]},
                   executor=RecordingExecutor())
    slow, fast = res.table["mean_ttft_ms"]
    assert slow > fast and list(res.table["gpus"]) == [2.0, 2.0]


@pytest.mark.parametrize("kwargs, key, words", [
    ({"grid": {"disagg.prefill_instances": [0]}}, "grid.disagg.prefill_instances", "1 to 4096"),
    ({"grid": {"decode.max_num_seqs": [0]}}, "grid.decode.max_num_seqs", "an integer in [1, "),
    ({"grid": {"decode.max_num_seq": [8]}}, "grid.decode.max_num_seq", "did you mean decode.max_num_seqs"),
    ({"grid": {"prefill": ["x"]}}, "grid.prefill", "no presets to swap"),
    ({"grid": {"disagg.first_token": ["later"]}}, "grid.disagg.first_token", "auto, prefill, decode"),
])
def test_bad_disaggregated_specs_are_refused_before_any_simulation(kwargs, key, words):
    ex = RecordingExecutor()
    with pytest.raises(ConfigError) as info:
        sw.sweep(_base(n=10), executor=ex, **kwargs)
    assert ex.tasks == 0
    text = str(info.value)
    assert key in text and words in text and "\n" not in text, text


@pytest.mark.heavy
def test_disaggregated_spec_file_names_file_and_line(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(textwrap.dedent("""\
        base:
          workload: {num_prompts: 10}
          disagg:
            prefill_instances: 2
            decode: {max_num_seqs: -1}
        """))
    with pytest.raises(ConfigError, match=r"sweep\.yaml:3: base\.disagg\.decode"):
        load_sweep_spec(spec)
    spec.write_text(textwrap.dedent("""\
        base:
          workload: {num_prompts: 10}
          disagg: {prefill_instances: 2, decode_instance: 1}
        """))
    with pytest.raises(ConfigError, match=r"sweep\.yaml:3: base\.disagg\.decode_instance: unknown key"):
        load_sweep_spec(spec)
    spec.write_text(textwrap.dedent("""\
        base:
          workload: {num_prompts: 20, max_concurrency: 4}
          disagg: {prefill_instances: 2, prefill: {tensor_parallel_size: 2}}
        grid:
          decode.max_num_seqs: [8, 16]
        """))
    res = sw.run_spec(load_sweep_spec(spec), executor=RecordingExecutor())
    assert list(res.table["gpus"]) == [5.0, 5.0] and not any(res.table["error"])


# ----------------------------------------------------------------------------- executors

GRID = {"workload.max_concurrency": [0, 4], "serving.max_num_seqs": [8, 64]}


def test_threads_and_processes_give_identical_tables():
    threads = sw.sweep(_base(), grid=GRID, seeds=2, executor="threads", workers=2, chunk_size=1)
    procs = sw.sweep(_base(), grid=GRID, seeds=2, executor="processes", workers=2)
    inline = sw.sweep(_base(), grid=GRID, seeds=2, executor=RecordingExecutor(), chunk_size=3)
    _same_tables(threads.table, procs.table)
    _same_tables(threads.table, inline.table)
    assert len(threads.table) == 8 and set(threads.table["error"]) == {""}


@pytest.mark.slow
def test_dask_local_cluster_gives_identical_tables():
    distributed = pytest.importorskip("dask.distributed")
    threads = sw.sweep(_base(), grid=GRID, seeds=2, executor="threads")
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None)
    try:
        with distributed.Client(cluster) as client:
            via_executor = sw.sweep(_base(), grid=GRID, seeds=2, executor=client.get_executor(), chunk_size=2)
            via_address = sw.sweep(_base(), grid=GRID, seeds=2, executor="dask", scheduler=cluster.scheduler_address)
    finally:
        cluster.close()
    _same_tables(threads.table, via_executor.table)
    _same_tables(threads.table, via_address.table)


def test_make_executor_refuses_unknown_kinds():
    with pytest.raises(ConfigError, match="--executor = 'gpu'"):
        sw.make_executor("gpu")
    ex = sw.make_executor("threads", workers=3)
    assert isinstance(ex, ThreadPoolExecutor) and ex._max_workers == 3
    ex.shutdown()


def test_chunk_size_aims_at_tens_of_milliseconds():
    small = sw.plan(make_spec(_base(n=100), grid={"serving.max_num_seqs": list(range(1, 2001))}))
    big = sw.plan(make_spec(_base(n=10_000), grid={"serving.max_num_seqs": list(range(1, 2001))}))
    def expected(n):
        return round(sw.TARGET_TASK_S / (sw.COST_FIXED_S + n * sw.COST_PER_REQUEST_S))

    assert sw.choose_chunk_size(small, 2000, 2) == expected(100) == 37
    assert sw.choose_chunk_size(big, 2000, 2) == expected(10_000) == 3
    assert sw.choose_chunk_size(small, 20, 2) == 3  # at least 4 tasks per worker


def test_progress_advances_per_configuration():
    bar = Progress(0, "sweep", enabled=False)
    res = sw.sweep(_base(n=10), grid={"serving.max_num_seqs": [4, 8, 16]}, seeds=2, progress=bar, chunk_size=4)
    assert bar.total == 6 and bar.done == 6 and res.ran == 6


# ----------------------------------------------------------------------------- resume

RESUME_GRID = {"serving.max_num_seqs": [4, 16, 64], "workload.max_concurrency": [0, 8]}


def test_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    out = tmp_path / "results.csv"
    full = sw.sweep(_base(n=40), grid=RESUME_GRID, seeds=2, executor=RecordingExecutor())
    with pytest.raises(Interrupt):
        sw.sweep(_base(n=40), grid=RESUME_GRID, seeds=2, executor=RecordingExecutor(), chunk_size=2,
                 progress=StopAfter(6), resume_from=out)
    journal = tmp_path / "results.csv.partial.csv"
    assert journal.is_file() and not out.exists()
    assert len(journal.read_text().splitlines()) == 2 + 6  # hash line, header, 3 chunks of 2
    ex = RecordingExecutor()
    res = sw.sweep(_base(n=40), grid=RESUME_GRID, seeds=2, executor=ex, chunk_size=2, resume_from=out)
    assert ex.configs == 12 - 6 and res.ran == 6 and res.resumed == 6
    _same_tables(res.table, full.table)
    assert out.is_file() and not journal.exists() and (tmp_path / "results.csv.sweep.json").is_file()
    _same_tables(sw.SweepResult.load(out).table, full.table)
    # run again: nothing left to do
    ex = RecordingExecutor()
    again = sw.sweep(_base(n=40), grid=RESUME_GRID, seeds=2, executor=ex, resume_from=out)
    assert ex.tasks == 0 and again.resumed == 12
    _same_tables(again.table, full.table)
    # more seeds: only the new ones run
    ex = RecordingExecutor()
    more = sw.sweep(_base(n=40), grid=RESUME_GRID, seeds=3, executor=ex, resume_from=out)
    assert ex.configs == 6 and len(more.table) == 18


def test_torn_journal_line_is_dropped(tmp_path):
    out = tmp_path / "r.csv"
    full = sw.sweep(_base(n=30), grid=RESUME_GRID, executor=RecordingExecutor())
    with pytest.raises(Interrupt):
        sw.sweep(_base(n=30), grid=RESUME_GRID, executor=RecordingExecutor(), chunk_size=1, progress=StopAfter(4),
                 resume_from=out)
    journal = tmp_path / "r.csv.partial.csv"
    text = journal.read_text()
    journal.write_text(text[: len(text) - 25])  # killed halfway through writing the 4th row
    ex = RecordingExecutor()
    res = sw.sweep(_base(n=30), grid=RESUME_GRID, executor=ex, resume_from=out)
    assert ex.configs == 3 and res.resumed == 3
    _same_tables(res.table, full.table)


def test_a_different_spec_is_refused_on_the_same_output(tmp_path):
    out = tmp_path / "r.csv"
    with pytest.raises(Interrupt):
        sw.sweep(_base(n=20), grid=RESUME_GRID, executor=RecordingExecutor(), chunk_size=1, progress=StopAfter(2),
                 resume_from=out)
    ex = RecordingExecutor()
    with pytest.raises(ConfigError, match="different spec"):
        sw.sweep(_base(n=20), grid={"serving.max_num_seqs": [4, 16, 65]}, executor=ex, resume_from=out)
    with pytest.raises(ConfigError, match="different spec"):
        sw.sweep(_base(n=21), grid=RESUME_GRID, executor=ex, resume_from=out)
    assert ex.tasks == 0
    sw.sweep(_base(n=20), grid=RESUME_GRID, executor=ex, resume_from=out)  # the same spec finishes it
    with pytest.raises(ConfigError, match="different spec"):  # and the finished output is guarded too
        sw.sweep(_base(n=20), grid={"serving.max_num_seqs": [4]}, executor=RecordingExecutor(), resume_from=out)
    other = tmp_path / "mine.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not the output of a simllm sweep"):
        sw.sweep(_base(n=20), executor=RecordingExecutor(), resume_from=other)
    with pytest.raises(ConfigError, match=r"\.csv or \.parquet"):
        sw.sweep(_base(n=20), executor=RecordingExecutor(), resume_from=tmp_path / "r.json")


# ----------------------------------------------------------------------------- files

def test_csv_round_trip(tmp_path):
    res = sw.sweep(_base(n=20), grid={"serving.tensor_parallel_size": [1, 3], "hardware": ["h100-sxm", "l40s"],
                                      "serving.enable_chunked_prefill": [True, False]}, seeds=2)
    path = res.save(tmp_path / "t.csv")
    back = sw.load(path)
    _same_tables(back.table, res.table)
    assert back.paths == res.paths and back.metrics == res.metrics
    failed = back.table["error"] != ""
    assert (failed[back.table["serving.tensor_parallel_size"] == 3]).all() and not failed[:4].any()
    assert np.isnan(back.table["mean_ttft_ms"][failed]).all() and not np.isnan(back.table["mean_ttft_ms"][~failed]).any()
    assert sw.table_to_csv(back.table) == path.read_text()


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    res = sw.sweep(_base(n=20), grid={"serving.tensor_parallel_size": [1, 3], "hardware": ["h100-sxm", "l40s"]})
    back = sw.SweepResult.load(res.save(tmp_path / "t.parquet"))
    _same_tables(back.table, res.table)
    assert back.paths == res.paths and back.metrics == res.metrics and back.spec_hash == res.spec_hash


@pytest.mark.slow  # seconds interpreted: the compiled pass covers it
def test_sweep_cli_runs_the_shipped_example_and_resumes(tmp_path, capsys):
    import shutil

    import simllm.cli
    from helpers import ROOT

    spec = tmp_path / "s.yaml"
    shutil.copy(ROOT / "configs" / "sweeps" / "concurrency.yaml", spec)
    text = spec.read_text(encoding="utf-8").replace("num_prompts: 2000", "num_prompts: 200")
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "r.csv"
    assert simllm.cli.main(["sweep", str(spec), "-q", "--output", str(out), "--format", "csv"]) == 0
    first = capsys.readouterr().out
    assert first.count("\n") == 1 + 12 * 3 and out.is_file()
    assert simllm.cli.main(["sweep", str(spec), "-q", "--output", str(out)]) == 0
    assert "0 run" in capsys.readouterr().out  # everything resumed from the finished output
    spec.write_text(text.replace("[1, 8,", "[2, 8,"), encoding="utf-8")
    assert simllm.cli.main(["sweep", str(spec), "-q", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err


def test_top_level_functions_survive_importing_their_modules():
    """``simllm.sweep``, ``simllm.pareto`` and ``simllm.optimize`` are the functions, also after
    the modules holding them are imported (a submodule import sets the package's attribute of
    its name, so no module may be named like a top-level function)."""
    import importlib
    import types

    mods = {n: importlib.import_module(f"simllm.search.{n}") for n in ("sweep", "spec", "store", "optimize",
                                                                        "pareto")}
    assert all(isinstance(getattr(simllm.search, n), types.ModuleType) for n in mods)
    for name, mod in (("sweep", "sweep"), ("pareto", "pareto"), ("optimize", "optimize"),
                      ("load_sweep_spec", "spec"), ("SweepResult", "sweep")):
        assert getattr(simllm, name) is getattr(mods[mod], name) and callable(getattr(simllm, name)), name
        assert name in simllm.__all__
