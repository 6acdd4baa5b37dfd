"""The one runner for many simulations: plan chunks, run them on threads, processes or Dask, ship
what every task shares once per worker, turn configuration and OOM errors into a row status, and
report progress through one protocol.

Every feature that simulates many configurations goes through :func:`run_many` (a sweep's rows,
an SLA search's candidates) or :func:`run_simulations` on top of it (compare's columns, a load
test's points, the diagnosis' what-ifs, validation's measured points), so each gets processes and
Dask for free::

    from simllm.sim.runner import Base, Task, run_simulations
    base = Base(model, hardware, serving, workload, percentiles=(50, 99))
    outcomes = run_simulations(base, [Task(serving=s) for s in servings], executor="processes")
    [o.value["p99_ttft_ms"] if o.ok else o.error for o in outcomes]

**Progress protocol**: ``progress(done, total)``, called in the caller's thread after each chunk
(:class:`simllm.report.progress.Progress` is such a callable).

**Executors**: ``"threads"`` (the kernels release the GIL), ``"processes"`` (a process pool, each
worker warmed up once; with spawn or forkserver a script needs the ``if __name__ == "__main__":``
guard), ``"dask"`` (a ``dask.distributed`` client of ``scheduler`` or of a new local cluster;
``pip install "simllm[dask]"``), or any :class:`concurrent.futures.Executor`. With processes and
Dask, ``evaluate`` must be a module-level function and ``context`` and the items picklable.
"""
import dataclasses
import functools
import logging
import math
import multiprocessing
import os
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import NamedTuple

from simllm.config.hardware import HardwareConfig, load_hardware
from simllm.config.model import ModelConfig, load_model
from simllm.config.serving import ServingConfig
from simllm.config.workload import Workload, draw_key, generate
from simllm.errors import ConfigError, SimulatedOOM, optional_import
from simllm.sim.disagg import simulate_disagg
from simllm.sim.simulate import simulate

log = logging.getLogger("simllm")

#: Executors :func:`make_executor` makes.
EXECUTORS = ("threads", "processes", "dask")
#: Chunking: seconds of simulation aimed at per task, and the rough cost model behind it.
TARGET_TASK_S = 0.05
COST_FIXED_S = 1.2e-3
COST_PER_REQUEST_S = 1.5e-6
MAX_CHUNK = 256
MIN_TASKS_PER_WORKER = 4
#: The configuration :func:`warm_up` compiles the kernels with.
PROBE_MODEL = "llama-3.1-8b"
PROBE_HARDWARE = "h100-sxm"
PROBE_PERCENTILES = (50, 90, 99)
#: :func:`default_executor`: at least this many items, each estimated to take at most this long,
#: run on processes where the platform forks (a small run's time outside the kernel is Python, which
#: holds its process's GIL: two threads were no faster than one for runs of 1,000 requests).
AUTO_PROCESS_ITEMS = 256
AUTO_PROCESS_COST_S = 5e-3
#: :class:`SharedDraws`: draws kept per process, and the most requests a kept draw has.
SHARED_DRAWS = 16
SHARED_DRAW_MAX_REQUESTS = 1 << 16
#: Row statuses: simulated, did not fit in memory, invalid configuration.
OK, OOM, INVALID = "ok", "oom", "invalid"


class Outcome(NamedTuple):
    """What one item gave: ``value`` is what ``evaluate`` returned (None when it raised a
    :class:`~simllm.errors.ConfigError`), ``status`` one of ``ok``, ``oom``, ``invalid``,
    ``error`` the one-line reason ("" when ok) and ``exception`` the ConfigError itself (for a
    caller that stops at the first failure)."""

    value: object
    status: str
    error: str
    exception: Exception = None

    @property
    def ok(self):
        return self.status == OK


# ----------------------------------------------------------------------------- executors

class DaskExecutor(Executor):
    """A ``dask.distributed`` client's executor that also closes the client (and the local
    cluster it started) on shutdown; ``client`` is the :class:`distributed.Client`."""

    def __init__(self, client, cluster=None):
        self.client = client
        self.cluster = cluster
        self._inner = client.get_executor()

    def submit(self, fn, /, *args, **kwargs):
        return self._inner.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        try:
            self._inner.shutdown(wait=wait)
        finally:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


_WORKER_CONTEXTS = {}
_WARM = []


def warm_up():
    """Compile (or load from numba's cache) the kernels in this process: one tiny simulation."""
    if not _WARM:
        simulate(load_model(PROBE_MODEL), load_hardware(PROBE_HARDWARE), ServingConfig(),
                 Workload(num_prompts=4, request_rate=10.0, max_concurrency=2), keep_requests=False,
                 percentiles=PROBE_PERCENTILES)
        _WARM.append(True)
    return True


def mark_warm():
    """Record that this process has compiled the kernels (a simulation ran here)."""
    _WARM.append(True)


def _init_worker(key=None, context=None):
    if key is not None:
        _WORKER_CONTEXTS[key] = context
    warm_up()


def check_executor(kind):
    """Raise a one-line :class:`ConfigError` unless ``kind`` is an executor name, None or an
    :class:`~concurrent.futures.Executor`."""
    if kind is not None and not isinstance(kind, Executor) and kind not in EXECUTORS:
        raise ConfigError(f"one of {', '.join(EXECUTORS)} or a concurrent.futures.Executor", source="command line",
                          key="--executor", value=kind)


def default_executor(n_items, cost_s, workers=None, scheduler=None):
    """The executor a many-simulation command takes when none is named: ``dask`` with a scheduler;
    ``processes`` for at least :data:`AUTO_PROCESS_ITEMS` items of at most
    :data:`AUTO_PROCESS_COST_S` seconds each (:func:`estimated_cost_s`) on more than one worker,
    where new processes are forked (Linux: they start with this process's compiled kernels, and a
    script needs no ``__main__`` guard); else ``threads``. On the project's 2-core VM a sweep of
    1,000 runs of 1,000 requests took 1.5-1.8 s on two processes, pool start included, against
    2.6-2.9 s on two threads."""
    if scheduler:
        return "dask"
    n = int(workers or os.cpu_count() or 1)
    # (allow_none: asking for the method without it would fix it, and a caller's set_start_method fail)
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    forks = method == "fork"
    if n > 1 and forks and n_items >= AUTO_PROCESS_ITEMS and cost_s <= AUTO_PROCESS_COST_S:
        return "processes"
    return "threads"


def make_executor(kind="threads", scheduler=None, workers=None, *, context_key=None, context=None):
    """An executor for :func:`run_many`.

    Parameters
    ----------
    kind : {"threads", "processes", "dask"}
        See the module docstring.
    scheduler : str, optional
        The dask scheduler's address (``tcp://host:8786``).
    workers : int, optional
        Threads, processes or local dask workers (default ``os.cpu_count()``).
    context_key, context : optional
        For processes: what every task of :func:`run_many` shares, given to each worker once by
        the pool's initializer under ``context_key``.

    Raises
    ------
    ConfigError
        An unknown kind, or dask requested but not installed.
    """
    check_executor(kind)
    n = int(workers or os.cpu_count() or 1)
    if kind in (None, "threads"):
        return ThreadPoolExecutor(max_workers=n, thread_name_prefix="simllm-run")
    if kind == "processes":
        return ProcessPoolExecutor(max_workers=n, initializer=_init_worker, initargs=(context_key, context))
    distributed = optional_import("dask.distributed", "the dask executor", package="dask.distributed",
                                  install='"simllm[dask]"', source="command line", key="--executor", value="dask")
    if scheduler:
        return DaskExecutor(distributed.Client(scheduler))
    cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    return DaskExecutor(distributed.Client(cluster), cluster)


def dask_client(executor):
    """The ``distributed.Client`` behind ``executor``, or None."""
    client = getattr(executor, "client", None) or getattr(executor, "_client", None)
    return client if client is not None and hasattr(client, "scatter") else None


def num_workers(executor):
    """How many tasks ``executor`` runs at once (a sizing hint)."""
    client = dask_client(executor)
    if client is not None:
        try:
            return max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))
        except Exception:  # noqa: BLE001 - only a sizing hint
            return os.cpu_count() or 1
    return int(getattr(executor, "_max_workers", 0) or os.cpu_count() or 1)


def estimated_cost_s(num_prompts):
    """Rough seconds one simulation of ``num_prompts`` requests takes (for chunking only)."""
    return COST_FIXED_S + COST_PER_REQUEST_S * (num_prompts or 1000)


def chunk_size_for(cost_s, n_items, n_workers):
    """Items per task: about :data:`TARGET_TASK_S` of work at ``cost_s`` seconds an item, at
    most :data:`MAX_CHUNK`, and at least :data:`MIN_TASKS_PER_WORKER` tasks per worker."""
    if not n_items:
        return 1
    size = max(1, int(round(TARGET_TASK_S / cost_s)))
    balance = max(1, math.ceil(n_items / (MIN_TASKS_PER_WORKER * n_workers)))
    return int(max(1, min(size, balance, MAX_CHUNK)))


# ----------------------------------------------------------------------------- running

def as_progress(progress):
    """``progress`` as the ``progress(done, total)`` protocol: callables pass through; an object
    with ``advance(n)`` (and maybe a ``total``) is adapted; None stays None."""
    if progress is None or callable(progress):
        return progress
    seen = [0]

    def call(done, total):
        if hasattr(progress, "total"):
            try:
                progress.total = total
            except AttributeError:
                pass
        progress.advance(done - seen[0])
        seen[0] = done

    return call


def error_outcome(exc, describe=str):
    """The :class:`Outcome` of a configuration that raised ``exc`` (a ConfigError)."""
    return Outcome(None, OOM if isinstance(exc, SimulatedOOM) else INVALID, describe(exc), exc)


def _run_chunk(evaluate, describe, context, chunk):
    """``[(index, Outcome)]`` of ``chunk`` (``[(index, item)]``); ``context`` is the shared
    object or, in a worker that got it from the pool's initializer, its key."""
    if isinstance(context, _ContextKey):
        context = _WORKER_CONTEXTS[context.key]
    out = []
    for index, item in chunk:
        try:
            out.append((index, Outcome(evaluate(context, item), OK, "")))
        except ConfigError as exc:  # SimulatedOOM, TP not dividing the heads, lengths over max_model_len
            out.append((index, error_outcome(exc, describe)))
    return out


class _ContextKey(NamedTuple):
    key: str


def run_many(evaluate, context, items, executor=None, *, workers=None, scheduler=None, chunk_size=None,
             cost_s=None, progress=None, on_chunk=None, describe_error=str):
    """``evaluate(context, item)`` for every item, in chunks, on an executor.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(context, item) -> value``; a :class:`~simllm.errors.ConfigError` it raises
        (:class:`~simllm.errors.SimulatedOOM` included) becomes that item's status. Module-level
        for processes and Dask.
    context : object
        What every item shares (base configs, the drawn requests, ...): shipped once per worker.
    items : sequence
        The per-item payloads (small: they travel with each chunk).
    executor : str or concurrent.futures.Executor, optional
        ``threads`` (default), ``processes``, ``dask`` or an executor (used, not shut down).
        With one worker and no executor given, items run in this thread.
    workers : int, optional
        Workers of an executor made here (default all cores).
    scheduler : str, optional
        A dask scheduler's address.
    chunk_size : int or callable, optional
        Items per task, or ``chunk_size(n_workers, n_items) -> int`` (default: about 50 ms of
        work by ``cost_s``, :func:`chunk_size_for`).
    cost_s : float, optional
        Rough seconds per item for the default chunk size (default one 1,000-request simulation).
    progress : callable, optional
        ``progress(done, total)`` after each chunk (objects with ``advance(n)`` are adapted,
        :func:`as_progress`).
    on_chunk : callable, optional
        ``on_chunk([(index, Outcome), ...])`` in the caller's thread as chunks finish (a journal).
    describe_error : callable
        The one-line text of a ConfigError in a row (default ``str``).

    Returns
    -------
    list of Outcome
        In the order of ``items``.

    Raises
    ------
    ConfigError
        A bad executor name or chunk size, or dask missing. Anything else ``evaluate`` raises
        propagates and cancels what has not started.
    """
    items = list(items)
    pending = list(enumerate(items))
    total = len(pending)
    results = [None] * total
    if not pending:
        return results
    check_executor(executor)
    progress = as_progress(progress)
    done = 0

    def take(out):
        nonlocal done
        if on_chunk is not None:
            on_chunk(out)
        for index, outcome in out:
            results[index] = outcome
        done += len(out)
        if progress is not None:
            progress(done, total)

    n_local = int(workers or os.cpu_count() or 1)
    if executor is None and min(n_local, total) <= 1:
        for pair in pending:
            take(_run_chunk(evaluate, describe_error, context, [pair]))
        return results
    own = executor is None or isinstance(executor, str)
    key = _ContextKey(uuid.uuid4().hex)
    ex = make_executor(executor or "threads", scheduler, workers, context_key=key.key, context=context) if own \
        else executor
    try:
        n = num_workers(ex)
        if callable(chunk_size):
            size = chunk_size(n, total)
        else:
            size = chunk_size or chunk_size_for(cost_s or estimated_cost_s(None), total, n)
        if isinstance(size, bool) or int(size) < 1:
            raise ConfigError("a positive chunk size", key="chunk_size", value=size)
        size = int(size)
        client = dask_client(ex)
        if client is not None:
            ctx_arg = client.scatter(context, broadcast=True, hash=False)
            client.run(_init_worker)
        elif own and isinstance(ex, ProcessPoolExecutor):
            ctx_arg = key  # the pool's initializer gave every worker the context
        else:
            ctx_arg = context
            if not isinstance(ex, ProcessPoolExecutor):
                warm_up()  # threads share this process's compiled kernels
        task = functools.partial(_run_chunk, evaluate, describe_error)  # submitted as task(context, chunk)
        chunks = (pending[i:i + size] for i in range(0, total, size))
        limit = max(2, 2 * n)
        in_flight = set()
        try:
            while True:
                while len(in_flight) < limit:
                    chunk = next(chunks, None)
                    if chunk is None:
                        break
                    in_flight.add(ex.submit(task, ctx_arg, chunk))
                if not in_flight:
                    break
                finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in finished:
                    take(fut.result())
        except BaseException:
            for fut in in_flight:
                fut.cancel()
            raise
    finally:
        if own:
            ex.shutdown(wait=True, cancel_futures=True)
    log.debug("run_many: %d items in chunks of %d", total, size)
    return results


# ----------------------------------------------------------------------------- simulations

class SharedDraws:
    """The requests of the workloads a process's simulations serve, each drawn once: runs that
    differ only in the engine, or in how the requests are sent
    (:data:`~simllm.config.workload.NOT_DRAWN`: the concurrency, the client jitter, ...), serve
    the very same arrays, which simulate reads and never writes. Keeps the last ``size`` draws of
    at most ``max_requests`` requests each (a larger run draws its own: a summary-only run of
    millions of requests is streamed). Thread-safe; pickled empty, so each process or Dask worker
    draws its own, once."""

    def __init__(self, size=SHARED_DRAWS, max_requests=SHARED_DRAW_MAX_REQUESTS):
        self.size, self.max_requests = size, max_requests
        self.__setstate__(None)

    def __getstate__(self):
        return self.size, self.max_requests

    def __setstate__(self, state):
        if state is not None:
            self.size, self.max_requests = state
        self._draws = OrderedDict()
        self._lock = threading.Lock()

    def requests(self, workload):
        """The drawn :class:`~simllm.config.workload.Requests` of ``workload`` (None for one too
        large to keep, or that cannot be keyed: the caller draws it)."""
        if workload.num_prompts > self.max_requests:
            return None
        key = draw_key(workload)
        if key is None:
            return None
        with self._lock:
            drawn = self._draws.get(key)
            if drawn is not None:
                self._draws.move_to_end(key)
                return drawn
        drawn = generate(workload)  # outside the lock: two threads may draw one workload at once, alike
        if len(drawn) > self.max_requests:  # a whole trace (simulate reads it whole too)
            return drawn
        with self._lock:
            self._draws[key] = drawn
            while len(self._draws) > self.size:
                self._draws.popitem(last=False)
        return drawn


@dataclasses.dataclass(frozen=True)
class Base:
    """What every simulation of :func:`run_simulations` shares unless its :class:`Task`
    replaces it. ``requests`` (a drawn :class:`~simllm.config.workload.Requests`) makes every
    task that keeps the base workload serve the same requests; ``draws`` (:class:`SharedDraws`,
    which :func:`run_simulations` gives a base without kept requests) shares the others' draws;
    ``summary_only`` returns each result's summary dict instead of the
    :class:`~simllm.sim.results.SimResult`."""

    model: ModelConfig = None
    hardware: HardwareConfig = None
    serving: ServingConfig = None
    workload: Workload = None
    requests: object = None
    percentiles: tuple = (50, 90, 95, 99)
    goodput: dict = None
    keep_requests: bool = False
    fast_forward: bool = True
    summary_only: bool = True
    draws: SharedDraws = None


@dataclasses.dataclass(frozen=True)
class Task:
    """One simulation of :func:`run_simulations`: the configs that differ from the base; a
    ``disagg`` (:class:`~simllm.config.disagg.DisaggConfig`) makes it a disaggregated
    prefill/decode run (:func:`~simllm.sim.disagg.simulate_disagg`) with ``serving`` the pools'
    base settings."""

    model: ModelConfig = None
    hardware: HardwareConfig = None
    serving: ServingConfig = None
    workload: Workload = None
    disagg: object = None


def simulate_task(base, task):
    """Simulate ``task`` over ``base``: its summary dict (or SimResult when not ``summary_only``)."""
    workload = task.workload or base.workload or Workload()
    requests = base.requests if task.workload is None else None
    if requests is None and base.draws is not None:
        requests = base.draws.requests(workload)
    args = (task.model or base.model, task.hardware or base.hardware, task.serving or base.serving, workload)
    kwargs = dict(requests=requests, keep_requests=base.keep_requests, percentiles=base.percentiles,
                  goodput=base.goodput, fast_forward=base.fast_forward)
    result = simulate_disagg(*args, task.disagg, **kwargs) if task.disagg else simulate(*args, **kwargs)
    return result.summary if base.summary_only else result


def run_simulations(base, tasks, executor=None, *, workers=None, scheduler=None, chunk_size=None, progress=None,
                    on_chunk=None):
    """:func:`simulate_task` of every task on :func:`run_many` (same parameters): a list of
    :class:`Outcome` whose values are summaries (or SimResults), in the order of ``tasks``."""
    tasks = list(tasks)
    if base.draws is None and not base.keep_requests:  # kept per-request arrays must not share their draw
        base = dataclasses.replace(base, draws=SharedDraws())
    w = base.workload or Workload()
    cost = estimated_cost_s(w.num_prompts)
    return run_many(simulate_task, base, tasks, executor, workers=workers, scheduler=scheduler,
                    chunk_size=chunk_size, cost_s=cost, progress=progress, on_chunk=on_chunk)
