"""GuideLLM's ``benchmarks.json``, read and written.

Reading (:func:`read_guidellm_result`; ``--output-path``, the 0.2 to 0.4+ layouts)
    One :class:`~simllm.formats.common.Measurement` per entry of ``benchmarks``: the means of
    the successful requests' ``metrics.<name>.successful.mean`` for ``time_to_first_token_ms``,
    ``time_per_output_token_ms``, ``inter_token_latency_ms``, ``request_latency`` (seconds),
    ``prompt_token_count``, ``output_token_count`` and ``output_tokens_per_second``; the request
    counts from ``request_totals`` (under ``metrics`` from 0.4); the load from the scheduling
    strategy (``args.strategy`` up to 0.3, ``config.strategy`` from 0.4: ``type_`` synchronous,
    concurrent with ``streams``, throughput, constant or poisson with ``rate``). A finite rate is
    an open loop at that rate (``concurrency`` 0, whatever in-flight cap it also names);
    otherwise a closed loop of the recorded concurrency (``request_rate`` inf). The GPU, the
    parallel layout and the precision come from the caller.

Writing (:func:`guidellm_report`)
    One ``generative_benchmark`` in GuideLLM 0.3's layout (``src/guidellm/benchmark/benchmark.py``
    and ``src/guidellm/objects/statistics.py``): ``args.strategy`` (``concurrent`` with
    ``streams`` for a closed loop, ``throughput`` for everything at once, ``poisson`` or
    ``constant`` with ``rate`` for an open loop; gamma arrivals are written as ``poisson`` with
    an extra ``burstiness``), ``request_totals`` and ``metrics``, each metric a
    ``StatusDistributionSummary`` (``successful``, ``errored``, ``incomplete``, ``total``) of
    ``DistributionSummary`` objects (``mean``, ``median``, ``mode``, ``variance``, ``std_dev``,
    ``min``, ``max``, ``count``, ``total_sum``, ``percentiles`` ``p001`` ... ``p999``), computed
    the way GuideLLM computes them (weighted values, percentiles as the first value whose
    cumulative weight reaches the level, no interpolation):

    - ``request_latency`` (s), ``prompt_token_count``, ``output_token_count``,
      ``time_to_first_token_ms`` per request;
    - ``time_per_output_token_ms`` = (last token - first token) / output tokens, weighted by
      output tokens, and ``inter_token_latency_ms`` = (last token - first token) / (output
      tokens - 1), weighted by output tokens - 1 (GuideLLM 0.2/0.3's definitions: the latter
      per request is vLLM's TPOT, its weighted mean vLLM's mean ITL);
    - ``requests_per_second`` and ``request_concurrency`` over time, from the requests' start
      and end times as GuideLLM does (events within 1 us merged, weighted by duration);
    - ``output_tokens_per_second`` and ``tokens_per_second``: the token rate in 1,000 equal
      time bins from the first request's start to the last one's end (GuideLLM measures it
      between individual token events, which simllm does not record; the mean, tokens over
      that span, is the same). Prompt tokens count at the first token.

    Successful requests are simllm's completed ones; rejected and timed-out requests are
    ``errored`` (a rejected request has no tokens); none is ``incomplete``. Times are simulated
    seconds from the first request. Needs per-request data (``keep_requests=True``).
    :func:`read_guidellm_result` reads the file back.
"""
import math
import uuid

import numpy as np

from simcore import codes
from simllm.errors import ConfigError
from simllm.formats.common import (
    NAN,
    SIMULATED,
    agg_measurement,
    checked_number,
    first_found,
    load_json,
    ramp_cumulative,
    recorded_name,
    require_requests,
    token_count,
    value_at,
)
from simllm.sim.stats import weighted_lower_quantile
from simllm.text import jsonable

#: The metrics of a GuideLLM generative benchmark.
GUIDELLM_METRICS = ("requests_per_second", "request_concurrency", "request_latency", "prompt_token_count",
                    "output_token_count", "time_to_first_token_ms", "time_per_output_token_ms",
                    "inter_token_latency_ms", "output_tokens_per_second", "tokens_per_second")
#: GuideLLM's ``Percentiles`` fields and their levels.
GUIDELLM_PERCENTILES = (("p001", 0.001), ("p01", 0.01), ("p05", 0.05), ("p10", 0.1), ("p25", 0.25), ("p50", 0.5),
                        ("p75", 0.75), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
_EVENT_EPSILON_S = 1e-6  # GuideLLM merges events closer than this
TOKEN_RATE_BINS = 1000


# ----------------------------------------------------------------------------- reading

def is_guidellm_report(data):
    """Whether parsed JSON is a GuideLLM benchmarks.json (an object with a ``benchmarks`` list)."""
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list)


# Where each GuideLLM generation keeps what is read: ``args``/``worker``/``request_totals`` on the
# benchmark up to 0.3, ``scheduler``/``benchmarker`` in the first 0.4 layout, then ``config`` and
# ``metrics.request_totals``; the report-level ``args`` (0.4+) holds the backend type and model.
_GUIDELLM_STRATEGY = ("config.strategy", "scheduler.strategy", "args.strategy")
_GUIDELLM_TOTALS = ("metrics.request_totals", "request_totals", "total_count")
_GUIDELLM_MODEL = ("config.backend.model", "benchmarker.backend.model", "worker.backend_model")


def _guidellm_load(strategy, source, key):
    """(concurrency, request_rate) of a GuideLLM scheduling strategy."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1, math.inf
    if kind == "concurrent":
        streams = checked_number(strategy.get("streams"), source, f"{key}.streams", integer=True, positive=True)
        return streams, math.inf
    if kind == "throughput":  # everything at once, up to max_concurrency in flight when capped
        cap = strategy.get("max_concurrency")
        conc = 0 if cap is None else checked_number(cap, source, f"{key}.max_concurrency", integer=True,
                                                    positive=True)
        return conc, math.inf
    if kind in ("constant", "poisson"):
        return 0, checked_number(strategy.get("rate"), source, f"{key}.rate", positive=True)
    raise ConfigError("a strategy type_ of synchronous, concurrent, throughput, constant or poisson",
                      source=source, key=f"{key}.type_", value=kind)


def _guidellm_row(bench, k, name, source, report_args, hardware, tp, precision):
    """The measurement of ``bench`` (``benchmarks[i]`` = ``k``), named ``name`` in the table."""
    if not isinstance(bench, dict) or not isinstance(bench.get("metrics"), dict):
        raise ConfigError("a benchmark object with metrics", source=source, key=k)
    metrics = bench["metrics"]

    totals_path, totals = first_found(bench, *_GUIDELLM_TOTALS)
    if not isinstance(totals, dict):
        raise ConfigError("the request counts (metrics.request_totals, or request_totals before GuideLLM 0.4)",
                          source=source, key=f"{k}.{totals_path}", value=totals)
    completed = checked_number(totals.get("successful"), source, f"{k}.{totals_path}.successful", integer=True,
                               minimum=0)
    if completed == 0:
        raise ConfigError("at least one successful request", source=source, key=f"{k}.{totals_path}.successful",
                          value=0)

    strategy_path, strategy = first_found(bench, *_GUIDELLM_STRATEGY)
    if not isinstance(strategy, dict):
        raise ConfigError("a scheduling strategy (config.strategy, or args.strategy before GuideLLM 0.4)",
                          source=source, key=f"{k}.{strategy_path}", value=strategy)
    concurrency, rate = _guidellm_load(strategy, source, f"{k}.{strategy_path}")

    def mean(metric, scale=1.0, required=False):
        """The mean over the successful requests of ``metric``, times ``scale``."""
        key = f"{k}.metrics.{metric}.successful.mean"
        return checked_number(value_at(metrics, f"{metric}.successful.mean"), source, key, minimum=0,
                      default=None if required else NAN) * scale

    def tokens(metric):
        key = f"{k}.metrics.{metric}.successful.mean"
        return token_count(value_at(metrics, f"{metric}.successful.mean"), source, key)

    _, model = first_found(bench, *_GUIDELLM_MODEL)
    return agg_measurement(
        name, recorded_name(model) or recorded_name(report_args.get("model")),
        recorded_name(value_at(bench, "worker.backend_type")) or recorded_name(report_args.get("backend")),
        hardware, tp, precision,
        input_len=tokens("prompt_token_count"), output_len=tokens("output_token_count"),
        concurrency=concurrency, request_rate=rate, num_prompts=completed,
        ttft_ms=mean("time_to_first_token_ms", required=True),
        # GuideLLM's own definitions (0.2/0.3 source): time_per_output_token_ms spreads the time
        # after the first token over all output tokens, inter_token_latency_ms over all but the
        # first (vLLM's TPOT). Each is kept under its own name.
        tpot_ms=mean("time_per_output_token_ms"),
        itl_ms=mean("inter_token_latency_ms"),
        e2el_ms=mean("request_latency", 1000.0),  # GuideLLM records request latency in seconds
        output_throughput=mean("output_tokens_per_second"),
    )


def guidellm_rows(data, source, hardware, tp, precision):
    """The measurements of a parsed GuideLLM benchmarks.json, one per benchmark."""
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ConfigError("a non-empty list of benchmarks", source=source, key="benchmarks", value=benchmarks)
    report_args = data.get("args") if isinstance(data.get("args"), dict) else {}
    out = []
    for i, bench in enumerate(benchmarks):
        k = f"benchmarks[{i}]"
        # A file of several benchmarks (a sweep) names each one, so validate can tell them apart.
        name = f"{source}#{k}" if len(benchmarks) > 1 else source
        out.append(_guidellm_row(bench, k, name, source, report_args, hardware, tp, precision))
    return out


def read_guidellm_result(path, hardware="", tp=1, precision=""):
    """The benchmarks of a GuideLLM ``benchmarks.json`` (0.2 to 0.4+ layouts), one row each."""
    data = load_json(path)
    if not is_guidellm_report(data):
        raise ConfigError("a GuideLLM benchmarks.json (a JSON object with a benchmarks list)", source=str(path))
    return guidellm_rows(data, str(path), hardware, tp, precision)


# ----------------------------------------------------------------------------- writing

def _empty_distribution():
    return {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0, "min": 0.0, "max": 0.0,
            "count": 0, "total_sum": 0.0, "percentiles": {name: 0.0 for name, _ in GUIDELLM_PERCENTILES}}


def distribution(values, weights=None):
    """GuideLLM's ``DistributionSummary.from_values``: statistics of ``values`` weighted by
    ``weights`` (default equal). An empty distribution is all zeros."""
    v = np.asarray(values, dtype=float).ravel()
    w = np.ones(v.size) if weights is None else np.asarray(weights, dtype=float).ravel()
    total = float(w.sum()) if v.size else 0.0
    if v.size == 0 or not total > 0:
        return _empty_distribution() | ({"count": int(v.size), "total_sum": float(v.sum())} if v.size else {})
    order = np.argsort(v, kind="stable")
    v, p = v[order], w[order] / total
    cdf = np.cumsum(p)

    def at(level):
        return weighted_lower_quantile(v, cdf, level)

    mean = float(np.sum(v * p))
    variance = float(np.sum((v - mean) ** 2 * p))
    return {"mean": mean, "median": at(0.5), "mode": float(v[int(np.argmax(p))]), "variance": variance,
            "std_dev": math.sqrt(variance), "min": float(v[0]), "max": float(v[-1]), "count": int(v.size),
            "total_sum": float(v.sum()), "percentiles": {name: at(level) for name, level in GUIDELLM_PERCENTILES}}


def _merged_events(times, counts):
    """Events sorted by time, those within ``_EVENT_EPSILON_S`` of the previous merged."""
    order = np.lexsort((counts, times))
    t, c = times[order], counts[order]
    new = np.ones(t.size, dtype=bool)
    new[1:] = np.diff(t) > _EVENT_EPSILON_S
    return t[new], np.bincount(np.cumsum(new) - 1, weights=c)


def _valued_distribution(values, weights):
    """A distribution of values accumulated by value (GuideLLM's ``dict[value] += weight``)."""
    unique, inverse = np.unique(values, return_inverse=True)
    return distribution(unique, np.bincount(inverse, weights=weights))


def _rate_distribution(starts, ends):
    """GuideLLM's ``from_request_times(..., "rate")``: completions per second between events."""
    if starts.size == 0:
        return _empty_distribution()
    t, c = _merged_events(np.concatenate([[starts.min()], ends]), np.ones(ends.size + 1))
    if t.size < 2:
        return _empty_distribution()
    d = np.diff(t)
    return _valued_distribution(c[:-1] / d, d)


def _concurrency_distribution(starts, ends):
    """GuideLLM's ``from_request_times(..., "concurrency")``: requests in flight over time."""
    if starts.size == 0:
        return _empty_distribution()
    t, c = _merged_events(np.concatenate([starts, ends]), np.concatenate([np.ones(starts.size), -np.ones(ends.size)]))
    if t.size < 2:
        return _empty_distribution()
    return _valued_distribution(np.cumsum(c)[:-1], np.diff(t))


def _token_rate_distribution(starts, firsts, ends, ramp_counts, step_counts):
    """Tokens per second in ``TOKEN_RATE_BINS`` equal bins from the first start to the last end."""
    if starts.size == 0:
        return _empty_distribution()
    t0, t1 = float(starts.min()), float(ends.max())
    if not t1 > t0:
        return _empty_distribution()
    grid = np.linspace(t0, t1, TOKEN_RATE_BINS + 1)
    cum = ramp_cumulative(grid, firsts, ends, ramp_counts, step_counts)
    cum[-1] = float(np.sum(ramp_counts) + np.sum(step_counts))  # everything by the last end
    return distribution(np.diff(cum) / np.diff(grid))


def _by_status(ok, err, fn):
    """``fn(mask)`` for GuideLLM's statuses: successful, errored, incomplete (none), total."""
    return {"successful": fn(ok), "errored": fn(err), "incomplete": fn(np.zeros_like(ok)), "total": fn(ok | err)}


def _strategy(s):
    """GuideLLM's scheduling strategy for the summary's load settings."""
    rate, conc = s.get("request_rate", "inf"), s.get("max_concurrency") or None
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        if conc:
            return {"type_": "concurrent", "streams": int(conc)}
        return {"type_": "throughput", "max_concurrency": None}
    kind = "constant" if s.get("arrival") == "constant" else "poisson"
    out = {"type_": kind, "rate": float(rate), "max_concurrency": conc, "initial_burst": False}
    burstiness = s.get("burstiness", 1.0)
    if kind == "poisson" and burstiness not in (None, 1.0):
        out["burstiness"] = burstiness  # gamma arrivals: GuideLLM has no such strategy
    return out


def guidellm_report(result):
    """The result as a GuideLLM ``benchmarks.json`` (see the module notes).

    Raises
    ------
    ConfigError
        When the result kept no per-request data.
    """
    require_requests(result, "a GuideLLM export")
    s, req = result.summary, result.requests
    status = np.asarray(req["status"])
    ok = status == codes.STATUS_DONE
    err = ~ok
    arrival = np.asarray(req["arrival_s"], dtype=float)
    first = np.asarray(req["first_token_s"], dtype=float)
    finish = np.asarray(req["finish_s"], dtype=float)
    finish = np.where(finish >= arrival, finish, arrival)  # a request that never ended: zero length
    has_first = first >= 0
    first = np.where(has_first, first, arrival)
    prompt = np.asarray(req["input_tokens"], dtype=float)
    out_tok = np.asarray(req["output_tokens"], dtype=float)
    with_output, multi = out_tok > 0, out_tok > 1
    decode_s = finish - first
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_ms = np.where(with_output, 1000.0 * decode_s / out_tok, 0.0)
        itl_ms = np.where(multi, 1000.0 * decode_s / (out_tok - 1), 0.0)
    ttft_ms = np.where(has_first, 1000.0 * (first - arrival), 0.0)

    def values(v, keep, weights=None):
        return lambda mask: distribution(v[mask & keep], None if weights is None else weights[mask & keep])

    everyone = np.ones(ok.shape, dtype=bool)
    metrics = {
        "requests_per_second": _by_status(ok, err, lambda m: _rate_distribution(arrival[m], finish[m])),
        "request_concurrency": _by_status(ok, err, lambda m: _concurrency_distribution(arrival[m], finish[m])),
        "request_latency": _by_status(ok, err, values(finish - arrival, everyone)),
        "prompt_token_count": _by_status(ok, err, values(prompt, everyone)),
        "output_token_count": _by_status(ok, err, values(out_tok, with_output)),
        "time_to_first_token_ms": _by_status(ok, err, values(ttft_ms, with_output)),
        "time_per_output_token_ms": _by_status(ok, err, values(tpot_ms, with_output, out_tok)),
        "inter_token_latency_ms": _by_status(ok, err, values(itl_ms, multi, out_tok - 1)),
        "output_tokens_per_second": _by_status(ok, err, lambda m: _token_rate_distribution(
            arrival[m & with_output], first[m & with_output], finish[m & with_output],
            out_tok[m & with_output] - 1, np.ones(int((m & with_output).sum())))),
        "tokens_per_second": _by_status(ok, err, lambda m: _token_rate_distribution(
            arrival[m & with_output], first[m & with_output], finish[m & with_output],
            out_tok[m & with_output] - 1, prompt[m & with_output] + 1)),
    }
    totals = {"successful": int(ok.sum()), "errored": int(err.sum()), "incomplete": 0, "total": int(ok.size)}
    start, end = float(arrival.min()), float(finish.max())
    model = s.get("model")
    run_id = str(uuid.uuid4())
    bench = {
        "type_": "generative_benchmark",
        "id_": str(uuid.uuid4()),
        "run_id": run_id,
        "args": {
            "profile": None,
            "strategy_index": 0,
            "strategy": _strategy(s),
            "max_number": int(ok.size),
            "max_duration": None,
            "warmup_number": None,
            "warmup_duration": None,
            "cooldown_number": None,
            "cooldown_duration": None,
        },
        "run_stats": {"start_time": start, "end_time": end, "total_successful": totals["successful"],
                      "total_incomplete": 0, "total_errored": totals["errored"], "total": totals["total"]},
        "worker": {"type_": "generative_requests_worker", "backend_type": SIMULATED, "backend_target": None,
                   "backend_model": model},
        "request_loader": None,
        "extras": {"simllm": {**{k: s.get(k) for k in ("model", "hardware", "tensor_parallel_size",
                                                        "data_parallel_size", "dtype", "kv_cache_dtype",
                                                        "max_num_seqs", "max_num_batched_tokens", "request_rate",
                                                        "burstiness", "max_concurrency")},
                              # the topology's settings, where the run has them
                              **{k: s[k] for k in ("pipeline_parallel_size", "speculative_config") if k in s}}},
        "start_time": start,
        "end_time": end,
        "duration": end - start,
        "metrics": metrics,
        "request_totals": totals,
        "request_samples": None,
        "requests": {"successful": [], "errored": [], "incomplete": [], "total": None},
    }
    return jsonable({"benchmarks": [bench]})
