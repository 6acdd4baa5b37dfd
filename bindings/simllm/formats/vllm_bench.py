"""vLLM's ``vllm bench serve`` result JSON (``--save-result``), read and written.

Reading (:func:`read_vllm_result`; the older ``benchmark_serving.py`` keys too): ``model_id``,
``num_prompts``, ``request_rate``, ``max_concurrency``, ``total_input_tokens``,
``total_output_tokens``, ``completed``, ``mean_ttft_ms``, ``mean_tpot_ms``, ``mean_itl_ms``,
``mean_e2el_ms``, ``output_throughput`` into one
:class:`~simllm.formats.common.Measurement`. The file records neither the GPU, the parallel
layout nor the precision: those come from the caller.

Writing (:func:`vllm_result`)
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
"""
import math
from datetime import datetime

import numpy as np

from simcore import codes
from simllm.errors import ConfigError
from simllm.formats.common import (
    NAN,
    SIMULATED,
    Measurement,
    field_number,
    load_json,
    ramp_cumulative,
    require_requests,
)
from simllm.text import jsonable

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

_ERRORS = {codes.STATUS_REJECTED: "rejected: longer than max_model_len or the KV cache",
           codes.STATUS_TIMED_OUT: "timed out"}


# ----------------------------------------------------------------------------- reading

def is_vllm_result(data):
    """Whether parsed JSON is a vllm bench serve result (it has ``mean_ttft_ms``)."""
    return isinstance(data, dict) and "mean_ttft_ms" in data


def vllm_rows(data, source, hardware, tp, precision):
    """The measurement of a parsed vllm bench serve result (``source`` names it in errors)."""
    completed = field_number(data, "completed", source, None, integer=True)
    if completed <= 0:
        raise ConfigError("completed > 0", source=source, key="completed", value=completed)
    rate = data.get("request_rate", "inf")
    rate = math.inf if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    return [Measurement(
        source=source, line=0, model=str(data.get("model_id") or data.get("tokenizer_id") or ""),
        hardware=hardware, backend=str(data.get("backend", "vllm")), precision=precision, mode="agg",
        tp=tp, pp=1, dp=1,
        input_len=round(field_number(data, "total_input_tokens", source, None) / completed),
        output_len=round(field_number(data, "total_output_tokens", source, None) / completed),
        concurrency=int(data.get("max_concurrency") or 0), request_rate=rate,
        num_prompts=int(data.get("num_prompts") or completed),
        ttft_ms=field_number(data, "mean_ttft_ms", source, None),
        tpot_ms=field_number(data, "mean_tpot_ms", source, None, default=NAN),
        itl_ms=field_number(data, "mean_itl_ms", source, None, default=NAN),
        e2el_ms=field_number(data, "mean_e2el_ms", source, None, default=NAN),
        output_throughput=field_number(data, "output_throughput", source, None, default=NAN),
    )]


def read_vllm_result(path, hardware="", tp=1, precision=""):
    """One ``vllm bench serve`` result JSON (current or ``benchmark_serving.py`` keys)."""
    data = load_json(path)
    if not is_vllm_result(data):
        raise ConfigError("a vllm bench serve result (a JSON object with mean_ttft_ms)", source=str(path))
    return vllm_rows(data, str(path), hardware, tp, precision)


# ----------------------------------------------------------------------------- writing

def _fill(a, where, value):
    out = np.asarray(a, dtype=float).copy()
    out[~where] = value
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
    cum = ramp_cumulative(edges, first, end, np.maximum(out_tok - 1, 0), np.minimum(out_tok, 1), side="left")
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
        require_requests(result, "the per-request lists of a vLLM JSON (detailed)")
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
