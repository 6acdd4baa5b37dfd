"""Sweeps: simulate many configurations — a grid, Monte Carlo samples, several seeds — in
parallel, into one table with an uncertainty band per configuration.

::

    import simllm
    res = simllm.sweep({"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": "random-1k"},
                       grid={"workload.max_concurrency": [1, 4, 32, 256], "hardware": ["h100-sxm", "h200-sxm"]},
                       samples={"hardware.bandwidth_utilization": {"uniform": [0.7, 0.95]}}, num_samples=10,
                       seeds=5)
    res.table["p99_ttft_ms"]            # one row per configuration x seed
    res.aggregate(by="grid")            # per grid point: <metric>_mean, _p5, _p50, _p95
    res.save("results.parquet")

The spec — the base configuration, the paths a grid or samples vary, the seeds — and its checks
are in :mod:`simllm.search.spec`; the table's files, the journal and resuming in
:mod:`simllm.search.store`; :func:`simllm.report.plots.plot_sweep` draws a result.

**The plan.** A configuration is a grid point x a Monte Carlo draw (``config_id = grid_id *
num_samples + sample``); the table has one row per configuration x seed. A configuration that
fails (tensor parallelism not dividing the heads, a simulated OOM) gets NaN metrics and the
message in its ``error`` column.

Swept ``workload.burstiness`` without ``workload.arrival`` switches the arrival process as the
``--burstiness`` flag does (gamma unless 1); a swept ``hardware`` efficiency factor applies under
every ``serving.framework`` (the profile's per-framework value for it is dropped).

**Execution.** Configurations run in chunks (tasks of several configurations): the chunk size
aims at about 50 ms of simulation per task (a rough cost of 1.2 ms + 1.5 us per request, measured
on Llama-3.1-8B / H100; task overhead is ~0.05 ms for threads, ~1 ms for processes and dask), at
most 256, and small enough that every worker gets at least 4 tasks. The base configuration goes
to each worker once (a process pool made here gets it in its initializer; dask gets it
scattered); a task carries only its ``(config_id, overrides, seed)`` items. The default executor
is a thread pool of ``os.cpu_count()`` threads: the numba kernels release the GIL. A process pool
or a dask worker pays a one-time start per worker (importing simllm and loading the compiled
kernels from numba's on-disk cache: ~0.5-1 s; compilation itself only if the cache is cold), done
up front for executors made here. Each simulation depends only on its configuration and seed, so
every executor gives the same table.
"""
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from simllm.config.disagg import DisaggConfig
from simllm.config.hardware import HardwareConfig, load_hardware
from simllm.config.model import ModelConfig, load_model
from simllm.config.serving import SERVING_FLAGS, ServingConfig
from simllm.config.workload import Workload
from simllm.errors import ConfigError
from simllm.search.spec import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    SECTIONS,
    SweepSpec,
    is_number,
    make_spec,
    spec_jsonable,
    spec_values,
)
from simllm.search.store import (
    KEY_COLUMNS,
    Journal,
    check_output_path,
    existing_rows,
    journal_path,
    load_table,
    read_record,
    save_table,
    table_csv,
    write_record,
)
from simllm.sim.results import TIMING_KEYS, summary_gpus
from simllm.sim.runner import (  # the executors, warm-up and chunking figures are this module's API too
    COST_FIXED_S,  # noqa: F401
    COST_PER_REQUEST_S,  # noqa: F401
    EXECUTORS,  # noqa: F401
    MAX_CHUNK,  # noqa: F401
    MIN_TASKS_PER_WORKER,  # noqa: F401
    TARGET_TASK_S,  # noqa: F401
    SharedDraws,
    check_executor,
    default_executor,
    chunk_size_for,
    estimated_cost_s,
    make_executor,  # noqa: F401
    mark_warm,
    run_many,
    warm_up,  # noqa: F401
)
from simllm.sim.disagg import simulate_disagg
from simllm.sim.simulate import simulate
from simllm.sim.stats import band
from simllm.text import table as text_table

log = logging.getLogger("simllm")

#: Percentiles of TTFT, TPOT, ITL and E2E latency in the table.
PERCENTILES = (50, 90, 99)
#: Summary keys left out of the table: wall-clock measurements, which differ run to run.
NONDETERMINISTIC = TIMING_KEYS
_STATS = (("mean", None), ("p5", 5.0), ("p50", 50.0), ("p95", 95.0))


# ----------------------------------------------------------------------------- the plan

@dataclasses.dataclass(frozen=True)
class _Context:
    """What every task needs, shipped once per worker: the base objects, the whole-object swaps
    (``swaps[section][i]``), what to simulate with, and the metric columns."""

    model: ModelConfig
    hardware: HardwareConfig
    serving: ServingConfig
    workload: Workload
    swaps: dict
    percentiles: tuple
    goodput: dict
    metrics: tuple
    key: str
    disagg: DisaggConfig = None  # a disaggregated sweep's base (None: aggregated rows)
    # Rows that differ in the engine or the concurrency alone serve one draw of their requests.
    draws: SharedDraws = dataclasses.field(default_factory=SharedDraws, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated sweep ready to run: per configuration its overrides (``(section, field,
    value)``, swaps first) and table values, the column names, the spec hash."""

    spec: SweepSpec
    overrides: tuple  # per config_id
    displays: tuple  # per config_id: the swept columns' values
    grid_ids: np.ndarray
    sample_ids: np.ndarray
    context: _Context
    spec_hash: str

    @property
    def items(self):
        """(config_id, seed) of every simulation, in table order."""
        return [(c, s) for c in range(len(self.overrides)) for s in self.spec.seeds]


def plan(spec):
    """Validate every value of ``spec`` and lay out its configurations (no simulation).

    Returns
    -------
    Plan
        Kept on the spec: a second call returns the same plan.

    Raises
    ------
    ConfigError
        The first bad value (:func:`~simllm.search.spec.spec_values` checks them).
    """
    cached = spec.__dict__.get("_plan")
    if cached is not None:
        return cached
    swaps, grid_axes, sample_cols = spec_values(spec)
    n_samples = spec.num_samples if spec.samples else 1
    overrides, displays, grid_ids, sample_ids = [], [], [], []
    for g, combo in enumerate(itertools.product(*grid_axes) if grid_axes else [()]):
        for j in range(n_samples):
            chosen = list(combo) + [col[j] for col in sample_cols]
            ov = tuple(sorted((p for p, _ in chosen), key=lambda o: o[1] is not None))  # swaps first
            overrides.append(ov)
            displays.append(tuple(d for _, d in chosen))
            grid_ids.append(g)
            sample_ids.append(j)
    metrics = metric_names(PERCENTILES, tuple(k for k, _ in spec.slo))
    spec_hash = _spec_hash(spec, metrics)
    ctx = _Context(spec.model, spec.hardware, spec.serving, spec.workload, swaps, PERCENTILES, spec.goodput,
                   metrics, spec_hash, spec.disagg_base if spec.disaggregated else None)
    out = Plan(spec, tuple(overrides), tuple(displays), np.asarray(grid_ids, dtype=np.int64),
               np.asarray(sample_ids, dtype=np.int64), ctx, spec_hash)
    object.__setattr__(spec, "_plan", out)  # a frozen dataclass: cached outside its fields
    return out


def _spec_hash(spec, metrics):
    """Hash of everything that decides a row's numbers given its (config_id, seed): the base
    objects, the grid, the samples, the SLOs and the table's metric columns (not the seeds)."""
    payload = {
        "base": {s: spec_jsonable(getattr(spec, s)) for s in SECTIONS + ("disagg",)},
        "grid": [[p, [spec_jsonable(v) for v in vals]] for p, vals in spec.grid],
        "samples": [[p, d.kind, [spec_jsonable(a) for a in d.args]] for p, d in spec.samples],
        "num_samples": spec.num_samples, "sample_seed": spec.sample_seed, "slo": [list(x) for x in spec.slo],
        "metrics": list(metrics), "percentiles": list(PERCENTILES),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- running one chunk

def row_configs(ctx, overrides, seed):
    """The config objects of one row of a plan (``plan(spec).context``, one of its ``overrides``,
    a seed): model, hardware, serving, workload and its DisaggConfig (None for an aggregated
    sweep)."""
    objs = {"model": ctx.model, "hardware": ctx.hardware, "serving": ctx.serving, "workload": ctx.workload}
    changes = {"model": {}, "hardware": {}, "serving": {}, "workload": {"seed": seed}, "prefill": {}, "decode": {},
               "disagg": {}}
    for section, field, value in overrides:
        if field is None:
            objs[section] = ctx.swaps[section][value]
        else:
            changes[section][field] = value
    wc = changes["workload"]
    if "burstiness" in wc and "arrival" not in wc and objs["workload"].arrival != "constant":
        wc["arrival"] = "gamma" if wc["burstiness"] != 1.0 else "poisson"
    disagg = ctx.disagg
    if disagg is not None:
        pools = {role: tuple(sorted({**dict(getattr(disagg, role)), **changes.pop(role)}.items()))
                 for role in ("prefill", "decode")}
        disagg = dataclasses.replace(disagg, **changes.pop("disagg"), **pools)
    for section in SECTIONS:
        if changes[section]:
            objs[section] = dataclasses.replace(objs[section], **changes[section])
    return objs["model"], objs["hardware"], objs["serving"], objs["workload"], disagg


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def summary_metrics(summary, names):
    """The table's metric values of one summary (NaN where a key is missing or not a number):
    ``gpus`` (tensor x data parallel) and ``output_throughput_per_gpu`` are derived."""
    gpus = summary_gpus(summary)
    out = []
    for k in names:
        if k == "gpus":
            out.append(float(gpus))
        elif k == "output_throughput_per_gpu":
            out.append(_number(summary.get("output_throughput")) / gpus)
        else:
            out.append(_number(summary.get(k)))
    return tuple(out)


def sweep_row(ctx, item):
    """The runner's ``evaluate`` for one sweep row: ``item`` is ``(config_id, overrides, seed)``;
    returns the metric values of its summary (a ConfigError becomes the row's error)."""
    _, overrides, seed = item
    m, h, s, w, disagg = row_configs(ctx, overrides, seed)
    kwargs = dict(keep_requests=False, percentiles=ctx.percentiles, goodput=ctx.goodput, requests=ctx.draws.requests(w))
    res = simulate_disagg(m, h, s, w, disagg, **kwargs) if disagg is not None else simulate(m, h, s, w, **kwargs)
    return summary_metrics(res.summary, ctx.metrics)


def row_error(exc):
    """The one-line reason of a failed configuration, naming serving fields by their sweep path
    (``serving.tensor_parallel_size``) where simulate names the command-line flag."""
    if exc.source == "command line":
        field = next((name for name, flag in SERVING_FLAGS.items() if flag == exc.key), None)
        if field is not None:
            return str(ConfigError(exc.expected, key=f"serving.{field}", value=exc.value))
    return str(exc)


@functools.lru_cache(maxsize=None)
def metric_names(percentiles=PERCENTILES, slo_keys=()):
    """The table's metric columns: every numeric key of a summary simulated with these
    percentiles (and goodput SLOs), without wall-clock keys, plus ``gpus`` and
    ``output_throughput_per_gpu``."""
    m, h = load_model(DEFAULT_MODEL), load_hardware(DEFAULT_HARDWARE)
    res = simulate(m, h, ServingConfig(), Workload(num_prompts=4, request_rate=10.0, max_concurrency=2),
                   keep_requests=False, percentiles=percentiles,
                   goodput={k: 1e9 for k in slo_keys} or None)
    mark_warm()
    names = [k for k, v in res.summary.items()
             if k not in NONDETERMINISTIC and is_number(v) and not isinstance(v, bool)]
    return tuple(names) + ("gpus", "output_throughput_per_gpu")


def choose_chunk_size(plan_, n_items, n_workers):
    """Configurations per task for ``plan_``: :func:`simllm.sim.runner.chunk_size_for` at the mean
    estimated cost of its configurations (their request counts)."""
    if not n_items:
        return 1
    return chunk_size_for(mean_cost_s(plan_), n_items, n_workers)


def mean_cost_s(plan_):
    """The mean estimated seconds of a row of ``plan_`` (:func:`simllm.sim.runner.estimated_cost_s`
    of its configurations' request counts, over at most about 64 of them)."""
    costs = []
    for ov in plan_.overrides[:: max(1, len(plan_.overrides) // 64)]:
        n = plan_.context.workload.num_prompts
        for section, field, value in ov:
            if section == "workload" and field is None:
                n = plan_.context.swaps["workload"][value].num_prompts
            elif section == "workload" and field == "num_prompts":
                n = value
        costs.append(estimated_cost_s(n))
    return float(np.mean(costs))


# ----------------------------------------------------------------------------- the result

class SweepResult:
    """A sweep's rows: ``table`` is a numpy structured array with one row per configuration x
    seed: ``config_id``, ``grid_id``, ``sample`` (the Monte Carlo draw), ``seed``, one column per
    swept path (named by it: ``serving.max_num_seqs``; strings for names, numbers otherwise),
    every numeric summary metric (NaN for a configuration that failed) and ``error`` (empty, or
    the one-line reason: a simulated OOM, a tensor-parallel size not dividing the heads, ...).

    Attributes
    ----------
    table : numpy.ndarray
    paths : tuple of str
        The swept columns.
    metrics : tuple of str
        The metric columns.
    spec_hash : str
    ran, resumed : int
        Simulations run by this call, and rows taken from an earlier run's output.
    wall_s : float
    chunk_size : int
    """

    def __init__(self, table, paths, metrics, spec_hash="", ran=0, resumed=0, wall_s=0.0, chunk_size=0,
                 grid_paths=None):
        self.table = table
        self.paths = tuple(paths)
        self.metrics = tuple(metrics)
        self.spec_hash = spec_hash
        self.ran = ran
        self.resumed = resumed
        self.wall_s = wall_s
        self.chunk_size = chunk_size
        self.grid_paths = tuple(self.paths if grid_paths is None else grid_paths)

    def __len__(self):
        return len(self.table)

    def __repr__(self):
        return (f"SweepResult({len(self)} rows, {len(np.unique(self.table['config_id']))} configurations, "
                f"paths={list(self.paths)})")

    @property
    def configs_per_s(self):
        return self.ran / self.wall_s if self.wall_s else math.nan

    def to_pandas(self):
        """The table as a pandas DataFrame (requires pandas)."""
        try:
            import pandas as pd  # noqa: PLC0415 - optional dependency
        except ImportError:
            raise ImportError("SweepResult.to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame({name: self.table[name] for name in self.table.dtype.names})

    def aggregate(self, by="config"):
        """The uncertainty band per group: ``n`` rows, ``n_failed``, and per metric
        ``<metric>_mean``, ``_p5``, ``_p50`` and ``_p95`` over the group's successful rows (NaN
        when none succeeded).

        Parameters
        ----------
        by : "config", "grid" or list of str
            ``config`` (default): per configuration, over seeds. ``grid``: per grid point, over
            seeds and Monte Carlo draws (the sampled paths' columns are left out). Or column
            names to group by.

        Returns
        -------
        numpy.ndarray
            A structured array, one row per group in order of first appearance.
        """
        t = self.table
        if by == "config":
            keys, keep = ["config_id"], ["config_id", "grid_id", "sample"] + list(self.paths)
        elif by == "grid":
            keys, keep = ["grid_id"], ["grid_id"] + list(self.grid_paths)
        else:
            keys = list(by)
            for k in keys:
                if k not in t.dtype.names:
                    raise ConfigError(f"a column of the table ({', '.join(t.dtype.names[:8])}, ...)", key="by",
                                      value=k)
            keep = list(keys)
        codes, n_groups = _group_codes([t[k] for k in keys], len(t))
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes, minlength=n_groups)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        first = order[starts] if n_groups else np.zeros(0, dtype=np.int64)
        dtype = [(k, t.dtype[k]) for k in keep] + [("n", np.int64), ("n_failed", np.int64)]
        dtype += [(f"{m}_{s}", np.float64) for m in self.metrics for s, _ in _STATS]
        out = np.zeros(n_groups, dtype=dtype)
        for k in keep:
            out[k] = t[k][first]
        out["n"] = counts
        out["n_failed"] = np.bincount(codes, weights=(t["error"] != "").astype(np.float64),
                                      minlength=n_groups).astype(np.int64)
        if n_groups and self.metrics:
            # (groups, rows of the largest group, metrics), NaN-padded; sorted so NaN go last
            width = int(counts.max())
            cube = np.full((n_groups, width, len(self.metrics)), np.nan)
            pos = np.arange(len(t)) - starts[codes[order]]
            values = np.stack([t[m] for m in self.metrics], axis=1)
            cube[codes[order], pos] = values[order]
            stats = band(cube, _STATS)
            for j, m in enumerate(self.metrics):
                for s, _ in _STATS:
                    out[f"{m}_{s}"] = stats[s][:, j]
        return out

    # -- files
    def save(self, path):
        """Write the table to ``path``: ``.csv`` (floats written exactly) or ``.parquet`` (needs
        pyarrow), atomically."""
        save_table(self.table, path, {"spec_hash": self.spec_hash, "paths": list(self.paths),
                                       "grid_paths": list(self.grid_paths), "metrics": list(self.metrics)})
        return Path(path)

    @classmethod
    def load(cls, path):
        """Read a table written by :meth:`save` (or a sweep's output)."""
        table, meta = load_table(path)
        if "metrics" not in meta:
            meta = {**(read_record(Path(path)) or {}), **meta}
        names = table.dtype.names
        paths = meta.get("paths")
        if paths is None:  # swept columns are dotted paths or a section name; metrics never are
            paths = [n for n in names if n not in KEY_COLUMNS and ("." in n or n in SECTIONS)]
        metrics = meta.get("metrics")
        if metrics is None:
            metrics = [n for n in names if n not in KEY_COLUMNS and n not in paths and n != "error"]
        return cls(table, paths, metrics, meta.get("spec_hash", ""), grid_paths=meta.get("grid_paths"))


def _group_codes(columns, n):
    """Group number of each row (groups numbered by first appearance) and the group count."""
    group_of = {}
    codes = np.empty(n, dtype=np.int64)
    lists = [c.tolist() for c in columns]
    for i, key in enumerate(zip(*lists)):
        codes[i] = group_of.setdefault(key, len(group_of))
    return codes, len(group_of)


def load(path):
    """:meth:`SweepResult.load`."""
    return SweepResult.load(path)


def _column_dtype(values):
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.bool_
    if all(is_number(v) and float(v) == int(v) and not isinstance(v, (float, np.floating)) for v in values):
        return np.int64
    if all(is_number(v) for v in values):
        return np.float64
    width = max((len(str(v)) for v in values), default=1)
    return f"U{max(width, 1)}"


def _assemble(plan_, rows):
    """The table of ``plan_`` from ``rows`` {(config_id, seed): (metrics, error)}."""
    spec = plan_.spec
    items = [(c, s) for c in range(len(plan_.overrides)) for s in spec.seeds if (c, s) in rows]
    n = len(items)
    paths = spec.paths
    errors = [rows[i][1] for i in items]
    dtype = [("config_id", np.int64), ("grid_id", np.int64), ("sample", np.int64), ("seed", np.int64)]
    for j, p in enumerate(paths):
        dtype.append((p, _column_dtype([d[j] for d in plan_.displays])))
    dtype += [(m, np.float64) for m in plan_.context.metrics]
    dtype.append(("error", f"U{max([len(e) for e in errors] + [1])}"))
    t = np.zeros(n, dtype=dtype)
    if not n:
        return t
    cid = np.fromiter((c for c, _ in items), dtype=np.int64, count=n)
    t["config_id"] = cid
    t["seed"] = np.fromiter((s for _, s in items), dtype=np.int64, count=n)
    t["grid_id"] = plan_.grid_ids[cid]
    t["sample"] = plan_.sample_ids[cid]
    for j, p in enumerate(paths):
        t[p] = [plan_.displays[c][j] for c in cid]
    metrics = np.array([rows[i][0] for i in items], dtype=np.float64).reshape(n, len(plan_.context.metrics))
    for k, m in enumerate(plan_.context.metrics):
        t[m] = metrics[:, k]
    t["error"] = errors
    return t


# ----------------------------------------------------------------------------- running

def run_spec(spec, executor=None, *, workers=None, scheduler=None, chunk_size=None, progress=None, output=None):
    """Run a :class:`~simllm.search.spec.SweepSpec` (see :func:`sweep`); ``output`` defaults to the spec's.

    Returns
    -------
    SweepResult
    """
    plan_ = plan(spec)
    check_executor(executor)
    output = output if output is not None else spec.output
    if output is not None:
        output = Path(output)
        check_output_path(output)
    done = existing_rows(plan_, output) if output is not None else {}
    pending = [(c, s) for c, s in plan_.items if (c, s) not in done]
    resumed = len(plan_.items) - len(pending)
    if progress is not None and hasattr(progress, "total"):
        try:
            progress.total = len(pending)  # drawn with its total from the start
        except AttributeError:
            pass
    start = time.perf_counter()
    rows = dict(done)
    sizes = [0]
    if pending:
        journal = Journal(plan_, output) if output is not None else None
        items = [(c, plan_.overrides[c], s) for c, s in pending]

        def chunk_size_of(n_workers, n_items):
            sizes[0] = int(chunk_size) if chunk_size else choose_chunk_size(plan_, n_items, n_workers)
            return sizes[0]

        def record(out):
            journal_rows = [(items[i][0], items[i][2], *_row(o, len(plan_.context.metrics))) for i, o in out]
            if journal is not None:
                journal.write(journal_rows)
            for config_id, seed, metrics, error in journal_rows:
                rows[(config_id, seed)] = (metrics, error)

        try:
            kind = executor or default_executor(len(items), mean_cost_s(plan_), workers, scheduler)
            run_many(sweep_row, plan_.context, items, kind, workers=workers, scheduler=scheduler,
                     chunk_size=chunk_size_of, progress=progress, on_chunk=record, describe_error=row_error)
        finally:
            if journal is not None:
                journal.close()
    size = sizes[0]
    wall = time.perf_counter() - start
    table = _assemble(plan_, rows)
    grid_paths = tuple(p for p, _ in spec.grid)
    result = SweepResult(table, spec.paths, plan_.context.metrics, plan_.spec_hash, ran=len(pending),
                         resumed=resumed, wall_s=wall, chunk_size=size, grid_paths=grid_paths)
    if output is not None:
        record = {"spec_hash": plan_.spec_hash, "rows": len(table), "configurations": spec.num_configs,
                  "seeds": list(spec.seeds), "paths": list(spec.paths), "grid_paths": list(grid_paths),
                  "metrics": list(plan_.context.metrics), "source": spec.source}
        write_record(output, record)
        result.save(output)
        journal_path(output).unlink(missing_ok=True)
    if pending:
        log.info("sweep: %d simulations in %.2f s (%.1f/s), chunks of %d", len(pending), wall, len(pending) / wall,
                 size)
    return result


def _row(outcome, n_metrics):
    """(metrics, error) of a row from the runner's outcome."""
    return (outcome.value, "") if outcome.ok else ((math.nan,) * n_metrics, outcome.error)


def sweep(base=None, grid=None, samples=None, seeds=None, executor=None, *, num_samples=0, sample_seed=0,
          chunk_size=None, progress=None, resume_from=None, slo=None, workers=None, scheduler=None):
    """Simulate every configuration of a grid and/or Monte Carlo samples, for each seed.

    Parameters
    ----------
    base : dict or SweepSpec, optional
        A loaded spec (:func:`~simllm.search.spec.load_sweep_spec`) runs as it is when nothing
        else is given; its base sections otherwise. Or
        ``{"model": ..., "hardware": ..., "serving": ..., "workload": ...}``: config objects,
        preset names or paths, or mappings in the config files' form (defaults: llama-3.1-8b,
        h100-sxm, vLLM's engine defaults, 1000 requests of 1024/128 tokens at once).
    grid : dict, optional
        ``{path: [values]}``: every combination (the paths: :mod:`simllm.search.spec`).
    samples : dict, optional
        ``{path: {"uniform": [lo, hi]}}`` (or ``loguniform``, ``normal: [mean, std]``,
        ``choice: [...]``), drawn ``num_samples`` times with ``sample_seed``.
    seeds : int or list of int, optional
        Workload seeds: n means 0..n-1; default the base workload's seed.
    executor : concurrent.futures.Executor or str, optional
        Default: a thread pool of ``os.cpu_count()`` threads. ``"threads"``, ``"processes"``
        or ``"dask"`` make one (:func:`make_executor`, with ``workers`` and ``scheduler``) and
        shut it down at the end; an executor given is left running.
    chunk_size : int, optional
        Configurations per task (default: about 50 ms of simulation per task).
    progress : object, optional
        ``progress.advance(n)`` is called as configurations finish (``simllm.report.progress.Progress``);
        a ``total`` attribute is set to the number of simulations this call runs.
    resume_from : str or Path, optional
        The output file (``.csv`` or ``.parquet``): rows are journaled as they finish, and a rerun
        of the same spec skips those already there (:mod:`simllm.search.store`).
    slo : dict, optional
        ``{"ttft": ms, "tpot": ms, "e2el": ms}``: adds ``request_goodput``.

    Returns
    -------
    SweepResult

    Raises
    ------
    ConfigError
        A bad spec, before any simulation runs.
    """
    if isinstance(base, SweepSpec) and grid is None and samples is None and seeds is None and slo is None:
        spec = base  # a loaded spec runs as it is (its own grid, samples, seeds, SLOs)
    else:
        spec = make_spec(base, grid, samples, seeds, num_samples=num_samples, sample_seed=sample_seed, slo=slo)
    return run_spec(spec, executor, workers=workers, scheduler=scheduler, chunk_size=chunk_size,
                    progress=progress, output=resume_from)


# ----------------------------------------------------------------------------- reports

#: The metrics the text report shows: (column, heading).
REPORT_METRICS = (("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
                  ("output_throughput_per_gpu", "tok/s/GPU"), ("p99_ttft_ms", "P99 TTFT ms"),
                  ("p99_tpot_ms", "P99 TPOT ms"), ("mean_e2el_ms", "E2E mean ms"), ("error_rate", "errors"))


def format_cell(value, digits=1):
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "-"
        return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:.3g}"
    return str(value)


def format_sweep(result, max_rows=50):
    """A text table: per configuration (over seeds) the mean of the key metrics, with the P5-P95
    band when there are several seeds; failed configurations show their error."""

    agg = result.aggregate()
    headers = ["config"] + list(result.paths) + ["n"] + [h for _, h in REPORT_METRICS]
    rows = []
    errors = {}  # message -> failed configurations
    t = result.table
    for cid, err in zip(t["config_id"].tolist(), t["error"].tolist()):
        if err and cid not in errors.setdefault(err, []):
            errors[err].append(cid)
    for g in agg[:max_rows]:
        row = [int(g["config_id"])] + [format_cell(g[p], 4) for p in result.paths] + [int(g["n"])]
        for m, _ in REPORT_METRICS:
            mean, lo, hi = g[f"{m}_mean"], g[f"{m}_p5"], g[f"{m}_p95"]
            digits = 3 if m == "error_rate" else 1
            cell = format_cell(mean, digits)
            if g["n"] - g["n_failed"] > 1 and not math.isnan(mean) and format_cell(lo, digits) != format_cell(hi, digits):
                cell += f" [{format_cell(lo, digits)}-{format_cell(hi, digits)}]"
            row.append(cell)
        rows.append(row)
    lines = [f"simllm sweep: {len(agg)} configurations x {len(t) // max(len(agg), 1)} seeds = {len(t)} simulations"
             + (f" ({result.ran} run in {result.wall_s:.1f} s, {result.resumed} resumed)" if result.ran or
                result.resumed else ""),
             text_table(headers, rows)]
    if len(agg) > max_rows:
        lines.append(f"... {len(agg) - max_rows} more configurations (write them with --output FILE)")
    for err, cids in list(errors.items())[:10]:
        shown = ", ".join(str(c) for c in cids[:8]) + (f", ... ({len(cids)} in all)" if len(cids) > 8 else "")
        lines.append(f"failed: config {shown}: {err}")
    if len(errors) > 10:
        lines.append(f"... {len(errors) - 10} more errors")
    return "\n".join(lines)


def result_to_dict(result):
    """JSON-ready: the rows and the per-configuration aggregate."""
    def records(arr):
        names = arr.dtype.names
        cols = [arr[n].tolist() for n in names]
        return [dict(zip(names, vals)) for vals in zip(*cols)] if len(arr) else []

    return {"spec_hash": result.spec_hash, "paths": list(result.paths), "metrics": list(result.metrics),
            "rows": records(result.table), "aggregate": records(result.aggregate())}


def table_to_csv(table):
    """The table as CSV text (floats exactly, NaN as ``nan``)."""
    buf = io.StringIO()
    table_csv(table, buf)
    return buf.getvalue()
