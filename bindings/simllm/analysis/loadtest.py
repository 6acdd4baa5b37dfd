"""EvalScope-style load test: simulate one workload at several load levels (closed-loop
concurrencies or open-loop request rates), tabulate throughput, latency and utilisation per level,
and recommend the concurrency (or rate) past which more load buys little throughput.

The three ways to give the load levels::

    plan_points(parallel=[1, 10, 50, 100, 200], number=[10, 20, 100, 200, 400])  # evalscope perf
    plan_points(concurrency_range="1:256:x2")     # 1, 2, 4, ..., 256 concurrent clients
    plan_points(request_rates=[2, 4, 8, 16])      # open loop, Poisson arrivals (vllm bench serve)

``--parallel``/``--number`` pair element by element as in ``evalscope perf``: the i-th concurrency
runs ``number[i]`` requests. Each point is one :func:`simllm.simulate` of the base workload with
its load settings replaced.
"""
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace

from simllm.errors import ConfigError
from simllm.fileio import csv_text
from simllm.sim.capacity import capacity
from simllm.sim.runner import Base, Task, run_simulations
from simllm.sim.slo import latency_p99_slo
from simllm.text import table as text_table

SOURCE = "command line"
DEFAULT_NUMBER_PER_CLIENT = 10  # requests per client when --number is not given (closed loop)
DEFAULT_MIN_GAIN = 0.10  # a step's relative throughput gain below which throughput counts as saturated
DEFAULT_NUM_PROMPTS = 1000  # requests per point of a rate sweep when --number is not given (vLLM's default)
MAX_POINTS = 1000  # a concurrency range longer than this is almost certainly a typo
_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*:\s*([x*+]?)\s*(\d+(?:\.\d*)?)\s*$")


@dataclass(frozen=True)
class LoadPoint:
    """One load level of a load test.

    Attributes
    ----------
    concurrency : int
        Concurrent clients of a closed loop (each sends its next request when its last one
        ends); 0 for an open loop.
    request_rate : float
        Open-loop requests per second (Poisson arrivals unless the base workload says
        otherwise); ``inf`` for a closed loop (or a burst at t=0 when ``concurrency`` is 0).
    num_prompts : int
        Requests sent at this point.
    """

    concurrency: int = 0
    request_rate: float = math.inf
    num_prompts: int = DEFAULT_NUM_PROMPTS

    @property
    def closed_loop(self):
        """True for a closed loop of ``concurrency`` clients."""
        return self.concurrency > 0

    def label(self):
        """The load in words: ``concurrency 50`` or ``rate 8 req/s``."""
        if self.closed_loop:
            return f"concurrency {self.concurrency}"
        return f"rate {self.request_rate:g} req/s"


# Columns of a load test, with EvalScope's `evalscope perf` summary titles (which use seconds
# where simllm, like `vllm bench serve`, uses milliseconds):
#   concurrency               Conc.                    (0 for an open-loop point)
#   request_rate_rps          Rate (open loop; vllm bench serve --request-rate; inf for a closed loop)
#   num_prompts               Num                      (requests sent at the point)
#   request_throughput_rps    RPS (req/s)
#   avg_latency_ms            Avg Lat. (s)             (mean end-to-end latency)
#   p90_latency_ms            P90 Lat. (s) in EvalScope's percentile table
#   p99_latency_ms            P99 Lat. (s)
#   mean_ttft_ms              Avg TTFT (s)
#   p99_ttft_ms               P99 TTFT (s)
#   mean_tpot_ms              Avg TPOT (s)
#   p99_tpot_ms               P99 TPOT (s)
#   output_throughput_tok_s   Gen. toks/s
#   compute_utilization       (simllm) achieved FLOP/s / peak, fraction 0..1
#   bandwidth_utilization     (simllm) achieved memory bytes/s / peak, fraction 0..1
#   kv_cache_usage_mean       (simllm) time-averaged fraction of KV-cache blocks in use
#   kv_cache_usage_peak       (simllm) largest fraction of KV-cache blocks in use
#   error_rate                1 - Success Rate (%) / 100 (rejected or timed-out requests)
_SUMMARY_KEYS = {  # LoadTestRow field -> SimResult.summary key (vllm bench serve's)
    "request_throughput_rps": "request_throughput", "avg_latency_ms": "mean_e2el_ms",
    "p90_latency_ms": "p90_e2el_ms", "p99_latency_ms": "p99_e2el_ms", "mean_ttft_ms": "mean_ttft_ms",
    "p99_ttft_ms": "p99_ttft_ms", "mean_tpot_ms": "mean_tpot_ms", "p99_tpot_ms": "p99_tpot_ms",
    "output_throughput_tok_s": "output_throughput", "compute_utilization": "compute_utilization",
    "bandwidth_utilization": "bandwidth_utilization", "kv_cache_usage_mean": "kv_cache_usage_mean",
    "kv_cache_usage_peak": "kv_cache_usage_peak", "error_rate": "error_rate",
}


@dataclass(frozen=True)
class LoadTestRow:
    """The measured (simulated) numbers of one load point; units in the names (``_ms``
    milliseconds, ``_rps`` requests per second, ``_tok_s`` output tokens per second; the
    utilisations and rates are fractions 0..1). Metrics default to NaN so hand-made rows need
    only what they use."""

    concurrency: int = 0
    request_rate_rps: float = math.inf
    num_prompts: int = 0
    request_throughput_rps: float = math.nan
    avg_latency_ms: float = math.nan
    p90_latency_ms: float = math.nan
    p99_latency_ms: float = math.nan
    mean_ttft_ms: float = math.nan
    p99_ttft_ms: float = math.nan
    mean_tpot_ms: float = math.nan
    p99_tpot_ms: float = math.nan
    output_throughput_tok_s: float = math.nan
    compute_utilization: float = math.nan
    bandwidth_utilization: float = math.nan
    kv_cache_usage_mean: float = math.nan
    kv_cache_usage_peak: float = math.nan
    error_rate: float = math.nan

    @classmethod
    def from_summary(cls, point, summary):
        """The row of ``point`` from a :attr:`SimResult.summary`."""
        return cls(concurrency=point.concurrency, request_rate_rps=float(point.request_rate),
                   num_prompts=point.num_prompts, **{k: float(summary[v]) for k, v in _SUMMARY_KEYS.items()})

    @classmethod
    def from_dict(cls, data):
        """Inverse of :meth:`to_dict` (``"inf"`` back to ``inf``, ``None`` to NaN)."""
        values = {}
        for f in fields(cls):
            if f.name in data:
                v = data[f.name]
                values[f.name] = math.nan if v is None else float(v) if isinstance(v, str) else v
        return cls(**values)

    def to_dict(self):
        """JSON-ready: infinities become ``"inf"`` (as in ``SimResult.summary``), NaN ``None``."""
        return {k: _json_number(v) for k, v in asdict(self).items()}

    @property
    def load(self):
        """The load level: the concurrency of a closed loop, else the request rate (req/s)."""
        return self.concurrency if self.concurrency > 0 else self.request_rate_rps

    def label(self):
        """The load in words: ``concurrency 50`` or ``rate 8 req/s``."""
        if self.concurrency > 0:
            return f"concurrency {self.concurrency}"
        return f"rate {self.request_rate_rps:g} req/s"


@dataclass(frozen=True)
class LoadTestResult:
    """Rows of a load test, in the order of the points, and the recommendation.

    Attributes
    ----------
    points : tuple of LoadPoint
    rows : tuple of LoadTestRow
    recommended : int or None
        Index into ``rows`` of the recommended load point; None when no point meets the SLO.
    reason : str
        One sentence explaining the recommendation, with numbers.
    min_gain : float
        Relative throughput gain per step below which throughput counts as saturated.
    slo_p99_latency_ms : float or None
        The P99 end-to-end latency SLO applied, in ms.
    title : str
        Model, hardware and request shape, for reports.
    results : tuple of SimResult
        The simulation of each point (per-request rows only with ``keep_requests=True``).
    capacity : Capacity or None
        The deployment's capacity for the points' request shape (:func:`simllm.sim.capacity.capacity`):
        an open-loop rate above its ``request_throughput_rps`` grows the queue without bound. None
        for a trace's requests or when not asked.
    """

    points: tuple
    rows: tuple
    recommended: object
    reason: str
    min_gain: float = DEFAULT_MIN_GAIN
    slo_p99_latency_ms: object = None
    title: str = ""
    results: tuple = field(default=(), repr=False, compare=False)
    capacity: object = None


# ----------------------------------------------------------------------------- planning


def _positive_values(values, flag, integer):
    """``values`` as a list of positive ints (``integer``) or of rates > 0 (``inf`` allowed:
    everything at t=0), or a ConfigError naming ``flag``."""
    values = list(values)
    if not values:
        raise ConfigError("at least one value", source=SOURCE, key=flag)
    out = []
    for v in values:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0  # NaN fails too
        if integer:
            ok = ok and math.isfinite(v) and v >= 1 and v == int(v)
        if not ok:
            expected = "positive integers" if integer else "request rates > 0 (requests per second, or inf)"
            raise ConfigError(expected, source=SOURCE, key=flag, value=v)
        out.append(int(v) if integer else float(v))
    return out


def _positive_ints(values, flag):
    return _positive_values(values, flag, integer=True)


def _positive_rates(values, flag):
    return _positive_values(values, flag, integer=False)


def parse_concurrency_range(spec):
    """Expand a concurrency range into the concurrencies to test.

    Parameters
    ----------
    spec : str or tuple
        ``"START:STOP:STEP"`` with ``STEP`` either ``xF`` (multiply by F > 1 each step, rounded,
        at least +1: ``"1:256:x2"`` gives 1, 2, 4, ..., 256) or ``+N`` / ``N`` (add N >= 1:
        ``"16:128:+16"`` gives 16, 32, ..., 128); or a tuple ``(start, stop, step)`` with the same
        meaning (an int step adds). Values run from START while they are <= STOP; STOP itself is
        included only when a step lands on it.

    Returns
    -------
    list of int
        Concurrent clients, increasing.

    Raises
    ------
    ConfigError
        Malformed spec, START < 1, STOP < START, a factor <= 1 or increment < 1, or more than
        ``MAX_POINTS`` values; the message names ``--concurrency-range``.
    """
    flag = "--concurrency-range"
    expected = "START:STOP:STEP, e.g. 1:256:x2 (doubling) or 16:128:+16 (linear)"
    if isinstance(spec, (tuple, list)):
        if len(spec) != 3:
            raise ConfigError(expected, source=SOURCE, key=flag, value=tuple(spec))
        spec = ":".join(str(s) if isinstance(s, str) else f"{s:g}" if isinstance(s, float) else str(s) for s in spec)
    m = _RANGE.match(str(spec))
    if not m:
        raise ConfigError(expected, source=SOURCE, key=flag, value=spec)
    start, stop, op, step = int(m[1]), int(m[2]), m[3] or "+", float(m[4])
    if start < 1 or stop < start:
        raise ConfigError(f"1 <= START <= STOP ({expected})", source=SOURCE, key=flag, value=spec)
    if op in "x*" and step <= 1:
        raise ConfigError(f"a factor > 1 ({expected})", source=SOURCE, key=flag, value=spec)
    if op == "+" and (step < 1 or step != int(step)):
        raise ConfigError(f"an integer increment >= 1 ({expected})", source=SOURCE, key=flag, value=spec)
    values, c = [], start
    while c <= stop:
        values.append(c)
        if len(values) > MAX_POINTS:
            raise ConfigError(f"at most {MAX_POINTS} points", source=SOURCE, key=flag, value=spec)
        c = max(c + 1, round(c * step)) if op in "x*" else c + int(step)
    return values


def _numbers(number, n, flag, paired_only):
    """Requests per point from ``number``: one per load value (paired), or a single value for all
    (unless ``paired_only``); None when ``number`` is None."""
    if number is None:
        return None
    counts = _positive_ints(number, "--number")
    if len(counts) == n or (len(counts) == 1 and not paired_only):
        return counts * n if len(counts) == 1 and n != 1 else counts
    also = "" if paired_only else " or 1"
    raise ConfigError(f"as many values as {flag} ({n}{also}); got {len(counts)}", source=SOURCE, key="--number",
                      value=list(number))


def plan_points(parallel=None, number=None, concurrency_range=None, request_rates=None,
                default_number_per_client=DEFAULT_NUMBER_PER_CLIENT, default_num_prompts=DEFAULT_NUM_PROMPTS):
    """The load points of a load test, in the order given.

    Parameters
    ----------
    parallel : sequence of int, optional
        Closed-loop concurrencies (``evalscope perf --parallel``).
    number : sequence of int, optional
        Requests per point (``evalscope perf --number``). With ``parallel`` it must have the same
        length (paired element by element); with ``concurrency_range`` or ``request_rates`` it may
        also be a single value used at every point.
    concurrency_range : str or tuple, optional
        ``"START:STOP:STEP"`` (see :func:`parse_concurrency_range`).
    request_rates : sequence of float, optional
        Open-loop request rates in requests per second (> 0; ``inf`` sends all at t=0).
    default_number_per_client : int
        Without ``number``, a closed-loop point sends this many requests per client.
    default_num_prompts : int
        Without ``number``, an open-loop point sends this many requests.

    Returns
    -------
    list of LoadPoint

    Raises
    ------
    ConfigError
        Not exactly one of ``parallel``, ``concurrency_range``, ``request_rates``; an empty list;
        a non-positive value; ``number`` of the wrong length. The message names the flag.
    """
    given = [flag for flag, v in (("--parallel", parallel), ("--concurrency-range", concurrency_range),
                                  ("--request-rate", request_rates)) if v is not None]
    if len(given) != 1:
        raise ConfigError("exactly one of --parallel, --concurrency-range or --request-rate"
                          + (f"; got {' and '.join(given)}" if given else "; got none"), source=SOURCE,
                          key=given[1] if len(given) > 1 else "--parallel")
    if request_rates is not None:
        rates = _positive_rates(request_rates, "--request-rate")
        counts = _numbers(number, len(rates), "--request-rate", False) or [default_num_prompts] * len(rates)
        return [LoadPoint(0, r, n) for r, n in zip(rates, counts)]
    if parallel is not None:
        clients, flag, paired = _positive_ints(parallel, "--parallel"), "--parallel", True
    else:
        clients, flag, paired = parse_concurrency_range(concurrency_range), "--concurrency-range", False
    counts = _numbers(number, len(clients), flag, paired) or [c * default_number_per_client for c in clients]
    return [LoadPoint(c, math.inf, n) for c, n in zip(clients, counts)]


# ----------------------------------------------------------------------------- running


def point_workload(base_workload, point):
    """``base_workload`` with the load of ``point``: its request count, concurrency (0 = open
    loop) and request rate; lengths, arrival process, seed and the rest stay."""
    return replace(base_workload, num_prompts=point.num_prompts, max_concurrency=point.concurrency,
                   request_rate=point.request_rate)


def run_loadtest(model, hardware, serving, base_workload, points, progress=None, *, keep_requests=False,
                 min_gain=DEFAULT_MIN_GAIN, slo_p99_latency_ms=None, executor=None, workers=None, scheduler=None,
                 with_capacity=True):
    """Simulate ``base_workload`` at every load point.

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
    serving : ServingConfig or None
    base_workload : Workload
        Request shape (lengths, arrival process, seed, ...); each point replaces its
        ``num_prompts``, ``max_concurrency`` and ``request_rate`` (:func:`point_workload`).
    points : sequence of LoadPoint
    progress : callable, optional
        ``progress(done, total)`` as points finish (an object with ``advance(n)`` is advanced).
    keep_requests : bool
        Keep each simulation's per-request rows (for latency CDFs); off is faster and leaner.
    min_gain, slo_p99_latency_ms
        Passed to :func:`recommend`.
    executor, workers, scheduler
        Where the points run (:func:`simllm.sim.runner.run_many`; default threads on all cores).
    with_capacity : bool
        Also simulate the engine saturated for its capacity (one more run; not for a trace).

    Returns
    -------
    LoadTestResult

    Raises
    ------
    ConfigError
        No points, or invalid settings (:class:`SimulatedOOM` when the model does not fit).
    """
    points = tuple(points)
    if not points:
        raise ConfigError("at least one load point", source=SOURCE, key="--parallel")
    base = Base(model=model, hardware=hardware, serving=serving, keep_requests=keep_requests, summary_only=False)
    outcomes = run_simulations(base, [Task(workload=point_workload(base_workload, p)) for p in points], executor,
                               workers=workers, scheduler=scheduler, progress=progress)
    failed = next((o for o in outcomes if not o.ok), None)
    if failed is not None:  # a load test of a configuration that cannot run is an error
        raise failed.exception
    results = [o.value for o in outcomes]
    rows = tuple(LoadTestRow.from_summary(p, r.summary) for p, r in zip(points, results))
    index, reason = recommend(rows, min_gain=min_gain, slo_p99_latency_ms=slo_p99_latency_ms)
    w = base_workload
    title = f"{model.name} on {hardware.name}, {w.describe_lengths()}"
    cap = None
    if with_capacity and not w.trace:
        cap = capacity(model, hardware, serving, w)
    return LoadTestResult(points=points, rows=rows, recommended=index, reason=reason, min_gain=min_gain,
                          slo_p99_latency_ms=slo_p99_latency_ms, title=title, results=tuple(results), capacity=cap)


# ----------------------------------------------------------------------------- recommendation


def _gain(prev, cur):
    """Relative change of throughput from ``prev`` to ``cur`` (inf from zero to more)."""
    if prev > 0:
        return cur / prev - 1.0
    return math.inf if cur > 0 else 0.0


def _ratio(prev, cur):
    return cur / prev if prev > 0 else math.inf


def _load_text(row):
    """The load value alone, for "from 10 to 50"."""
    return str(row.concurrency) if row.concurrency > 0 else f"{row.request_rate_rps:g}"


def recommend(rows, min_gain=DEFAULT_MIN_GAIN, slo_p99_latency_ms=None):
    """The load point past which more load buys little throughput.

    Rows are compared in increasing load (concurrency, or request rate for open-loop rows),
    whatever their order. The knee is the highest-load point, among those whose P99 end-to-end
    latency is within ``slo_p99_latency_ms``, whose output throughput rose by more than
    ``min_gain`` from the point below it (the lowest point counts as rising). When no point rises
    that much, the lowest point meeting the SLO is recommended.

    Edge cases: a single point is recommended as is; when the knee is the highest point tested,
    the reason says throughput has not saturated (test higher loads); when no point meets the SLO,
    the index is None and the reason says so, naming the lowest P99 seen.

    Parameters
    ----------
    rows : sequence of LoadTestRow or mapping
        Needs ``concurrency`` (or ``request_rate_rps``), ``output_throughput_tok_s`` and
        ``p99_latency_ms``.
    min_gain : float
        Relative output-throughput gain per step (0.10 = 10%) below which throughput counts as
        saturated.
    slo_p99_latency_ms : float, optional
        Largest acceptable P99 end-to-end latency in ms.

    Returns
    -------
    (int or None, str)
        Index into ``rows`` of the recommended point, and one sentence with the numbers.
    """
    rows = [LoadTestRow.from_dict(r) if isinstance(r, Mapping) else r for r in rows]
    if not rows:
        raise ConfigError("at least one load point", source=SOURCE, key="--parallel")
    order = sorted(range(len(rows)), key=lambda i: rows[i].load)
    ranked = [rows[i] for i in order]
    thr = [r.output_throughput_tok_s for r in ranked]
    p99 = [r.p99_latency_ms for r in ranked]
    latency_slo = latency_p99_slo(slo_p99_latency_ms) if slo_p99_latency_ms is not None else None
    ok = [latency_slo is None or latency_slo.holds(p) for p in p99]
    slo = f"the P99 latency SLO of {slo_p99_latency_ms:g} ms" if slo_p99_latency_ms is not None else ""
    if not any(ok):
        best = min(range(len(ranked)), key=lambda k: p99[k])
        return None, (f"no point meets {slo}: the lowest P99 latency is {p99[best]:,.0f} ms at "
                      f"{ranked[best].label()}; lower the load or relax the SLO")
    if len(ranked) == 1:
        return order[0], (f"{ranked[0].label()}: the only point tested ({thr[0]:,.0f} output tok/s, P99 latency "
                          f"{p99[0]:,.0f} ms); test more loads to find the knee")
    gains = [math.inf] + [_gain(thr[k - 1], thr[k]) for k in range(1, len(thr))]
    rising = [k for k in range(len(ranked)) if ok[k] and gains[k] > min_gain]
    knee = rising[-1] if rising else ok.index(True)
    return order[knee], _reason(ranked, knee, knee in rising and knee > 0, gains, ok, slo, min_gain)


def _change(gain):
    """``rises 17%`` / ``falls 3%``."""
    return f"rises {gain:.0%}" if gain >= 0 else f"falls {-gain:.0%}"


def _reason(ranked, knee, rose_into, gains, ok, slo, min_gain):
    """The sentence explaining why ``ranked[knee]`` (rows in increasing load) is recommended;
    ``rose_into``: throughput rose by more than the minimum gain into the knee."""
    here, at = ranked[knee], _load_text(ranked[knee])
    p99 = [r.p99_latency_ms for r in ranked]
    rose = (f"output throughput {_change(gains[knee])} from {_load_text(ranked[knee - 1])} to {at}" if rose_into
            else f"output throughput is {here.output_throughput_tok_s:,.0f} tok/s")
    if knee == len(ranked) - 1:
        if not rose_into:
            return f"{here.label()}: the only point within {slo} (P99 latency {p99[knee]:,.0f} ms)"
        within = f" within {slo}" if slo else ""
        return f"{here.label()}: throughput has not saturated{within}: {rose}, the highest load tested; test higher loads"
    nxt_at, step = _load_text(ranked[knee + 1]), gains[knee + 1]
    if not ok[knee + 1] and step > min_gain:
        return (f"{here.label()}: the highest load within {slo}: {rose}, but at {nxt_at} P99 latency is "
                f"{p99[knee + 1]:,.0f} ms")
    growth = _ratio(p99[knee], p99[knee + 1])
    latency = f"P99 latency grows {growth:.1f}x" if growth >= 1 else f"P99 latency changes {growth:.2f}x"
    then = f"only {step:.0%}" if step >= 0 else f"falls {-step:.0%}"
    if rose_into:
        return f"{here.label()}: {rose} but {then} from {at} to {nxt_at} while {latency}"
    return f"{here.label()}: output throughput {'rises ' if step >= 0 else ''}{then} from {at} to {nxt_at} while {latency}"


# ----------------------------------------------------------------------------- output

_COLUMNS = (  # (field, header, format)
    ("num_prompts", "Num", "{:d}"),
    ("request_throughput_rps", "RPS (req/s)", "{:,.2f}"),
    ("avg_latency_ms", "Avg lat (ms)", "{:,.1f}"),
    ("p90_latency_ms", "P90 lat (ms)", "{:,.1f}"),
    ("p99_latency_ms", "P99 lat (ms)", "{:,.1f}"),
    ("mean_ttft_ms", "Avg TTFT (ms)", "{:,.1f}"),
    ("p99_ttft_ms", "P99 TTFT (ms)", "{:,.1f}"),
    ("mean_tpot_ms", "Avg TPOT (ms)", "{:,.2f}"),
    ("p99_tpot_ms", "P99 TPOT (ms)", "{:,.2f}"),
    ("output_throughput_tok_s", "Gen (tok/s)", "{:,.0f}"),
    ("compute_utilization", "Compute", "{:.1%}"),
    ("bandwidth_utilization", "BW", "{:.1%}"),
    ("kv_cache_usage_mean", "KV mean", "{:.1%}"),
    ("kv_cache_usage_peak", "KV peak", "{:.1%}"),
    ("error_rate", "Errors", "{:.1%}"),
)


def _cell(value, fmt):
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return fmt.format(value)


def format_loadtest(result):
    """The load test as a text table (the recommended row marked ``*``) and the recommendation.

    Parameters
    ----------
    result : LoadTestResult

    Returns
    -------
    str
    """
    closed = all(r.concurrency > 0 for r in result.rows)
    head = "Conc." if closed else "Load"
    table_rows = []
    for i, row in enumerate(result.rows):
        load = str(row.concurrency) if row.concurrency > 0 else f"{row.request_rate_rps:g} req/s"
        mark = "* " if i == result.recommended else "  "
        table_rows.append([mark + load] + [_cell(getattr(row, f), fmt) for f, _, fmt in _COLUMNS])
    headers = ["  " + head] + [h for _, h, _ in _COLUMNS]
    slo = (f", P99 latency SLO {result.slo_p99_latency_ms:g} ms" if result.slo_p99_latency_ms is not None else "")
    lines = [f"Load test: {result.title}" if result.title else "Load test",
             text_table(headers, table_rows, "l" + "r" * len(_COLUMNS)), "",
             f"Recommendation (knee at >{result.min_gain:.0%} throughput gain per step{slo}):",
             f"  {'' if result.recommended is not None else 'none: '}{result.reason}"]
    if result.capacity is not None:
        lines += ["", "Capacity (the engine saturated; an open-loop rate above it queues without bound):",
                  f"  {result.capacity.describe()}"]
    return "\n".join(lines)


def _json_number(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def loadtest_to_json(result):
    """The load test as a JSON-ready dict.

    Returns
    -------
    dict
        ``rows`` (one dict per point, :class:`LoadTestRow` fields; ``"inf"`` for an infinite
        rate, None for NaN) and ``recommendation`` (``index`` into rows or None, ``concurrency``,
        ``request_rate_rps``, ``reason``, ``min_gain``, ``slo_p99_latency_ms``), plus ``title`` and
        ``capacity`` (:meth:`~simllm.sim.capacity.Capacity.to_dict`, None without one).
    """
    i = result.recommended
    rec = result.rows[i] if i is not None else None
    return {
        "title": result.title,
        "rows": [r.to_dict() for r in result.rows],
        "recommendation": {
            "index": i,
            "concurrency": rec.concurrency if rec is not None and rec.concurrency > 0 else None,
            "request_rate_rps": _json_number(rec.request_rate_rps) if rec is not None else None,
            "reason": result.reason,
            "min_gain": result.min_gain,
            "slo_p99_latency_ms": result.slo_p99_latency_ms,
        },
        "capacity": result.capacity.to_dict() if result.capacity is not None else None,
    }


def loadtest_to_csv(result):
    """The rows as CSV text: a header of :class:`LoadTestRow` field names, one line per point
    (``inf`` for an infinite rate, empty for NaN)."""
    names = [f.name for f in fields(LoadTestRow)]
    return csv_text(names, (["" if isinstance(v, float) and math.isnan(v) else repr(float(v)) if isinstance(v, float)
                              else v for v in (getattr(row, n) for n in names)] for row in result.rows))


def plot_rows(result):
    """The rows as :func:`simllm.report.plots.plot_loadtest` takes them (vLLM-style keys)."""
    return [{"concurrency": r.concurrency, "request_rate": r.request_rate_rps,
             "output_throughput": r.output_throughput_tok_s, "mean_tpot_ms": r.mean_tpot_ms,
             "mean_e2el_ms": r.avg_latency_ms, "p99_e2el_ms": r.p99_latency_ms} for r in result.rows]
