"""Writing a :class:`~simllm.sim.results.SimResult` in the formats other tools read.

One entry point, :func:`export`, picks the format from the file's suffix and ``fmt``:

============  ====================  ==============================================================
suffix        ``fmt``               what is written
============  ====================  ==============================================================
``.json``     ``vllm`` (default)    ``vllm bench serve --save-result`` JSON (:func:`vllm_result`)
``.json``     ``guidellm``          a GuideLLM ``benchmarks.json`` (:func:`guidellm_report`)
``.csv``      ``summary`` (default) one row, the summary's keys as columns (:func:`summary_row`)
``.csv``      ``requests``          one row per request (:meth:`SimResult.save_detailed`'s columns)
``.parquet``  ``summary`` (default) the same one row, as Parquet (needs pyarrow)
``.parquet``  ``requests``          the per-request rows, as Parquet (needs pyarrow)
============  ====================  ==============================================================

Every file is written to a temporary file in the target folder and moved into place
(``os.replace``) once complete, so a failure never leaves a half-written file behind, nor the
temporary one.

vLLM JSON
    The keys and order of ``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py``):
    ``date``, ``endpoint_type``, ``backend``, ``label``, ``model_id``, ``tokenizer_id``,
    ``num_prompts``, ``request_rate`` (``"inf"`` when unlimited), ``burstiness``,
    ``max_concurrency``, then ``duration``, ``completed``, ``failed``, ``total_input_tokens``,
    ``total_output_tokens``, ``request_throughput``, ``request_goodput`` (``null`` without
    goodput SLOs, as vLLM writes it), ``output_throughput``, ``total_token_throughput``,
    ``max_output_tokens_per_s``, ``max_concurrent_requests`` and ``{mean,median,std,pNN}_{ttft,
    tpot,itl,e2el}_ms``, followed by the rest of :meth:`SimResult.to_dict` (simllm's
    utilisation, KV cache, memory, time series: what ``simllm run --output`` wrote before).
    Values are the summary's. ``endpoint_type``, ``backend`` and ``label`` are ``"simllm"`` so a
    simulated result is never mistaken for a measured one. With per-request data (``detailed``)
    the per-request lists of ``vllm bench serve --save-detailed`` are added: ``input_lens``,
    ``output_lens`` (0 for a failed request, as vLLM), ``ttfts`` (seconds; 0.0 for a failed
    request), ``itls`` (an empty list per request: simllm keeps no per-token times),
    ``generated_texts`` (empty strings) and ``errors`` (``""`` for a success). vLLM's
    ``max_output_tokens_per_s`` / ``max_concurrent_requests`` (1-second buckets of the successful
    requests) need per-request data; without it they are ``null``. The output tokens of a
    request are spread evenly between its first token and its end, as simllm keeps no per-token
    times.

GuideLLM ``benchmarks.json``
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
    :func:`simllm.formats.measurements.read_guidellm_result` reads the file back.
"""
import csv
import io
import math
import uuid
from datetime import datetime
from pathlib import Path

import numpy as np

from simcore import codes
from simllm.errors import ConfigError
from simllm.fileio import output_path, write_output
from simllm.text import jsonable, to_json

#: Formats of :func:`export`.
FORMATS = ("vllm", "guidellm", "summary", "requests")
#: Which formats each suffix takes, the default first.
SUFFIX_FORMATS = {".json": ("vllm", "guidellm"), ".csv": ("summary", "requests"), ".parquet": ("summary", "requests")}

#: ``vllm bench serve --save-result``'s setup keys, in its order.
VLLM_SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
                   "request_rate", "burstiness", "max_concurrency")
#: Its benchmark keys before the per-metric statistics, in its order.
VLLM_RESULT_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput")
#: The per-request lists it keeps with ``--save-detailed``.
VLLM_DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
#: Its peak keys (1-second buckets), after the per-request lists.
VLLM_PEAK_KEYS = ("max_output_tokens_per_s", "max_concurrent_requests")
#: The metrics it reports mean/median/std/percentiles of (``--percentile-metrics``).
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")
#: The marker written as endpoint type, backend and label.
SIMULATED = "simllm"

#: The metrics of a GuideLLM generative benchmark.
GUIDELLM_METRICS = ("requests_per_second", "request_concurrency", "request_latency", "prompt_token_count",
                    "output_token_count", "time_to_first_token_ms", "time_per_output_token_ms",
                    "inter_token_latency_ms", "output_tokens_per_second", "tokens_per_second")
#: GuideLLM's ``Percentiles`` fields and their levels.
GUIDELLM_PERCENTILES = (("p001", 0.001), ("p01", 0.01), ("p05", 0.05), ("p10", 0.1), ("p25", 0.25), ("p50", 0.5),
                        ("p75", 0.75), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
_EVENT_EPSILON_S = 1e-6  # GuideLLM merges events closer than this
TOKEN_RATE_BINS = 1000

_ERRORS = {codes.STATUS_REJECTED: "rejected: longer than max_model_len or the KV cache",
           codes.STATUS_TIMED_OUT: "timed out"}


# ----------------------------------------------------------------------------- writing

def _pyarrow():
    try:
        import pyarrow  # noqa: PLC0415 - optional dependency
        import pyarrow.parquet  # noqa: PLC0415
    except ImportError:
        raise ConfigError("writing Parquet needs pyarrow, which is not installed: pip install pyarrow") from None
    return pyarrow


def _require_requests(result, what):
    if result.requests is None:
        raise ConfigError(f"{what} needs per-request data: simulate with keep_requests=True")


# ----------------------------------------------------------------------------- summary rows

def summary_row(result):
    """The summary as one flat row: nested dicts (``memory``) become dotted keys
    (``memory.weight_bytes``); NaN and infinities become ``None``."""
    row = {}

    def put(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            row[prefix] = jsonable(value)

    put("", result.summary)
    return row


def summary_csv(result):
    """:func:`summary_row` as CSV text: a header line and one row (``None`` as an empty cell)."""
    row = summary_row(result)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(row))
    writer.writerow(["" if v is None else v for v in row.values()])
    return buf.getvalue()


def _request_columns(result):
    """Per-request columns as :meth:`SimResult.save_detailed` writes them (status by name)."""
    cols = {"request": np.arange(len(result.requests["status"]))}
    for name, values in result.requests.items():
        if name == "status":
            names = np.array(codes.STATUS_NAMES, dtype=object)
            cols[name] = names[np.asarray(values, dtype=np.int64)]
        else:
            cols[name] = np.asarray(values)
    return cols


def _write_parquet(rows_or_columns, path):
    pa = _pyarrow()
    if isinstance(rows_or_columns, dict):
        table = pa.table({k: pa.array(v.tolist() if v.dtype == object else v) for k, v in rows_or_columns.items()})
    else:
        table = pa.Table.from_pylist(rows_or_columns)
    with output_path(path) as tmp:
        pa.parquet.write_table(table, tmp)
    return Path(path)


# ----------------------------------------------------------------------------- vLLM JSON

def _fill(a, where, value):
    out = np.asarray(a, dtype=float).copy()
    out[~where] = value
    return out


def _ramp_cumulative(grid, firsts, ends, ramp_counts, step_counts, side="right"):
    """Events up to each time of ``grid`` when each request emits ``step_counts`` events at its
    ``firsts`` time and ``ramp_counts`` more spread evenly until its ``ends`` time (a linear
    ramp, the continuous form of GuideLLM's evenly spaced token events). ``side="left"`` counts
    the step events strictly before each time."""
    grid = np.asarray(grid, dtype=float)
    out = np.zeros(grid.shape)
    if firsts.size == 0:
        return out
    span = ends - firsts
    flat = span <= 0
    step = step_counts + np.where(flat, ramp_counts, 0)  # a request without a span emits all at once
    order = np.argsort(firsts, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(step[order])])
    out += cum[np.searchsorted(firsts[order], grid, side=side)]
    slope = np.where(flat, 0.0, ramp_counts / np.where(flat, 1.0, span))
    for x, sign in ((firsts, 1.0), (ends, -1.0)):  # sum of slope * max(t - x, 0)
        o = np.argsort(x, kind="stable")
        cs = np.concatenate([[0.0], np.cumsum(slope[o])])
        cx = np.concatenate([[0.0], np.cumsum(slope[o] * x[o])])
        k = np.searchsorted(x[o], grid, side="right")
        out += sign * (grid * cs[k] - cx[k])
    return out


def _vllm_peaks(req):
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests``: per 1-second bucket
    from the first successful request's start, the output tokens received and the successful
    requests active at some time in the bucket."""
    ok = req["status"] == codes.STATUS_DONE
    if not ok.any():
        return 0.0, 0
    start, first, end = req["arrival_s"][ok], req["first_token_s"][ok], req["finish_s"][ok]
    out_tok = np.asarray(req["output_tokens"][ok], dtype=float)
    t0 = float(start.min())
    n = int(math.ceil(float(end.max()) - t0)) + 1
    edges = t0 + np.arange(n + 1, dtype=float)
    cum = _ramp_cumulative(edges, first, end, np.maximum(out_tok - 1, 0), np.minimum(out_tok, 1), side="left")
    tokens = np.diff(cum)
    active = np.zeros(n + 1)
    np.add.at(active, np.floor(start - t0).astype(np.int64), 1)
    np.add.at(active, np.minimum(np.floor(end - t0).astype(np.int64) + 1, n), -1)
    return float(np.round(tokens.max(), 6)), int(np.cumsum(active)[:n].max())


def _vllm_detailed(req):
    ok = req["status"] == codes.STATUS_DONE
    n = len(ok)
    return {
        "input_lens": np.asarray(req["input_tokens"]).astype(int).tolist(),
        "output_lens": np.where(ok, req["output_tokens"], 0).astype(int).tolist(),
        "ttfts": _fill(np.nan_to_num(req["ttft_s"], nan=0.0), ok, 0.0).tolist(),
        "itls": [[] for _ in range(n)],
        "generated_texts": [""] * n,
        "errors": ["" if s == codes.STATUS_DONE else _ERRORS.get(int(s), codes.STATUS_NAMES[int(s)])
                   for s in req["status"]],
    }


def vllm_result(result, *, detailed=None, date=None):
    """The result as ``vllm bench serve --save-result`` writes it (see the module notes).

    Parameters
    ----------
    result : SimResult
    detailed : bool, optional
        Add the per-request lists (``--save-detailed``); default: when the result kept
        per-request data. True without per-request data is a ConfigError.
    date : str, optional
        The ``date`` value (default now, ``%Y%m%d-%H%M%S`` as vLLM).

    Returns
    -------
    dict
        JSON-ready, in vLLM's key order, then simllm's other keys.
    """
    s = result.summary
    if detailed is None:
        detailed = result.requests is not None
    elif detailed:
        _require_requests(result, "the per-request lists of a vLLM JSON (detailed)")
    out = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": SIMULATED,
        "backend": SIMULATED,
        "label": SIMULATED,
        "model_id": s.get("model"),
        "tokenizer_id": s.get("model"),
        "num_prompts": s.get("num_requests", s["completed"] + s.get("failed", 0)),
        "request_rate": s.get("request_rate", "inf"),
        "burstiness": s.get("burstiness", 1.0),
        "max_concurrency": s.get("max_concurrency"),
    }
    for key in VLLM_RESULT_KEYS:
        out[key] = s.get(key)
    if detailed:
        out.update(_vllm_detailed(result.requests))
    peaks = _vllm_peaks(result.requests) if result.requests is not None else (None, None)
    out.update(zip(VLLM_PEAK_KEYS, peaks))
    for metric in VLLM_METRICS:  # mean, median, std, then the percentiles in the summary's order
        stats = [f"{stat}_{metric}_ms" for stat in ("mean", "median", "std") if f"{stat}_{metric}_ms" in s]
        stats += [k for k in s if k.endswith(f"_{metric}_ms") and k[:1] == "p" and k[1:2].isdigit()]
        out.update((k, s[k]) for k in stats)
    for key, value in result.to_dict().items():
        out.setdefault(key, value)
    return jsonable(out)


# ----------------------------------------------------------------------------- GuideLLM JSON

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
        return float(v[int(np.argmax(cdf >= level))])

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
    cum = _ramp_cumulative(grid, firsts, ends, ramp_counts, step_counts)
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
    _require_requests(result, "a GuideLLM export")
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
        "extras": {"simllm": {k: s.get(k) for k in ("model", "hardware", "tensor_parallel_size", "data_parallel_size",
                                                     "dtype", "kv_cache_dtype", "max_num_seqs",
                                                     "max_num_batched_tokens", "request_rate", "burstiness",
                                                     "max_concurrency")}},
        "start_time": start,
        "end_time": end,
        "duration": end - start,
        "metrics": metrics,
        "request_totals": totals,
        "request_samples": None,
        "requests": {"successful": [], "errored": [], "incomplete": [], "total": None},
    }
    return jsonable({"benchmarks": [bench]})


# ----------------------------------------------------------------------------- dispatch

def resolve_format(path, fmt=None):
    """The format :func:`export` uses for ``path`` and ``fmt``: ``(suffix, fmt)``.

    Raises
    ------
    ConfigError
        An unknown format, a suffix other than ``.json``/``.csv``/``.parquet`` (a JSON format
        may be written under any name), or a format the suffix cannot hold.
    """
    suffix = Path(path).suffix.lower()
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"one of {', '.join(FORMATS)}", key="format", value=fmt)
    if suffix not in SUFFIX_FORMATS:
        if fmt in ("vllm", "guidellm"):
            return ".json", fmt
        raise ConfigError("a .json, .csv or .parquet file name (or format vllm or guidellm for JSON under "
                          "another name)", key="file", value=str(path))
    allowed = SUFFIX_FORMATS[suffix]
    if fmt is None:
        return suffix, allowed[0]
    if fmt not in allowed:
        raise ConfigError(f"{' or '.join(allowed)} for a {suffix} file ({path})", key="format", value=fmt)
    return suffix, fmt


def export(result, path, fmt=None, *, detailed=None):
    """Write ``result`` to ``path`` in the format its suffix and ``fmt`` name (see the module
    notes), atomically.

    Parameters
    ----------
    result : SimResult
    path : str or Path
    fmt : {"vllm", "guidellm", "summary", "requests"}, optional
        Default: ``vllm`` for ``.json``, ``summary`` for ``.csv`` and ``.parquet``.
    detailed : bool, optional
        vLLM JSON only: add the per-request lists (default: when the result kept them).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ConfigError
        A bad name or format, per-request data needed but not kept, pyarrow missing for
        Parquet, or the file cannot be written. Nothing is left behind.
    """
    path = Path(path)
    suffix, fmt = resolve_format(path, fmt)
    if fmt == "vllm":
        return write_output(path, to_json(vllm_result(result, detailed=detailed)))
    if fmt == "guidellm":
        return write_output(path, to_json(guidellm_report(result)))
    if fmt == "summary":
        if suffix == ".csv":
            return write_output(path, summary_csv(result))
        return _write_parquet([summary_row(result)], path)
    _require_requests(result, "a per-request export")
    if suffix == ".csv":
        with output_path(path) as tmp:
            result.save_detailed(tmp)
        return path
    return _write_parquet(_request_columns(result), path)
