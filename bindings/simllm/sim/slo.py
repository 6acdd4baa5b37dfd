"""Service-level objectives, one type for every syntax simllm accepts:

- ``--slo "ttft_p99<=2000,tpot_p99<=50"`` (simllm optimize; :func:`parse_slo`): bounds on summary
  statistics, each an :class:`SLO`;
- ``--goodput ttft:500 tpot:50`` (vllm bench serve; :func:`parse_goodput`) and a sweep spec's
  ``slo: {ttft: 500}``: per-request thresholds for ``request_goodput``, the ``goodput`` mapping
  :func:`simllm.simulate` takes (:data:`GOODPUT_METRICS`);
- ``--slo-p99-latency-ms 8000`` (simllm loadtest; :func:`latency_p99_slo`).

:func:`goodput_from_slos` derives the per-request thresholds from statistic bounds and
:func:`check_slos` lists what a summary breaks.
"""
import math
import re
from dataclasses import dataclass

from simllm.errors import ConfigError
from simllm.sim.results import percentile_key
from simllm.text import as_float, format_number

CLI = "command line"
#: The per-request latencies goodput thresholds apply to (vllm bench serve's --goodput keys).
GOODPUT_METRICS = ("ttft", "tpot", "e2el")

_OPS = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}
_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2el", "latency": "e2el", "e2e": "e2el",
            "queue": "queue"}
_STAT = r"mean|median|std|p\d+(?:\.\d+)?"
_ALIAS = re.compile(rf"({'|'.join(_METRICS)})_({_STAT})")
_ALIAS_REVERSED = re.compile(rf"({_STAT})_({'|'.join(_METRICS)})(?:_ms)?")
_PIECE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                    r"\s*(ms|s|%)?\s*")
_FRACTIONS = frozenset({"error_rate", "compute_utilization", "bandwidth_utilization", "gpu_busy_fraction",
                        "kv_cache_usage_mean", "kv_cache_usage_peak"})
SLO_EXPECTED = ("METRIC<=NUMBER (or <, >=, >), comma-separated, e.g. ttft_p99<=2000,tpot_p99<=50; METRIC is "
                "ttft|tpot|itl|e2el|queue_mean|median|std|pNN or a summary key such as error_rate")


@dataclass(frozen=True)
class SLO:
    """One constraint on a summary: ``summary[key] op value``.

    Attributes
    ----------
    name : str
        As written (``ttft_p99``).
    key : str
        The summary key (``p99_ttft_ms``).
    op : str
        ``<=``, ``<``, ``>=`` or ``>``.
    value : float
        The bound, in the key's unit (ms for ``*_ms``, a fraction for ``error_rate``).
    """

    name: str
    key: str
    op: str
    value: float

    @property
    def text(self):
        unit = " ms" if self.key.endswith("_ms") else ""
        return f"{self.name}{self.op}{self.value:g}{unit}"

    def actual(self, summary):
        return as_float(summary.get(self.key)) if summary is not None else math.nan

    def holds(self, value):
        """Whether ``value`` meets the constraint (False when it is missing or NaN)."""
        v = as_float(value)
        return not math.isnan(v) and _OPS[self.op](v, self.value)

    def met(self, summary):
        """Whether ``summary`` meets the constraint (False when the value is missing or NaN)."""
        return self.holds(self.actual(summary))

    @property
    def percentile(self):
        """The percentile this constraint needs computed (None for mean, median, std, others)."""
        m = re.fullmatch(r"p(\d+(?:\.\d+)?)_(?:ttft|tpot|itl|e2el|queue)_ms", self.key)
        return float(m.group(1)) if m else None

    @property
    def goodput_metric(self):
        """``ttft``, ``tpot`` or ``e2el`` when this is an upper bound on one of their
        percentiles or median, which then becomes a per-request goodput threshold; else None."""
        m = re.fullmatch(r"(median|p[\d.]+)_(ttft|tpot|e2el)_ms", self.key)
        return m.group(2) if m and self.op in ("<=", "<") else None


def _slo_key(name, piece):
    m = _ALIAS.fullmatch(name) or None
    if m:
        metric, stat = _METRICS[m.group(1)], m.group(2)
    else:
        m = _ALIAS_REVERSED.fullmatch(name)
        if not m:
            return name  # a raw summary key, checked against the first summary
        stat, metric = m.group(1), _METRICS[m.group(2)]
    if stat.startswith("p"):
        p = float(stat[1:])
        if not 0 <= p <= 100:
            raise ConfigError(f"a percentile in [0, 100] in {SLO_EXPECTED}", source=CLI, key="--slo", value=piece)
        stat = percentile_key(p)
    return f"{stat}_{metric}_ms"


def parse_slo(text):
    """Parse SLO constraints.

    Parameters
    ----------
    text : str, sequence of str, or sequence of SLO
        ``"ttft_p99<=2000,tpot_p99<=50"``; several strings are joined with commas (the pieces of
        ``--slo A B``); SLO objects pass through.

    Returns
    -------
    list of SLO

    Raises
    ------
    ConfigError
        One line naming ``--slo``, the bad piece and what is expected (an empty text, a missing
        or unknown operator, a value that is not a number, a unit that does not fit the metric).
    """
    if text is None:
        return []
    if not isinstance(text, str):
        items = list(text)
        if all(isinstance(s, SLO) for s in items):
            return items
        text = ",".join(str(s) for s in items)
    pieces = [p for p in text.split(",")]
    if not text.strip():
        raise ConfigError(SLO_EXPECTED, source=CLI, key="--slo", value=text)
    out = []
    for piece in pieces:
        if not piece.strip():
            raise ConfigError(f"no empty piece between commas; {SLO_EXPECTED}", source=CLI, key="--slo", value=text)
        m = _PIECE.fullmatch(piece)
        if not m:
            raise ConfigError(SLO_EXPECTED, source=CLI, key="--slo", value=piece.strip())
        name, op, number, unit = m.groups()
        key = _slo_key(name, piece.strip())
        value = float(number)
        if unit in ("ms", "s"):
            if not key.endswith("_ms"):
                raise ConfigError(f"a plain number for {key} (ms and s fit latency metrics only)", source=CLI,
                                  key="--slo", value=piece.strip())
            value *= 1000.0 if unit == "s" else 1.0
        elif unit == "%":
            if key not in _FRACTIONS:
                raise ConfigError(f"a plain number for {key} (% fits fractions only: {', '.join(sorted(_FRACTIONS))})",
                                  source=CLI, key="--slo", value=piece.strip())
            value /= 100.0
        out.append(SLO(name, key, op, value))
    return out


def goodput_from_slos(slos):
    """The per-request thresholds for :func:`simllm.simulate`'s ``goodput`` (ms): for TTFT, TPOT
    and E2E latency, the tightest ``<``/``<=`` bound on a percentile or the median. None when
    there are none."""
    out = {}
    for s in slos:
        metric = s.goodput_metric
        if metric:
            out[metric] = min(out.get(metric, math.inf), s.value)
    return out or None


_NEGATION = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}


def check_slos(summary, slos):
    """The constraints ``summary`` breaks, each as ``"ttft_p99 2,345 ms > 2000 ms"`` (the value,
    then the negated constraint)."""
    out = []
    for s in slos:
        if not s.met(summary):
            unit = " ms" if s.key.endswith("_ms") else ""
            v = s.actual(summary)
            shown = "missing" if math.isnan(v) else f"{format_number(v)}{unit}"
            out.append(f"{s.name} {shown} {_NEGATION[s.op]} {s.value:g}{unit}")
    return out


def parse_goodput(items, key="--goodput"):
    """vllm bench serve's ``--goodput KEY:MS ...`` as the ``goodput`` mapping of
    :func:`simllm.simulate` (``{"ttft": 500.0}``); None for no items.

    Raises
    ------
    ConfigError
        A key other than :data:`GOODPUT_METRICS` or a value that is not a number.
    """
    if not items:
        return None
    slos = {}
    for item in items:
        metric, _, value = item.partition(":")
        if metric not in GOODPUT_METRICS:
            raise ConfigError("ttft:MS, tpot:MS or e2el:MS", source=CLI, key=key, value=item)
        try:
            slos[metric] = float(value)
        except ValueError:
            raise ConfigError("KEY:MS with a number of milliseconds", source=CLI, key=key, value=item) from None
    return check_goodput(slos, key)


def check_goodput(goodput, key="goodput"):
    """``goodput`` (``{"ttft": ms, ...}``, or None) if every key is one of :data:`GOODPUT_METRICS`
    and every threshold a number of milliseconds in (0, 1e12]; else :class:`ConfigError`."""
    if goodput is None:
        return None
    if not isinstance(goodput, dict):
        raise ConfigError("a mapping of ttft, tpot or e2el to milliseconds", source=CLI, key=key, value=goodput)
    for metric, ms in goodput.items():
        if metric not in GOODPUT_METRICS:
            raise ConfigError("ttft, tpot or e2el", source=CLI, key=key, value=metric)
        ok = isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0.0 < ms <= 1e12
        if not ok:
            raise ConfigError(f"{metric}:MS with milliseconds in (0, 1e12]", source=CLI, key=key, value=f"{metric}:{ms}")
    return goodput


def latency_p99_slo(ms):
    """The load test's ``--slo-p99-latency-ms``: P99 end-to-end latency at most ``ms``."""
    return SLO("e2el_p99", "p99_e2el_ms", "<=", float(ms))
