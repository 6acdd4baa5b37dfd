"""How far to trust a prediction: error bands from the validation errors of the nearest
calibrated cases, and whether a case lies inside what was calibrated.

The cases are the points of an accuracy record (:mod:`simllm.calibration.record`; the shipped
one is ``configs/accuracy.json``, ``simllm validate``'s errors on ``silicon_sample.csv``). For a
prediction of ``metric`` with :class:`Features` ``f``:

1. Each record point with that metric measured and predicted (and not ``below_bound``: measured
   faster than the datasheet peaks allow, as the validation statistics leave out) gets a distance

       d = sqrt(dlog2(isl)^2 + dlog2(osl)^2 + dlog2(concurrency)^2 + dlog2(tp)^2)
           + 3 [other GPU] + 3 [other model family] + 2 [other framework]

   in doublings: the workload and parallelism terms count how many times two is between the two
   cases, and the penalties make a point of the same GPU, family and framework win over any of
   another within a few doublings (:data:`PENALTY`).
2. The :data:`K` (20) nearest are kept (all, when fewer).
3. Their log errors ``r = ln(predicted / measured)`` give the band: the measured value lies in
   ``[value x exp(-q(1+c)/2), value x exp(-q(1-c)/2)]`` where ``q(a)`` is the empirical
   a-quantile of ``r`` (numpy's linear interpolation) and ``c`` the coverage (0.8 by default).

Percentiles (P99 TTFT, P99 TPOT) borrow the errors of the means, which is all the measurements
record; the three throughputs share the closed-loop throughput's errors, and get no band in an
open loop at a finite rate (its throughput is the arrival rate while the engine keeps up). Numpy
only, O(record size) per band.

Out of domain: :func:`domain_reasons` says why a case lies outside the record (a GPU, framework or
model family with no point, or this model never with this framework on this GPU; lengths, load
or TP beyond the record's range; data parallelism). The band is still given, from the nearest
cases there are, with the reasons beside it; it is then less reliable: leaving each point's
whole (GPU, framework, model) group out, the 80% bands hold only 54-57% of the measured values
where they hold 84-88% with it in (:func:`leave_one_out_coverage`).

A band need not contain the prediction: it is where the measured values lay relative to their
predictions for the nearest cases, bias included.
"""
import math
from dataclasses import dataclass

import numpy as np

from simllm.calibration.record import load_record, model_family

#: Nearest cases a band is made from.
K = 20
#: Distance added (in doublings) when a case's GPU, model family or framework differs.
PENALTY = {"gpu": 3.0, "family": 3.0, "framework": 2.0}
#: The default coverage of a band.
COVERAGE = 0.8
#: Summary keys that get a band, and the record metric whose errors they take.
METRIC_OF = {
    "mean_ttft_ms": "ttft_ms", "p99_ttft_ms": "ttft_ms",
    "mean_tpot_ms": "tpot_ms", "p99_tpot_ms": "tpot_ms",
    "request_throughput": "output_throughput", "output_throughput": "output_throughput",
    "total_token_throughput": "output_throughput",
}
#: The headline figures that get a band, in the order reports show them.
HEADLINE = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "request_throughput", "output_throughput",
            "total_token_throughput")


@dataclass(frozen=True)
class Features:
    """What a prediction is of, as the record describes its points: ``model`` (preset or model
    name), ``gpu`` (hardware preset), ``framework``, ``tp``, mean ``isl`` and ``osl``,
    ``concurrency`` (clients of a closed loop, or mean requests in flight) and ``dp``."""

    model: str
    gpu: str
    framework: str
    tp: int
    isl: float
    osl: float
    concurrency: float
    dp: int = 1

    @property
    def family(self):
        return model_family(self.model)


@dataclass(frozen=True)
class Band:
    """The band of ``metric`` around ``value``: the measured value was within ``[lo, hi]`` for
    ``coverage`` of the ``points`` nearest calibrated cases (``lo``/``hi`` are factors when
    ``value`` is 1). ``in_domain`` False with ``reasons`` when the case lies outside the record."""

    metric: str
    value: float
    lo: float
    hi: float
    coverage: float
    points: int
    in_domain: bool = True
    reasons: tuple = ()


def features_of(summary, framework="vllm"):
    """The :class:`Features` of a simulation's summary (``framework`` as the serving config names
    it); None when nothing completed. Lengths are the completed requests' means; the load is
    ``max_concurrency`` for a closed loop, else the mean requests in flight (Little's law:
    request throughput x mean end-to-end latency)."""
    done = summary.get("completed") or 0
    if done <= 0:
        return None
    conc = summary.get("max_concurrency") or 0
    if not conc:
        conc = summary.get("request_throughput", 0.0) * summary.get("mean_e2el_ms", 0.0) / 1e3
    return Features(model=str(summary.get("model", "")), gpu=str(summary.get("hardware", "")), framework=framework,
                    tp=int(summary.get("tensor_parallel_size", 1)), isl=summary["total_input_tokens"] / done,
                    osl=summary["total_output_tokens"] / done, concurrency=max(float(conc), 1.0),
                    dp=int(summary.get("data_parallel_size", 1)))


def _key(name):
    return str(name).strip().lower().replace("_", "-")


def _keys(names):
    """:func:`_key` of every name of a str array, computed once per distinct name (the shipped
    record's 3,538 names hold a few dozen; a list comprehension over all of them cost 5 ms a
    call, and a report makes a dozen calls)."""
    distinct, where = np.unique(np.asarray(names), return_inverse=True)
    return np.array([_key(g) for g in distinct])[where.reshape(-1)]


def _log2(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.maximum(np.asarray(x, dtype=float), 1e-9))


def distance_terms(record):
    """What :func:`distances` reads of ``record``, computed once: the log2 of its points' lengths,
    concurrency and TP, and their GPU, family and framework keys (a caller measuring many
    distances to one record passes it to :func:`distances`)."""
    return (_log2(record["isl"]), _log2(record["osl"]), _log2(record["concurrency"]), _log2(record["tp"]),
            _keys(record["gpu"]), record["family"], _keys(record["framework"]))


def distances(features, record, terms=None):
    """The distance (see the module's docstring) of every record point to ``features``
    (``terms``: the record's :func:`distance_terms`, when already at hand)."""
    f = features
    isl, osl, conc, tp, gpu, family, framework = distance_terms(record) if terms is None else terms
    d2 = ((isl - math.log2(max(f.isl, 1e-9))) ** 2
          + (osl - math.log2(max(f.osl, 1e-9))) ** 2
          + (conc - math.log2(max(f.concurrency, 1e-9))) ** 2
          + (tp - math.log2(max(f.tp, 1))) ** 2)
    d = np.sqrt(d2)
    d = d + PENALTY["gpu"] * (gpu != _key(f.gpu))
    d = d + PENALTY["family"] * (family != f.family)
    d = d + PENALTY["framework"] * (framework != _key(f.framework))
    return d


def log_errors(record, metric):
    """``ln(predicted / measured)`` of ``metric`` (a record metric: ``ttft_ms``, ``tpot_ms``,
    ``output_throughput``) per point; NaN where either is missing or the point is below bound."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(record[f"predicted_{metric}"] / record[f"measured_{metric}"])
    r[~np.isfinite(r) | record["below_bound"]] = np.nan
    return r


def nearest(features, record, metric, k=K, terms=None):
    """Indices of the ``k`` record points nearest ``features`` that have ``metric``, nearest
    first (ties by record order); ``terms`` as :func:`distances` takes them."""
    usable = np.flatnonzero(~np.isnan(log_errors(record, metric)))
    if usable.size == 0:
        return usable
    d = distances(features, record, terms)[usable]
    order = np.argsort(d, kind="stable")[:k]
    return usable[order]


def _tokens(n):
    return f"{n / 1024:g}k" if n >= 1024 and n % 1024 == 0 else f"{n / 1000:.3g}k" if n >= 1000 else f"{n:g}"


def _range_reason(what, value, values, fmt=_tokens):
    values = values[np.isfinite(values)]
    if values.size == 0:
        return ""
    lo, hi = float(values.min()), float(values.max())
    if value > hi * 1.0001:
        return f"{what} {fmt(round(value))} above the calibrated {fmt(hi)}"
    if value < lo / 1.0001:
        return f"{what} {fmt(round(value))} below the calibrated {fmt(lo)}"
    return ""


def domain_reasons(features, record):
    """Why ``features`` lies outside the record's domain (empty: inside): a GPU, framework (on
    that GPU) or model family the record has no point of, a model of a known family that was not
    itself calibrated, input or output length, load or TP beyond the record's range, or data
    parallelism (every record point is one engine)."""
    f = features
    out = []
    gpus = _keys(record["gpu"])
    frameworks = _keys(record["framework"])
    known_gpus = sorted(set(record["gpu"]))
    if _key(f.gpu) not in set(gpus):
        out.append(f"GPU {f.gpu} was never calibrated (calibrated: {', '.join(known_gpus)})")
        if _key(f.framework) not in set(frameworks):
            out.append(f"framework {f.framework} was never calibrated")
    else:
        here = frameworks[gpus == _key(f.gpu)]
        if _key(f.framework) not in set(here):
            out.append(f"framework {f.framework} was never calibrated on {f.gpu} "
                       f"(calibrated there: {', '.join(sorted(set(here)))})")
    families = set(record["family"])
    models = _keys(record["model"])
    if f.family not in families:
        out.append(f"model family {f.family} was never calibrated (calibrated: {', '.join(sorted(families))})")
    elif _key(f.model) not in set(models):
        siblings = sorted({m for m, fam in zip(record["model"], record["family"]) if fam == f.family})
        out.append(f"model {f.model} was never calibrated itself (its family's {', '.join(siblings)} were)")
    elif not out and not np.any((models == _key(f.model)) & (gpus == _key(f.gpu)) & (frameworks == _key(f.framework))):
        out.append(f"{f.model} was never calibrated with {f.framework} on {f.gpu} (its band borrows from other "
                   "models, frameworks or GPUs)")
    for what, value, column, fmt in (("input length", f.isl, "isl", _tokens), ("output length", f.osl, "osl", _tokens),
                                     ("concurrency", f.concurrency, "concurrency", lambda v: f"{v:g}"),
                                     ("TP", f.tp, "tp", lambda v: f"{v:g}")):
        reason = _range_reason(what, value, record[column], fmt)
        if reason:
            out.append(reason)
    if f.dp > max(1, int(np.nanmax(record["dp"])) if len(record) else 1):
        out.append(f"data parallelism (DP={f.dp}) was never calibrated: every calibrated point is one engine")
    return tuple(out)


def error_band(features, metric, record=None, coverage=COVERAGE, *, value=1.0, k=K, reasons=None, terms=None):
    """The band of a prediction of ``metric`` for ``features``.

    Parameters
    ----------
    features : Features
    metric : str
        A record metric (``ttft_ms``, ``tpot_ms``, ``output_throughput``) or a summary key of
        :data:`METRIC_OF` (``p99_ttft_ms``, ...).
    record : Record, optional
        Default: the shipped one (:func:`simllm.calibration.record.load_record`).
    coverage : float
        The share of the nearest cases' measured values the band holds (0 < coverage < 1).
    value : float
        The prediction (default 1: ``lo`` and ``hi`` are then factors).
    k : int
        Nearest cases used.
    reasons : tuple of str, optional
        :func:`domain_reasons` of ``features`` and ``record`` when the caller has them.
    terms : tuple, optional
        The record's :func:`distance_terms`, for a caller making many bands from one record.

    Returns
    -------
    Band or None
        None when the record has no point with ``metric``.
    """
    record = load_record() if record is None else record
    name = METRIC_OF.get(metric, metric)
    idx = nearest(features, record, name, k, terms)
    if idx.size == 0:
        return None
    r = log_errors(record, name)[idx]
    q_lo, q_hi = np.quantile(r, [(1.0 - coverage) / 2.0, (1.0 + coverage) / 2.0])
    reasons = domain_reasons(features, record) if reasons is None else reasons
    return Band(metric, float(value), float(value * math.exp(-q_hi)), float(value * math.exp(-q_lo)), float(coverage),
                int(idx.size), not reasons, reasons)


def paced_by_arrivals(summary):
    """True for an open loop at a finite rate: its throughput is the arrival rate while the
    engine keeps up, not a prediction the closed-loop errors describe (no throughput band)."""
    rate = summary.get("request_rate")
    if summary.get("max_concurrency") or rate is None or isinstance(rate, str):
        return False  # a closed loop, or everything sent at once ("inf")
    return math.isfinite(float(rate))


def summary_bands(summary, framework="vllm", record=None, coverage=COVERAGE, keys=HEADLINE, k=K):
    """Bands of the summary's headline figures: ``({key: Band}, reasons)``, the reasons empty
    when the case lies inside the record's domain. A key gets no band when it is missing or not
    a positive finite number, and throughputs none when :func:`paced_by_arrivals`; ``({}, ())``
    when nothing completed."""
    record = load_record() if record is None else record
    features = features_of(summary, framework)
    if features is None:
        return {}, ()
    out = {}
    reasons = domain_reasons(features, record)
    for key in keys:
        if METRIC_OF.get(key) == "output_throughput" and paced_by_arrivals(summary):
            continue
        v = summary.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            continue
        band = error_band(features, key, record, coverage, value=float(v), k=k, reasons=reasons)
        if band is not None:
            out[key] = band
    return out, reasons


def leave_one_out_coverage(record, metric, coverage=COVERAGE, k=K, hold_out_group=False):
    """How often a point's measured value falls in the band made from the other points:
    ``(share covered, median band width as a factor hi/lo)`` over the points with ``metric``.
    ``hold_out_group`` also leaves out the point's whole (GPU, framework, model) group, as for a
    case never calibrated. O(n^2) in the record's points (a few seconds for the shipped one)."""
    r = log_errors(record, metric)
    usable = np.flatnonzero(~np.isnan(r))
    terms = distance_terms(record)
    hits, widths = [], []
    for i in usable:
        f = Features(record["model"][i], record["gpu"][i], record["framework"][i], int(record["tp"][i]),
                     float(record["isl"][i]), float(record["osl"][i]), float(record["concurrency"][i]))
        others = usable[usable != i]
        if hold_out_group:
            same = ((record["gpu"][others] == record["gpu"][i]) & (record["framework"][others] == record["framework"][i])
                    & (record["model"][others] == record["model"][i]))
            others = others[~same]
        if others.size == 0:
            continue
        near = others[np.argsort(distances(f, record, terms)[others], kind="stable")[:k]]
        q_lo, q_hi = np.quantile(r[near], [(1.0 - coverage) / 2.0, (1.0 + coverage) / 2.0])
        hits.append(q_lo <= r[i] <= q_hi)
        widths.append(math.exp(q_hi - q_lo))
    if not hits:
        return math.nan, math.nan
    return float(np.mean(hits)), float(np.median(widths))


def band_dict(bands):
    """``{key: [lo, hi]}`` of :func:`summary_bands`' bands (JSON-ready)."""
    return {key: [b.lo, b.hi] for key, b in bands.items()}
