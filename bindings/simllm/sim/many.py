"""``simllm.simulate_many``: many simulations in one call, their summaries back as columns.

Each run is one :func:`~simllm.sim.simulate.simulate` (or
:func:`~simllm.sim.disagg.simulate_disagg`) with exactly its arguments, so every run's numbers
equal the single run's bit for bit. What the runs share is done once: the configurations'
packed cost parameters, kernel tables and memory plan (``simulate``'s pool memo), the expert
routing curves, the compiled kernels, and the workload draws (:class:`~.runner.SharedDraws`:
runs that differ only in the engine or in how the requests are sent serve one draw). The runs go
through the one runner (:func:`~.runner.run_simulations`): chunks on threads (the kernels hold no GIL),
processes or Dask, where each worker holds what the runs share once.

Why not one compiled call looping over the runs with ``prange``: a jitted function that calls the
event loop links its whole machine code into its own and compiles it again (measured on this
project's 2-core VM: a wrapper of the loop cost a full cold compile, minutes, per kernel variant),
and a run's time outside the kernel is spent in Python (configuration, summary), which such a
loop would not remove. Threads over the nogil kernel give the same parallelism.

May import: :mod:`simcore`, :mod:`simllm.config`, :mod:`simllm.sim` and the foundation modules.
"""
import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from simllm.errors import ConfigError
from simllm.sim.results import TIMING_KEYS
from simllm.sim.runner import OK, Base, Task, run_simulations

#: What a run may name (a mapping's keys, a tuple's fields in this order).
RUN_FIELDS = ("model", "hardware", "serving", "workload", "disagg")
_NUMBERS = (int, float, np.integer, np.floating)


@dataclasses.dataclass(frozen=True)
class ManyResult:
    """What :func:`simulate_many` gave: one row per run, in the order of the runs.

    Attributes
    ----------
    metrics : tuple of str
        The summary keys that hold a number in some run (``vllm bench serve``'s and simllm's:
        ``mean_ttft_ms``, ``p99_tpot_ms``, ``output_throughput``, ...; wall-clock timings left
        out), in the order first met.
    values : ndarray of float64, shape (n_runs, n_metrics)
        ``values[i, j]`` is run i's ``metrics[j]``; 0 where ``present[i, j]`` is False.
    present : ndarray of bool, shape (n_runs, n_metrics)
        Whether run i's summary has ``metrics[j]`` (False for a run that failed, and for keys of
        another kind of run: a disaggregated run's pool figures, speculative decoding's).
    status : ndarray of str, shape (n_runs,)
        ``ok``, ``oom`` (did not fit in memory) or ``invalid`` (a bad configuration).
    errors : tuple of str
        Per run, the one-line reason of a failed run ("" for one that ran).
    results : tuple of SimResult or None
        The runs' results with their per-request arrays, with ``keep_requests`` only (None for a
        failed run).
    """

    metrics: tuple
    values: np.ndarray
    present: np.ndarray
    status: np.ndarray
    errors: tuple
    results: tuple = None

    def __len__(self):
        return len(self.status)

    @property
    def ok(self):
        """ndarray of bool, shape (n_runs,): the runs that ran."""
        return self.status == OK

    def __getitem__(self, name):
        """The column of metric ``name``: ndarray of float64, shape (n_runs,) (0 where absent)."""
        try:
            return self.values[:, self.metrics.index(name)]
        except ValueError:
            raise KeyError(f"no metric {name!r}; the runs have: {', '.join(self.metrics)}") from None

    def summary(self, i):
        """Run ``i``'s numbers as a dict (its summary's numeric keys, timings left out)."""
        return {k: float(v) for k, v, p in zip(self.metrics, self.values[i], self.present[i]) if p}

    def to_pandas(self):
        """A DataFrame, one row per run: ``status``, ``error`` and a column per metric (NaN where a
        run has no such number). Needs pandas."""
        import pandas as pd

        cols = {"status": self.status, "error": list(self.errors)}
        for j, name in enumerate(self.metrics):
            cols[name] = np.where(self.present[:, j], self.values[:, j], np.nan)
        return pd.DataFrame(cols)


def _task(run, i):
    if isinstance(run, Task):
        return run
    if isinstance(run, Mapping):
        unknown = sorted(set(run) - set(RUN_FIELDS))
        if unknown:
            raise ConfigError(f"keys among {', '.join(RUN_FIELDS)}", source=f"runs[{i}]", key=unknown[0],
                              value=run[unknown[0]])
        return Task(**run)
    if isinstance(run, tuple) and 1 <= len(run) <= len(RUN_FIELDS):
        return Task(*run)
    raise ConfigError(f"a Task, a mapping of {', '.join(RUN_FIELDS)} or a tuple of them in that order",
                      source=f"runs[{i}]", value=run)


def _numbers(summary):
    """The numeric items of a summary (timings left out): (keys, values) as two tuples."""
    keys, values = [], []
    for k, v in summary.items():
        if k in TIMING_KEYS or isinstance(v, (bool, np.bool_)) or not isinstance(v, _NUMBERS):
            continue
        v = float(v)
        if math.isfinite(v):
            keys.append(k)
            values.append(v)
    return tuple(keys), tuple(values)


def simulate_many(runs, *, model=None, hardware=None, serving=None, workload=None, requests=None,
                  percentiles=(50, 90, 95, 99), goodput=None, fast_forward=True, keep_requests=False, executor=None,
                  workers=None, scheduler=None, chunk_size=None, progress=None):
    """Simulate many runs in one call; their summaries come back as columns.

    Parameters
    ----------
    runs : sequence
        Each a mapping with any of ``model``, ``hardware``, ``serving``, ``workload``, ``disagg``
        (a :class:`~simllm.config.disagg.DisaggConfig` makes the run disaggregated), a tuple of
        them in that order, or a :class:`~simllm.sim.runner.Task`; what a run leaves out comes
        from the keyword arguments.
    model, hardware, serving, workload : optional
        What the runs share unless they name their own (``serving`` and ``workload`` default to
        simulate's defaults).
    requests : Requests, optional
        Pre-drawn requests for the runs that keep the shared ``workload``.
    percentiles, goodput, fast_forward
        As :func:`~simllm.sim.simulate.simulate`'s.
    keep_requests : bool
        Keep each run's :class:`~simllm.sim.results.SimResult` with its per-request arrays
        (``ManyResult.results``; each run then draws its own requests, so no two results share
        an array); default summaries only.
    executor, workers, scheduler, chunk_size, progress
        As :func:`~simllm.sim.runner.run_many`'s: ``threads`` (default), ``processes``, ``dask``
        or an executor; ``progress(done, total)`` after each chunk. Hundreds of runs of a few
        thousand requests go faster on ``processes``: their time outside the kernel is Python,
        which holds one GIL per process (a script then needs the ``__main__`` guard where
        processes are spawned, as on macOS and Windows).

    Returns
    -------
    ManyResult
        Run i's numbers equal ``simulate(...).summary``'s of the same arguments exactly.

    Raises
    ------
    ConfigError
        A malformed run or executor. A run whose configuration is invalid or does not fit in
        memory does not raise: its ``status`` and ``errors`` say so.
    """
    tasks = [_task(run, i) for i, run in enumerate(runs)]
    base = Base(model=model, hardware=hardware, serving=serving, workload=workload, requests=requests,
                percentiles=tuple(percentiles), goodput=goodput, keep_requests=keep_requests,
                fast_forward=fast_forward, summary_only=not keep_requests)
    missing = [f for f in ("model", "hardware") if getattr(base, f) is None]
    for i, t in enumerate(tasks):
        for f in missing:
            if getattr(t, f) is None:
                raise ConfigError(f"a {f} (the run's or simulate_many's {f}=)", source=f"runs[{i}]", key=f,
                                  value=None)
    outcomes = run_simulations(base, tasks, executor, workers=workers, scheduler=scheduler, chunk_size=chunk_size,
                               progress=progress)  # which shares the draws of summary-only runs
    return _gather(outcomes, keep_requests)


def _gather(outcomes, keep_requests):
    columns = {}  # metric -> column, in the order first met
    numbers = [_numbers(o.value.summary if keep_requests else o.value) if o.ok else None for o in outcomes]
    for kv in numbers:
        if kv is not None:
            for k in kv[0]:
                columns.setdefault(k, len(columns))
    n = len(outcomes)
    values = np.zeros((n, len(columns)))
    present = np.zeros((n, len(columns)), dtype=bool)
    layouts = {}  # a keys tuple -> its column indices (runs of one kind share one tuple's layout)
    for i, kv in enumerate(numbers):
        if kv is None:
            continue
        keys, vals = kv
        idx = layouts.get(keys)
        if idx is None:
            idx = layouts[keys] = np.fromiter((columns[k] for k in keys), dtype=np.int64, count=len(keys))
        values[i, idx] = vals
        present[i, idx] = True
    status = np.array([o.status for o in outcomes], dtype="<U7")
    errors = tuple(o.error for o in outcomes)
    results = tuple(o.value if o.ok else None for o in outcomes) if keep_requests else None
    return ManyResult(tuple(columns), values, present, status, errors, results)
