"""``simllm.simulate``: validate, build the kernel inputs, run the engine (one kernel call for all
data-parallel replicas), and wrap the arrays in a :class:`SimResult`."""
import collections
import contextlib
import functools
import itertools
import logging
import math
import threading
import time
from typing import NamedTuple

import numpy as np

from simcore import call_signature, codes
from simcore.engine import simulate as simulate_kernel
from simcore.layout import accepted_per_position, make_layout, split_accumulator
from simcore.params import EngineSettings, block_shift_of
from simllm.config import serving as serving_mod
from simllm.config.serving import ServingConfig
from simllm.config import workload as workload_mod
from simllm.config.workload import Workload, client_delays, expected_last_send_s, generate, generate_chunks
from simllm.errors import ConfigError, SimulatedOOM
from simllm.sim import kernelmode
from simllm.sim.estimate import estimate_request_s
from simllm.sim.memory import plan_memory
from simllm.sim.pack import framework_for, pack_cost_params, pipeline_settings
from simllm.sim.results import DetailedRows, RequestTally, SimResult
from simllm.sim.slo import check_goodput
from simllm.sim.speculative import check_speculative, pack_drafter, speculation
from simllm.sim.stream import StreamStats, compile_run, run_streamed

log = logging.getLogger("simllm")

ITL_MIN_EXP = -20  # the ITL histogram starts at 2**-21 s (0.5 us) ...
ITL_SUB_BITS = 9  # ... with 512 bins per octave (0.14% wide) ...
ITL_BINS = 34 << ITL_SUB_BITS  # ... up to 2**13 s
N_WINDOWS = 200
_POLICY = {"continuous": codes.POLICY_CONTINUOUS, "static": codes.POLICY_STATIC, "dynamic": codes.POLICY_DYNAMIC}
_ROUTER = {"round_robin": codes.ROUTER_ROUND_ROBIN, "least_outstanding": codes.ROUTER_LEAST_OUTSTANDING}


def check_workload(workload, model, max_model_len):
    """Reject length settings that can never fit the model (naming the file and field): a
    distribution whose smallest length is already ``max_model_len``, or fixed prompt and output
    lengths that together exceed it. Sampled requests (and a dataset's) that merely may exceed it
    are rejected at run time and counted as failed, as the server would."""
    if workload.trace or workload.dataset is not None:
        return
    src = workload.source
    for key, dist in (("input_len", workload.input_len), ("output_len", workload.output_len)):
        low = {"fixed": dist.value, "uniform": dist.low}.get(dist.kind, dist.minimum)
        if low >= max_model_len:
            raise ConfigError(
                f"lengths below max_model_len ({max_model_len}) of {model.name}",
                source=src, key=f"workload.{key}", value=low,
            )
    inp, out = workload.input_len, workload.output_len
    if inp.kind == "fixed" and out.kind == "fixed" and inp.value + out.value > max_model_len:
        raise ConfigError(
            f"input_len + output_len <= max_model_len ({max_model_len}) of {model.name}; got "
            f"{inp.value} + {out.value}",
            source=src, key="workload.input_len", value=inp.value,
        )


def _check_trace_lengths(workload, requests, max_model_len):
    if not workload.trace:
        return
    too_long = np.nonzero(requests.input_len >= max_model_len)[0]
    if too_long.size:
        i = int(too_long[0])
        line = int(requests.trace_lines[i]) if requests.trace_lines is not None else None
        raise ConfigError(
            f"prompts shorter than max_model_len ({max_model_len})",
            source=workload.trace, key="input_len", value=int(requests.input_len[i]), line=line,
        )


def _window_s(workload, n, last_arrival_s, est_request_s):
    """Width of the time-series windows: about 1/100 of the expected duration."""
    if n and last_arrival_s > 0 and not workload.max_concurrency:
        span = last_arrival_s + est_request_s
    else:
        clients = workload.max_concurrency or n
        span = est_request_s * max(1.0, n / max(clients, 1))
    return max(span / 100.0, 1e-3)


def work_of(requests, n):
    """The work (:func:`simllm.sim.kernelmode.work_of`) of simulating ``requests``, or, where they
    are not drawn yet (a streamed run), ``n`` requests of one output token (a lower bound)."""
    if requests is None:
        return kernelmode.work_of(0, n)
    return kernelmode.work_of(int(requests.input_len.sum()), int(requests.output_len.sum()))


def argument_kinds(value):
    """What numba's type of ``value`` depends on, for the values kernels take (arrays, NamedTuples
    and tuples of them, scalars, None), built without numba: equal kinds are equal numba types.
    Builds in microseconds what ``numba.typeof`` takes a fraction of a millisecond for."""
    kind = type(value)
    if kind in _PLAIN_KINDS:
        return kind
    if kind is np.ndarray:
        flags = value.flags
        return (kind, value.dtype.str, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable,
                flags.aligned)
    if isinstance(value, tuple):  # a NamedTuple's fields are mostly plain: no call for those
        return (kind, *[t if t in _PLAIN_KINDS else argument_kinds(v) for v, t in zip(value, map(type, value))])
    if kind is int and not -(1 << 63) <= value < (1 << 63):
        return (int, "wide")  # numba types an int past int64 otherwise
    return kind


# Types whose values all have one numba type (an int may be wider than int64: not here).
_PLAIN_KINDS = frozenset({float, bool, type(None), np.float64, np.int64, np.int32, np.bool_})


# The (kernel, argument kinds) this process has compiled or loaded: a run of a sweep asks again for
# what an earlier one compiled, and numba.typeof of the run's arguments took about 1 ms of each.
_COMPILED = set()


def compile_for(kernel, *args):
    """Compile (or load from numba's cache) ``kernel``'s machine code for ``args``' types before
    it runs, so that the run's ``simulation_wall_s`` is the simulation alone; returns the seconds
    that took (``compile_wall_s``: about 0 once this process has it, a cache load on a warm
    start, the whole compilation on a cold one). Nothing to do without the JIT, or where this
    process already did it for arguments of the same kinds (:func:`argument_kinds`)."""
    compile_ = getattr(kernel, "compile", None)
    if compile_ is None:  # NUMBA_DISABLE_JIT or interpreted kernels: a plain function
        return 0.0
    key = (kernel, argument_kinds(args))
    if key in _COMPILED:
        return 0.0
    start = time.perf_counter()
    compile_(call_signature(kernel.py_func, args))
    _COMPILED.add(key)
    return time.perf_counter() - start


def run_reporting(kernel, glob, n, progress, interval_s=0.1, deadline_s=None):
    """Run ``kernel()`` on a worker thread and report ``glob[GLOBAL_ENDED]`` of ``n`` requests
    ended to ``progress(ended, n)`` (None: to nobody) every ``interval_s`` and at the end. With
    ``deadline_s`` (interpreted kernels, :func:`simllm.sim.kernelmode.deadline_s`), a kernel still
    running after that many seconds raises :func:`simllm.sim.kernelmode.out_of_time`'s switch
    (the process then starts over; the worker is left to it)."""
    failure = []
    progress = progress or (lambda ended, total: None)
    give_up = None if deadline_s is None else time.perf_counter() + deadline_s

    def work():
        try:
            kernel()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=work, name="simllm-kernel", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(interval_s)
        progress(int(glob[codes.GLOBAL_ENDED]), n)
        if give_up is not None and worker.is_alive() and time.perf_counter() > give_up:
            raise kernelmode.out_of_time()
    if failure:
        raise failure[0]
    progress(n, n)


class Pool(NamedTuple):
    """One engine's validated, packed setup: its framework profile, resolved settings, one GPU's
    cost parameters, the memory plan, its speculative decoding (a :class:`simcore.Speculation` or None,
    seed 0: :func:`pool_speculation` gives a workload's) and its pipeline parallelism (the
    ``EngineSettings`` fields of ``pack.pipeline_settings``)."""

    framework: object
    resolved: object
    params: object
    memory: object
    speculation: object
    pipeline: dict


def static_slots(model, serving, resolved, memory):
    """Sequences a static or dynamic batch can take: each reserves ``max_model_len`` tokens of KV
    cache (whole blocks), as static-batching servers preallocate; ``max_num_seqs`` without a KV
    cache. Raises :class:`SimulatedOOM` when the pool cannot hold one such sequence."""
    if not model.kv_cache_enabled:
        return serving.max_num_seqs
    slots = memory.max_concurrent_sequences(resolved.max_model_len)
    if slots < 1 and serving.batching != "continuous":
        raise SimulatedOOM(
            f"{serving.batching} batching reserves max_model_len ({resolved.max_model_len:,} tokens) of KV cache "
            f"per sequence, and the pool holds {memory.kv_capacity_tokens:,} tokens: lower --max-model-len or "
            f"raise --gpu-memory-utilization", memory)
    return max(1, slots)


#: Pools :func:`prepare_pool` keeps: a sweep's rows, an optimizer's candidates and validation's
#: points ask again for the pool of a model, GPU and engine settings an earlier run packed (the
#: load is not part of a pool); packing one took about a third of a 1,000-request run's time
#: outside the kernel.
POOL_MEMO_SIZE = 128
_pools = collections.OrderedDict()
_pools_lock = threading.Lock()


def prepare_pool(model, hardware, serving, framework=None):
    """Validate ``serving`` for ``model`` on ``hardware`` and pack it (:class:`Pool`); raises
    :class:`SimulatedOOM` when it does not fit (a speculative drafter's weights and KV included).

    The last :data:`POOL_MEMO_SIZE` pools are kept, keyed by the model and hardware objects
    themselves (configs are frozen), the serving settings and the framework profile (loaded anew
    each call, so an edited profile file is seen): the same arguments give the same pool object,
    which callers must not change."""
    fw = framework_for(hardware, serving, framework)
    try:
        key = (id(model), id(hardware), serving, fw)
        hash(key)
    except TypeError:  # an unhashable field somewhere (a user's object): no memo
        key = None
    if key is not None:
        with _pools_lock:
            hit = _pools.get(key)
            if hit is not None and hit[0] is model and hit[1] is hardware:  # their ids are still theirs
                _pools.move_to_end(key)
                return hit[2]
    resolved = serving_mod.resolve(model, hardware, serving)
    params = pack_cost_params(model, hardware, serving, resolved, fw)
    spec = serving.speculative_config
    drafter = None
    if spec is not None:
        check_speculative(model, serving)
        drafter = pack_drafter(model, hardware, serving, spec, fw)
    memory = plan_memory(params, model, hardware, serving, resolved,
                         draft_weight_bytes=drafter.weight_bytes if drafter else 0.0,
                         draft_kv_bytes_per_token=drafter.kv_bytes_per_token if drafter else 0.0)
    pool = Pool(fw, resolved, params, memory, speculation(params, drafter, 0, spec),
                pipeline_settings(params, hardware, serving))
    if key is not None:
        with _pools_lock:
            _pools[key] = (model, hardware, pool)
            while len(_pools) > POOL_MEMO_SIZE:
                _pools.popitem(last=False)
    return pool


def pool_speculation(pool, workload):
    """``pool``'s :class:`simcore.Speculation` with ``workload``'s seed for the acceptance draws
    (None without speculative decoding)."""
    return pool.speculation and pool.speculation._replace(seed=int(workload.seed))


def engine_inputs(model, pool, serving, workload, requests, fast_forward=True, arrays=True):
    """The kernel's inputs for ``pool`` serving ``requests``: its :class:`EngineSettings`
    (:func:`engine_settings`) and the request arrays ``reqi``, ``reqf`` (:func:`request_rows`; None
    without ``arrays``). Raises :class:`ConfigError` for lengths the model cannot take."""
    n = len(requests)
    e = engine_settings(model, pool, serving, workload, requests, fast_forward, n,
                        float(requests.arrival_s[-1]) if n else 0.0)
    if not arrays:
        return e, None, None
    return (e, *request_rows(e, pool, requests, 0, client_delays(workload, n)))


def engine_settings(model, pool, serving, workload, requests, fast_forward, n, last_arrival_s):
    """The :class:`EngineSettings` of ``pool`` serving ``n`` requests (``n_replicas`` =
    ``serving.data_parallel_size``), the last sent at ``last_arrival_s``: ``requests`` are all of
    them, or in a streamed run the first chunk (its lengths stand for the others'). Raises
    :class:`ConfigError` for lengths the model cannot take."""
    fw, resolved, params, memory, sp, pipeline = pool
    check_workload(workload, model, resolved.max_model_len)
    _check_trace_lengths(workload, requests, resolved.max_model_len)
    if n == 0:
        raise ConfigError("at least one request", source=workload.source, key="workload.num_prompts", value=0)
    bs = serving.block_size
    prefix_blocks = workload.prefix_len // bs if serving.enable_prefix_caching else 0
    if prefix_blocks * bs + resolved.max_model_len > memory.kv_capacity_tokens:
        prefix_blocks = max(0, (memory.kv_capacity_tokens - resolved.max_model_len) // bs)

    est_request_s = estimate_request_s(params, workload, requests)
    frontend_s = fw.frontend_latency_ms / 1e3
    e = EngineSettings(
        policy=_POLICY[serving.batching],
        chunked_prefill=serving.enable_chunked_prefill,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=resolved.max_num_batched_tokens,
        block_size=bs,
        block_shift=block_shift_of(bs),
        num_blocks=memory.num_blocks,
        prefix_blocks=prefix_blocks,
        max_model_len=resolved.max_model_len,
        static_slots=static_slots(model, serving, resolved, memory),
        pad_prompts=serving.pad_prompts,
        batch_max=(serving.batch_max or serving.max_num_seqs) if serving.batching == "dynamic" else 0,
        batch_window_s=serving.batch_window_ms / 1e3,
        # The engine sees a request frontend_s after its client sends it; a client's timeout
        # counts from the send.
        timeout_s=max(workload.timeout_s - frontend_s, 1e-9) if workload.timeout_s else 0.0,
        n_clients=0,
        fast_forward=fast_forward,
        itl_min_exp=ITL_MIN_EXP,
        itl_sub_bits=ITL_SUB_BITS,
        window_s=_window_s(workload, n, last_arrival_s, est_request_s),
    )
    replicas = serving.data_parallel_size
    return e._replace(n_replicas=replicas, router=_ROUTER[serving.router], n_clients=min(workload.max_concurrency, n),
                      frontend_s=frontend_s, warmup=min(workload.warmup_requests, n),
                      # attention data-parallel ranks whose tokens meet in the MoE layers step together
                      lockstep=replicas > 1 and params.moe_dp > 1.0, dp_pad_tokens=int(fw.dp_padding_tokens),
                      num_speculative_tokens=len(sp.rates) if sp is not None else 0, **pipeline)


def request_rows(e, pool, requests, first=0, delays=None):
    """The request arrays ``reqi``, ``reqf`` (see ``simcore.engine.simulate``) of ``requests``,
    requests ``first ..`` of those ``e`` serves (a streamed run's chunk; ``first`` > 0 only past a
    closed loop's first ``e.n_clients``), with their client delays (``client_delays``; None: none).
    Returns ``(reqi, reqf)``."""
    memory = pool.memory
    m = len(requests)
    bs = e.block_size
    reqi = np.zeros((m, codes.N_RI), dtype=np.int32)
    reqi[:, codes.RI_INPUT] = requests.input_len
    reqi[:, codes.RI_OUTPUT] = requests.output_len
    reqi[:, codes.RI_DONE] = -1
    if memory.window_blocks or memory.state_blocks:
        reqi[:, codes.RI_FIXED_BLOCKS] = memory.fixed_blocks(requests.input_len.astype(np.int64) + requests.output_len)
    if e.prefix_blocks:  # a prefix-cache hit skips the shared prefix's whole blocks
        usable = np.minimum(e.prefix_blocks * bs, ((requests.input_len - 1) // bs) * bs)
        reqi[:, codes.RI_CACHED] = np.where(requests.prefix_hit, usable, 0)
        del usable
    reqf = np.full((m, codes.N_RF), -1.0)
    if e.n_clients:
        # Closed loop: the first clients send at once (or at their open-loop times), each after
        # its client delay; the others' requests are sent as earlier ones end (the kernel's
        # scheduler.client_next_nb), the k-th to reach the engine in row k.
        k = max(min(e.n_clients - first, m), 0)
        reqf[:, codes.RF_FINISH] = requests.arrival_s  # ready times, until each request ends
        reqf[:, codes.RF_ARRIVAL] = np.inf
        if delays is None:
            reqf[:k, codes.RF_ARRIVAL] = requests.arrival_s[:k] + e.frontend_s
        else:
            reqf[:k, codes.RF_ARRIVAL] = np.sort(requests.arrival_s[:k] + delays[:k]) + e.frontend_s
            reqf[k:, codes.RF_CLIENT_DELAY] = delays[k:]
    else:
        np.add(requests.arrival_s, e.frontend_s, out=reqf[:, codes.RF_ARRIVAL])
    return reqi, reqf


def simulate(model, hardware, serving=None, workload=None, *, requests=None, fast_forward=True,
             percentiles=(50, 90, 95, 99), goodput=None, keep_requests=True, progress=None, framework=None,
             save_detailed=None):
    """Simulate serving ``workload`` with ``model`` on ``hardware``.

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
    serving : ServingConfig, optional
        vLLM-style engine arguments (defaults to vLLM's).
    workload : Workload, optional
        Defaults to 1000 requests of 1024 prompt / 128 output tokens sent at once.
    requests : Requests, optional
        Pre-drawn requests (overrides the workload's sampling; its load settings still apply).
    fast_forward : bool
        Advance runs of identical decode iterations in closed form (exact; off only to check).
    percentiles : sequence of float
        Percentiles reported for TTFT, TPOT, ITL and E2E latency.
    goodput : dict, optional
        SLOs in ms, ``{"ttft": 500, "tpot": 50, "e2el": 10000}``: requests meeting all count
        toward ``request_goodput``.
    keep_requests : bool
        Keep the per-request arrays in the result (``SimResult.requests``); False computes the
        summary alone. A summary-only run of more than ``simllm.config.workload.CHUNK_REQUESTS``
        (1,048,576) requests is streamed: its requests are drawn a chunk at a time and forgotten
        once they end, so memory stays bounded (one chunk, about 50 MB, plus the requests in
        flight), its counts, tokens and means are exact, and its TTFT, TPOT, E2E and queue
        percentiles come from histograms of 512 bins per octave, within 0.2% of the exact ones.
    progress : callable, optional
        Called as ``progress(ended, total)`` about ten times a second while the kernel runs (on
        another thread; it holds no GIL), and once at the end.
    framework : FrameworkProfile or str, optional
        The serving framework's profile (frontend time per request, CPU time per iteration,
        launch gap per kernel); default: ``serving.framework``'s (configs/frameworks/NAME.yaml).
    save_detailed : str or Path, optional
        Also write the per-request rows to this ``.csv`` or ``.parquet`` file
        (:meth:`SimResult.save_detailed`'s rows). A streamed run (``keep_requests=False``, more
        than one chunk of requests) writes them a batch at a time as its requests end, without
        holding them; the file appears once the run has ended.

    Returns
    -------
    SimResult

    Raises
    ------
    ConfigError
        Invalid settings; :class:`SimulatedOOM` when the configuration does not fit.
    """
    serving = serving or ServingConfig()
    workload = workload or Workload()
    check_goodput(goodput)
    chunk = workload_mod.CHUNK_REQUESTS
    if requests is None and (keep_requests or workload.trace or workload.num_prompts <= chunk):
        requests = generate(workload)
    n = len(requests) if requests is not None else workload.num_prompts
    work = work_of(requests, n)
    kernelmode.charge(work)  # before anything compiles: the work decides the kernels
    pool = prepare_pool(model, hardware, serving, framework)
    if not keep_requests and n > chunk and min(workload.max_concurrency, n) <= chunk // 4:
        return _simulate_streamed(model, hardware, serving, workload, pool, requests, n, fast_forward,
                                  tuple(percentiles), goodput, progress, save_detailed)
    if requests is None:
        requests = generate(workload)
    kept = keep_requests or save_detailed is not None
    params, resolved, memory = pool.params, pool.resolved, pool.memory
    e, reqi, reqf = engine_inputs(model, pool, serving, workload, requests, fast_forward)
    n = len(requests)
    bs = serving.block_size
    replicas = e.n_replicas
    frontend_s = e.frontend_s
    lay = make_layout(serving.max_num_seqs, bs, n, N_WINDOWS, ITL_BINS, e.pipeline_stages, e.num_speculative_tokens)
    acc = np.zeros((replicas, lay.acc_len))
    sp = pool_speculation(pool, workload)
    glob = np.zeros(codes.N_GLOBALS, dtype=np.int64)
    compile_s = compile_run(compile_for, params, sp, e, lay, glob, acc)
    kernel = functools.partial(simulate_kernel, params, sp, e, lay, reqi, reqf, acc, glob=glob)
    start = time.perf_counter()
    log.info("simulating %d requests on %d replica(s): %s", n, replicas, workload.describe())
    deadline_s = kernelmode.deadline_s()
    if progress is None and deadline_s is None:
        kernel()
    else:
        run_reporting(kernel, glob, n, progress, deadline_s=deadline_s)
    elapsed = time.perf_counter() - start
    kernelmode.measured(work, elapsed)
    log.info("simulated %d requests in %.3f s (%.0f requests/s)", n, elapsed, n / elapsed if elapsed else math.inf)
    if frontend_s:  # latencies count from the client's send
        reqf[:, codes.RF_ARRIVAL] -= frontend_s
    stats, batch_hist, windows, itl_hist = split_accumulator(lay, acc)
    accepted_per_pos = accepted_per_position(lay, acc)
    status = reqi[:, codes.RI_STATUS].astype(np.int8)
    out_tok = reqi[:, codes.RI_GENERATED].copy()
    ints = None
    if kept:
        ints = {"cached_tokens": reqi[:, codes.RI_CACHED], "preemptions": reqi[:, codes.RI_PREEMPTIONS],
                "replica": reqi[:, codes.RI_REPLICA]}
    del reqi  # a summary-only run needs none of it any more
    result = SimResult.build(
        model=model, hardware=hardware, serving=serving, resolved=resolved, workload=workload, memory=memory,
        params=params, engine=e, requests=requests, status=status, out_tok=out_tok, reqf=reqf, stats=stats,
        itl_hist=itl_hist, batch_hist=batch_hist, windows=windows, percentiles=tuple(percentiles), goodput=goodput,
        wall_s=elapsed, compile_s=compile_s, per_request_ints=ints, accepted_per_pos=accepted_per_pos,
    )
    if save_detailed is not None:
        result.save_detailed(save_detailed)
        if not keep_requests:
            result.requests = None
    return result


def _simulate_streamed(model, hardware, serving, workload, pool, requests, n, fast_forward, percentiles, goodput,
                       progress, save_detailed):
    """:func:`simulate` of a summary-only run of more than one chunk of requests
    (``simllm.config.workload.CHUNK_REQUESTS``): drawn (or, given, sliced) a chunk at a time, run
    by ``simllm.sim.stream.run_streamed`` and summarised as they end by a :class:`RequestTally`, so
    that memory holds one chunk of requests, a quarter of one as rows and the requests in flight,
    whatever ``n``. The same simulation as the in-memory run of the same requests; its percentiles
    are within 0.2% (one histogram bin) and its time-series windows are sized from the expected
    last send rather than the drawn one."""
    chunk = workload_mod.CHUNK_REQUESTS
    if requests is None:
        chunks = generate_chunks(workload)
        last_send_s = expected_last_send_s(workload, n)
    else:
        chunks = (requests.chunk(f, f + chunk) for f in range(0, n, chunk))
        last_send_s = float(requests.arrival_s[-1])
    pending = [next(chunks)]
    head = pending[0]
    params, resolved, memory = pool.params, pool.resolved, pool.memory
    e = engine_settings(model, pool, serving, workload, head, fast_forward, n, last_send_s)
    if requests is not None:  # a trace's prompts too long for the model, all of them before the run
        _check_trace_lengths(workload, requests, resolved.max_model_len)
    lay = make_layout(serving.max_num_seqs, serving.block_size, max(len(head) // 2, 1), N_WINDOWS, ITL_BINS,
                      e.pipeline_stages, e.num_speculative_tokens)
    del head

    def rows():
        # Rows are built a quarter of a chunk at a time: the run holds one chunk of requests, a
        # quarter of rows being loaded and the rows in flight.
        step = max(chunk // 4, 1)
        first = 0
        while pending:
            c = pending.pop()
            delays = client_delays(workload, n, first, len(c))
            for f in range(0, len(c), step):
                yield request_rows(e, pool, c.chunk(f, f + step), first + f,
                                   None if delays is None else delays[f:f + step])
            first += len(c)
            del c, delays
            pending.extend(itertools.islice(chunks, 1))

    replicas = e.n_replicas
    acc = np.zeros((replicas, lay.acc_len))
    glob = np.zeros(codes.N_GLOBALS, dtype=np.int64)
    sp = pool_speculation(pool, workload)
    tally = RequestTally(n, e.warmup, e.frontend_s, goodput)
    held = StreamStats()
    compile_s = compile_run(compile_for, params, sp, e, lay, glob, acc, streamed=True)
    start = time.perf_counter()
    log.info("simulating %d requests on %d replica(s), streamed: %s", n, replicas, workload.describe())
    with contextlib.ExitStack() as stack:
        on_rows = tally.add
        if save_detailed is not None:
            detailed = stack.enter_context(DetailedRows(save_detailed, e.warmup, e.frontend_s))

            def on_rows(reqi, reqf, first):
                tally.add(reqi, reqf, first)
                detailed.add(reqi, reqf, first)

        run = functools.partial(run_streamed, params, sp, e, lay, rows(), n, on_rows, glob, acc, held)
        deadline_s = kernelmode.deadline_s()
        if progress is None and deadline_s is None:
            run()
        else:
            run_reporting(run, glob, n, progress, deadline_s=deadline_s)
    elapsed = time.perf_counter() - start
    log.info("simulated %d requests in %.3f s (%.0f requests/s), at most %d request rows held", n, elapsed,
             n / elapsed if elapsed else math.inf, held.peak_rows)
    stats, batch_hist, windows, itl_hist = split_accumulator(lay, acc)
    return SimResult.build(
        model=model, hardware=hardware, serving=serving, resolved=resolved, workload=workload, memory=memory,
        params=params, engine=e, requests=None, status=None, out_tok=None, reqf=None, stats=stats,
        itl_hist=itl_hist, batch_hist=batch_hist, windows=windows, percentiles=percentiles, goodput=goodput,
        wall_s=elapsed, compile_s=compile_s, accepted_per_pos=accepted_per_position(lay, acc), tally=tally,
    )
