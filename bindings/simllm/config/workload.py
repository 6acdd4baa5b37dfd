"""Workloads: who sends what, when. Open loop (a request rate with Poisson, gamma-bursty or
constant spacing, or everything at t=0), closed loop (N concurrent clients), trace replay; prompt
and output lengths fixed, uniform, normal, lognormal or drawn from a file.

Sampling uses ``np.random.Generator`` seeded from ``seed`` only: same seed, same requests.
"""
import csv
import functools
import io
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from simllm.config import presets
from simllm.config.datasets import DATASETS, Dataset, json_lines
from simllm.config.model import MAX_CONTEXT_TOKENS
from simllm.config.sections import Section
from simllm.config.yamlio import load_file
from simllm.errors import ConfigError

ARRIVALS = ("poisson", "gamma", "constant")
RAMP_UP_STRATEGIES = ("linear", "exponential")
#: A closed loop's clients wait a random delay before each send (exponential, this mean), the
#: small variability (event-loop scheduling, request building, connection reuse) that keeps
#: real clients from staying in step; 0 turns it off.
DEFAULT_CLIENT_JITTER_MS = 20.0
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")
TRACE_FORMATS = ("auto", "azure", "burstgpt", "mooncake", "simple")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution. ``fixed``: ``value``; ``uniform``: integers in
    [``low``, ``high``) (vLLM's ``--random-range-ratio`` gives ``value*(1-r)`` to ``value*(1+r)``
    inclusive); ``normal``: ``mean``, ``std``; ``lognormal``: ``mean``, ``sigma`` of the
    underlying normal in log space is derived so the distribution's mean is ``mean``;
    ``empirical``: sampled with replacement from ``values``. Samples are clipped to
    [``minimum``, ``maximum``]."""

    kind: str = "fixed"
    value: int = 0
    low: int = 0
    high: int = 0
    mean: float = 0.0
    std: float = 0.0
    sigma: float = 0.0
    values: tuple = ()
    minimum: int = 1
    maximum: int = 0  # 0 = no cap

    def sample(self, rng, n):
        if self.kind == "fixed":
            out = np.full(n, self.value, dtype=np.int64)
        elif self.kind == "uniform":
            out = rng.integers(self.low, self.high, n, dtype=np.int64)
        elif self.kind == "normal":
            out = np.rint(rng.normal(self.mean, self.std, n)).astype(np.int64)
        elif self.kind == "lognormal":
            mu = math.log(self.mean) - self.sigma**2 / 2.0
            out = np.rint(rng.lognormal(mu, self.sigma, n)).astype(np.int64)
        else:
            values = np.asarray(self.values, dtype=np.int64)
            out = values[rng.integers(0, len(values), n)]
        out = np.maximum(out, self.minimum)
        if self.maximum:
            out = np.minimum(out, self.maximum)
        return out

    @property
    def mean_value(self):
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            return (self.low + self.high - 1) / 2.0
        if self.kind in ("normal", "lognormal"):
            return self.mean
        return float(np.mean(self.values))

    @property
    def upper(self):
        """Largest length this distribution can produce (inf when unbounded)."""
        if self.maximum:
            return self.maximum
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.high - 1
        if self.kind == "empirical":
            return max(self.values)
        return math.inf

    def describe(self):
        if self.kind == "fixed":
            return str(self.value)
        if self.kind == "uniform":
            return f"uniform [{self.low}, {self.high})"
        if self.kind == "normal":
            return f"normal(mean {self.mean:g}, std {self.std:g})"
        if self.kind == "lognormal":
            return f"lognormal(mean {self.mean:g}, sigma {self.sigma:g})"
        return f"empirical ({len(self.values)} values)"


def fixed(value):
    return LengthDist("fixed", value=int(value))


def random_range(value, ratio):
    """vLLM's random dataset: uniform integers in [value*(1-ratio), value*(1+ratio)]."""
    if not ratio:
        return fixed(value)
    low = max(1, int(value * (1.0 - ratio)))
    return LengthDist("uniform", low=low, high=int(value * (1.0 + ratio)) + 1)


def checked(default, key, check, expected):
    """A :class:`Workload` field with its check declared with it: ``check(value) -> bool``, else
    a one-line ConfigError naming ``workload.<key>`` and ``expected``."""
    return field(default=default, metadata={"key": key, "check": check, "expected": expected})


def _nonneg(v):
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= MAX_NUMBER


def _int_in(lo, hi):
    return lambda v: not isinstance(v, bool) and isinstance(v, (int, np.integer)) and lo <= v <= hi


def _number_in(lo, hi):
    return lambda v: not isinstance(v, bool) and isinstance(v, (int, float, np.floating)) and lo <= v <= hi


#: The workload's ranges, which the flags and measured results share: request counts within int32
#: (request ids), rates in req/s (inf: all at once), times in seconds, token lengths within a
#: model's longest context.
MAX_COUNT = 2**31 - 1
MAX_LENGTH = MAX_CONTEXT_TOKENS
MIN_RATE = 1e-6
MAX_RATE = 1e9
MAX_NUMBER = 1e12


@dataclass(frozen=True)
class Workload:
    """What clients send. ``request_rate`` inf sends everything at t=0; ``max_concurrency`` N
    makes it a closed loop of N clients (each sends its next request when the last one ends);
    both together cap in-flight requests of an open-loop stream, as ``vllm bench serve`` does.

    ``client_jitter_ms``: a closed loop's clients wait an exponentially distributed delay of this
    mean before each send (0: none). ``ramp_up_strategy`` (``linear`` or ``exponential``) sends
    request i at the rate ``ramp_up_start_rps`` ramped to ``ramp_up_end_rps`` over the requests,
    as ``vllm bench serve --ramp-up-strategy`` (``request_rate`` must stay inf).
    ``warmup_requests``: the first N requests sent are a warm-up, left out of the summary.
    ``dataset``: a :class:`simllm.config.datasets.Dataset` whose requests' lengths replace
    ``input_len`` and ``output_len`` (its shared prefix sets ``prefix_len`` when that is 0).

    A ``trace`` replays its lengths and send times (the first ``num_prompts`` rows, all when 0),
    its times multiplied by ``time_scale``, or with a finite ``request_rate`` scaled to that mean
    rate, keeping their shape (:func:`trace_rate_scale`); ``max_concurrency`` then caps the
    requests in flight."""

    num_prompts: int = checked(1000, "num_prompts", _int_in(0, MAX_COUNT), f"an integer in [0, {MAX_COUNT}]")
    request_rate: float = checked(math.inf, "request_rate", lambda v: _number_in(MIN_RATE, MAX_RATE)(v) or v == math.inf,
                                  f"requests per second in [{MIN_RATE:g}, {MAX_RATE:g}], or inf")
    arrival: str = checked("poisson", "arrival", lambda v: v in ARRIVALS, "one of " + ", ".join(ARRIVALS))
    burstiness: float = checked(1.0, "burstiness", _number_in(1e-6, 1e6), "a number in [1e-6, 1e6]")
    max_concurrency: int = checked(0, "max_concurrency", _int_in(0, MAX_COUNT), f"an integer in [0, {MAX_COUNT}]")
    input_len: LengthDist = field(default_factory=lambda: fixed(1024))
    output_len: LengthDist = field(default_factory=lambda: fixed(128))
    seed: int = checked(0, "seed", _int_in(0, 2**63 - 1), "an integer in [0, 2**63)")
    # client timeout; 0 = none
    timeout_s: float = checked(0.0, "timeout_s", _nonneg, f"seconds in [0, {MAX_NUMBER:g}]")
    # shared prompt prefix (system prompt) tokens
    prefix_len: int = checked(0, "prefix_len", _int_in(0, MAX_LENGTH), f"an integer in [0, {MAX_LENGTH}]")
    # fraction of requests whose prefix is in the prefix cache
    prefix_hit_ratio: float = checked(0.0, "prefix_hit_ratio", _number_in(0.0, 1.0), "a fraction in [0, 1]")
    trace: str = ""  # path of a replayed trace (its lengths and times replace the sampled ones)
    trace_format: str = "auto"
    # trace replay: multiply inter-arrival times by this
    time_scale: float = checked(1.0, "time_scale", _number_in(1e-6, 1e6), "a number in [1e-6, 1e6]")
    client_jitter_ms: float = checked(DEFAULT_CLIENT_JITTER_MS, "client_jitter_ms", _nonneg,
                                      f"milliseconds in [0, {MAX_NUMBER:g}]")
    ramp_up_strategy: str = checked("", "ramp_up_strategy", lambda v: v in ("",) + RAMP_UP_STRATEGIES,
                                    "one of " + ", ".join(RAMP_UP_STRATEGIES))
    ramp_up_start_rps: float = checked(0.0, "ramp_up_start_rps", _number_in(0.0, MAX_RATE),
                                       f"requests per second in [0, {MAX_RATE:g}]")
    ramp_up_end_rps: float = checked(0.0, "ramp_up_end_rps", _number_in(0.0, MAX_RATE),
                                     f"requests per second in [0, {MAX_RATE:g}]")
    warmup_requests: int = checked(0, "warmup_requests", _int_in(0, MAX_COUNT), f"an integer in [0, {MAX_COUNT}]")
    # a vllm bench serve dataset (simllm.config.datasets.Dataset) giving each request's lengths
    dataset: object = None
    name: str = "workload"
    source: str = "<dict>"

    def __post_init__(self):
        for f in fields(self):
            meta = f.metadata
            if "check" in meta and not meta["check"](getattr(self, f.name)):
                raise ConfigError(meta["expected"], source=self.source, key=f"workload.{meta['key']}",
                                  value=getattr(self, f.name))
        self._check_ramp_up()
        if self.dataset is not None and not self.prefix_len:  # 0: the dataset's shared prefix (sonnet's)
            object.__setattr__(self, "prefix_len", self.dataset.shared_prefix_tokens())
        if self.trace and self.dataset is not None:
            raise ConfigError("no dataset with a trace (the trace's lengths are replayed)", source=self.source,
                              key="workload.dataset_name", value=self.dataset.name)
        if self.trace and math.isfinite(self.request_rate) and self.time_scale != 1.0:
            raise ConfigError("no time_scale with a request_rate for a trace (the rate sets its pace); give one",
                              source=self.source, key="workload.time_scale", value=self.time_scale)
        if self.warmup_requests and self.num_prompts and self.warmup_requests >= self.num_prompts:
            raise ConfigError(f"fewer warm-up requests than num_prompts ({self.num_prompts})", source=self.source,
                              key="workload.warmup_requests", value=self.warmup_requests)

    def _check_ramp_up(self):
        """vLLM's rules: a strategy needs both rates, start <= end, exponential starts above 0, and
        the ramp replaces ``request_rate``. (A start of 0 is refused for linear ramps too: vLLM
        then fails on the first request's rate of 0.)"""
        key = "workload.ramp_up_strategy"
        if not self.ramp_up_strategy:
            if self.ramp_up_start_rps or self.ramp_up_end_rps:
                raise ConfigError("a ramp-up strategy (linear or exponential) with ramp-up rates", source=self.source,
                                  key=key, value=None)
            return
        if math.isfinite(self.request_rate):
            raise ConfigError("no request_rate with a ramp-up (the ramp sets the rate); request_rate inf",
                              source=self.source, key="workload.request_rate", value=self.request_rate)
        if not self.ramp_up_start_rps > 0:
            raise ConfigError("a start rate > 0 for the ramp-up", source=self.source,
                              key="workload.ramp_up_start_rps", value=self.ramp_up_start_rps)
        if not self.ramp_up_end_rps >= self.ramp_up_start_rps:
            raise ConfigError(f"an end rate >= ramp_up_start_rps ({self.ramp_up_start_rps:g})", source=self.source,
                              key="workload.ramp_up_end_rps", value=self.ramp_up_end_rps)
        if self.trace:
            raise ConfigError("no ramp-up with a trace (its times are replayed)", source=self.source, key=key,
                              value=self.ramp_up_strategy)

    @property
    def closed_loop(self):
        """Clients each wait for their last request (no open-loop send times at all)."""
        return bool(self.max_concurrency) and not math.isfinite(self.request_rate) and not self.ramp_up_strategy

    def describe(self):
        if self.trace:
            pace = f", scaled to {self.request_rate:g} req/s" if math.isfinite(self.request_rate) else (
                f", times x {self.time_scale:g}" if self.time_scale != 1.0 else "")
            cap = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
            return f"trace {Path(self.trace).name} ({self.num_prompts or 'all'} requests{pace}{cap})"
        if self.closed_loop:
            load = f"closed loop, {self.max_concurrency} clients"
        else:
            if self.ramp_up_strategy:
                rate = (f"{self.ramp_up_strategy} ramp-up {self.ramp_up_start_rps:g} to {self.ramp_up_end_rps:g} "
                        f"req/s {self.arrival}")
            else:
                rate = ("all at t=0" if not math.isfinite(self.request_rate)
                        else f"{self.request_rate:g} req/s {self.arrival}")
            if self.arrival == "gamma":
                rate += f" (burstiness {self.burstiness:g})"
            load = rate + (f", at most {self.max_concurrency} in flight" if self.max_concurrency else "")
        if self.max_concurrency and self.client_jitter_ms:
            load += f", client jitter {self.client_jitter_ms:g} ms"
        warmup = f" ({self.warmup_requests} warm-up)" if self.warmup_requests else ""
        return f"{self.num_prompts} requests{warmup}, {load}, {self.describe_lengths()}, seed {self.seed}"

    def describe_lengths(self):
        """Where the requests' lengths come from: the trace, the dataset, or the distributions."""
        if self.trace:
            return f"trace {self.trace}"
        if self.dataset is not None:
            return self.dataset.describe()
        return f"input {self.input_len.describe()}, output {self.output_len.describe()}"


@dataclass(frozen=True)
class Requests:
    """Sampled requests, in the order they are sent. ``arrival_s`` is the open-loop send time
    (all 0 for a pure closed loop)."""

    arrival_s: np.ndarray  # float64 (n,)
    input_len: np.ndarray  # int64 (n,)
    output_len: np.ndarray  # int64 (n,)
    prefix_hit: np.ndarray  # bool (n,)
    trace_lines: np.ndarray = None  # int64 (n,): line of each request in a replayed trace

    def __len__(self):
        return len(self.input_len)

    def chunk(self, start, stop):
        """Requests ``start .. stop - 1`` (views)."""
        lines = None if self.trace_lines is None else self.trace_lines[start:stop]
        return Requests(self.arrival_s[start:stop], self.input_len[start:stop], self.output_len[start:stop],
                        self.prefix_hit[start:stop], lines)


#: Requests are drawn in chunks of this many, chunk i from its own generator (chunk 0 from the
#: seed itself, chunk i >= 1 from ``[seed, i]``), so that a streamed run can draw them as it goes
#: and still serve the very requests :func:`generate` returns.
CHUNK_REQUESTS = 1 << 20


def _chunk_rng(seed, i):
    return np.random.default_rng(seed if i == 0 else [seed, i])


def generate(workload):
    """Draw the requests of ``workload`` (or read its trace): :func:`generate_chunks` joined.

    Returns
    -------
    Requests
    """
    chunks = list(generate_chunks(workload))
    if len(chunks) == 1:
        return chunks[0]
    lines = None if chunks[0].trace_lines is None else np.concatenate([c.trace_lines for c in chunks])
    return Requests(*(np.concatenate([getattr(c, f) for c in chunks])
                      for f in ("arrival_s", "input_len", "output_len", "prefix_hit")), lines)


#: Fields of a :class:`Workload` that :func:`generate` does not read (how the requests are sent
#: and reported, not what is sent): workloads that differ only in these draw the same requests.
NOT_DRAWN = frozenset({"max_concurrency", "timeout_s", "prefix_len", "client_jitter_ms", "warmup_requests", "name",
                       "source"})


def draw_key(workload):
    """A hashable key of what :func:`generate` reads of ``workload``: workloads with equal keys
    draw the same requests (a trace is keyed by its path, size and modification time). None when
    the workload cannot be keyed (an unhashable dataset, a trace that cannot be read: generate
    then says why)."""
    key = tuple(getattr(workload, f.name) for f in fields(workload) if f.name not in NOT_DRAWN)
    if workload.trace:
        try:
            st = Path(workload.trace).stat()
        except OSError:
            return None
        key += (st.st_size, st.st_mtime_ns)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def generate_chunks(workload):
    """The requests of ``workload`` in send order, :data:`CHUNK_REQUESTS` at a time (one chunk, maybe
    empty, at least): an iterator of :class:`Requests`. A chunk's lengths, send-time gaps and prefix
    hits are drawn from the chunk's own generator (a trace's lengths and times are read)."""
    if workload.trace:
        arrival, inp, out, lines = read_trace(workload.trace, workload.trace_format, with_lines=True)
        n = min(workload.num_prompts, len(inp)) if workload.num_prompts else len(inp)
        arrival = (arrival[:n] - arrival[0]) * workload.time_scale if n else arrival[:0]
        if math.isfinite(workload.request_rate):
            arrival = arrival * trace_rate_scale(arrival, workload.request_rate, workload.trace)
    else:
        n = workload.num_prompts
    if workload.dataset is not None:
        inp, out, _ = workload.dataset.requests(n, workload.seed)
    last = 0.0
    for i, first in enumerate(range(0, max(n, 1), CHUNK_REQUESTS)):
        m = min(CHUNK_REQUESTS, n - first)
        rng = _chunk_rng(workload.seed, i)
        if workload.trace:
            c_arr, c_in, c_out = arrival[first:first + m], inp[first:first + m], out[first:first + m]
            c_lines = lines[first:first + m]
        else:
            if workload.dataset is not None:
                c_in, c_out = inp[first:first + m], out[first:first + m]
            else:
                c_in = workload.input_len.sample(rng, m)
                c_out = workload.output_len.sample(rng, m)
            c_arr = _arrivals(workload, rng, n, first, m, last)
            c_lines = None
        if m:
            last = float(c_arr[-1])
        hit = rng.random(m) < workload.prefix_hit_ratio if workload.prefix_hit_ratio > 0 else np.zeros(m, dtype=bool)
        yield Requests(np.ascontiguousarray(c_arr, dtype=np.float64), np.ascontiguousarray(c_in, dtype=np.int64),
                       np.ascontiguousarray(c_out, dtype=np.int64), hit, c_lines)


def trace_rate_scale(arrival_s, rate, source="trace"):
    """The factor that gives send times ``arrival_s`` (sorted, from 0) the mean rate ``rate``: the
    trace's own mean rate, ``(n - 1) / span``, over ``rate``. Multiplying keeps the trace's shape
    (its bursts and lulls, relative gaps) and makes its span ``(n - 1) / rate``, as a Poisson
    stream of that rate would average; 1 for fewer than two requests.

    Raises
    ------
    ConfigError
        When the times span 0 s (every request at once: no rate to scale).
    """
    n = len(arrival_s)
    if n < 2:
        return 1.0
    span = float(arrival_s[-1] - arrival_s[0])
    if not span > 0:
        raise ConfigError(f"a trace whose {n} send times span more than 0 s to scale to a request rate "
                          "(they are all at once)", source=source, key="request_rate", value=rate)
    return (n - 1) / (span * rate)


def expected_last_send_s(w, n):
    """When the last of ``n`` requests of ``w`` is expected to be sent: the sum of the mean gaps
    (0 when all are sent at once, or by clients)."""
    if n <= 1 or not (math.isfinite(w.request_rate) or w.ramp_up_strategy):
        return 0.0
    if not w.ramp_up_strategy:
        return (n - 1) / w.request_rate
    return float(sum((1.0 / ramp_up_rates(w, n, f, min(CHUNK_REQUESTS, n - f))).sum()
                     for f in range(1, n, CHUNK_REQUESTS)))


def ramp_up_rates(w, n, first=0, count=None):
    """Request i's rate under ``w``'s ramp-up, vLLM's rule: with progress ``i / (n - 1)``,
    linear ``start + (end - start) * progress``, exponential ``start * (end / start) ** progress``;
    for requests ``first .. first + count - 1`` of ``n`` (default: all)."""
    count = n - first if count is None else count
    progress = np.arange(first, first + count) / max(n - 1, 1)
    start, end = w.ramp_up_start_rps, w.ramp_up_end_rps
    if w.ramp_up_strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


def _arrivals(w, rng, n, first=0, m=None, last=0.0):
    """Send times of requests ``first .. first + m - 1`` of ``n`` (default: all), the one before
    them sent at ``last``: vLLM's semantics (the first request at 0, then gaps of 1/rate on
    average; gamma gaps have shape ``burstiness`` and scale ``1 / (rate * burstiness)``). Under a
    ramp-up the gap before request i is drawn at request i's rate (:func:`ramp_up_rates`); vLLM
    also delays the first request by a gap at the start rate, which only shifts the whole run."""
    m = n - first if m is None else m
    if m == 0 or not (math.isfinite(w.request_rate) or w.ramp_up_strategy):
        return np.zeros(m)
    lead = 1 if first == 0 else 0  # the first request has no gap before it
    k = m - lead
    rate = ramp_up_rates(w, n, first + lead, k) if w.ramp_up_strategy else w.request_rate
    if w.arrival == "constant":
        gaps = np.broadcast_to(1.0 / rate, (k,)).astype(np.float64)
    elif w.arrival == "gamma":
        gaps = rng.gamma(w.burstiness, 1.0 / (rate * w.burstiness), k)
    else:
        gaps = rng.exponential(1.0 / rate, k)
    if lead:
        return np.concatenate([[0.0], np.cumsum(gaps)])
    gaps[0] += last
    return np.cumsum(gaps)


def client_delays(workload, n, first=0, m=None):
    """A closed loop's client delays, seconds, one per request in send order (exponential, mean
    ``client_jitter_ms``), for requests ``first .. first + m - 1`` of ``n`` (default: all; ``first``
    a multiple of :data:`CHUNK_REQUESTS`), or None when the workload has none (open loop, or
    jitter 0). Drawn per chunk from the first child stream of the chunk's seed, so the lengths and
    send times drawn from the seed itself stay the same with or without jitter."""
    m = n - first if m is None else m
    if not workload.max_concurrency or not workload.client_jitter_ms or m == 0:
        return None
    out = np.empty(m)
    for start in range(first, first + m, CHUNK_REQUESTS):
        i = start // CHUNK_REQUESTS
        seq = np.random.SeedSequence(workload.seed if i == 0 else [workload.seed, i])
        rng = np.random.default_rng(seq.spawn(1)[0])
        size = min(CHUNK_REQUESTS, first + m - start)
        out[start - first:start - first + size] = rng.exponential(workload.client_jitter_ms / 1e3, size)
    return out


# ----------------------------------------------------------------------------- traces
_TRACE_COLUMNS = {
    # format: (time column, input column, output column, time unit in seconds or "datetime")
    "azure": (("TIMESTAMP",), ("ContextTokens",), ("GeneratedTokens",), "datetime"),
    "burstgpt": (("Timestamp",), ("Request tokens",), ("Response tokens",), 1.0),
    "mooncake": (("timestamp",), ("input_length",), ("output_length",), 1e-3),
    "simple": (("arrival_s", "timestamp_s", "time_s"), ("input_len", "input_tokens", "prompt_len"),
               ("output_len", "output_tokens"), 1.0),
}


#: A trace's times lie within ~30,000 years of 0 (its lengths within MAX_LENGTH).
MAX_TRACE_S = 1e12


def _detect(columns, path):
    for name, (tcol, icol, ocol, _) in _TRACE_COLUMNS.items():
        if any(c in columns for c in tcol) and any(c in columns for c in icol) and any(c in columns for c in ocol):
            return name
    raise ConfigError(
        "a trace with the columns of the Azure LLM trace (TIMESTAMP, ContextTokens, GeneratedTokens), "
        "BurstGPT (Timestamp, Request tokens, Response tokens), Mooncake (timestamp, input_length, "
        f"output_length) or arrival_s, input_len, output_len; found {', '.join(map(str, columns)) or 'none'}",
        source=str(path), line=1,
    )


def _rows(path):
    """(line number, dict) rows of a CSV or JSONL trace."""
    text = Path(path)
    if text.suffix.lower() in (".jsonl", ".json"):
        for i, row in json_lines(text, str(path)):
            if not isinstance(row, dict):
                raise ConfigError("a JSON object per line", source=str(path), line=i)
            yield i, row
    else:
        with open(text, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames:
                reader.fieldnames = [c.strip() for c in reader.fieldnames]
            for row in reader:
                yield reader.line_num, row


def read_trace(path, fmt="auto", with_lines=False, cached=True):
    """Read a request trace. Rows with 0 output tokens (requests that failed in the traced
    service) are skipped. A CSV trace is read column-wise and kept (two files at most, by path,
    modification time and size; ``cached`` False reads it anew).

    Returns
    -------
    arrival_s : ndarray of float64
        Seconds, sorted, as in the file (the caller shifts them to start at 0).
    input_len, output_len : ndarray of int64
    lines : ndarray of int64
        Only with ``with_lines``: each request's line in the file.

    Raises
    ------
    ConfigError
        An empty trace, missing columns, or a bad value (naming the file, line and column).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such trace file", source=str(path))
    try:
        return _read_trace(path, fmt, with_lines, cached)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 text file (byte {exc.start} is not)", source=str(path)) from None
    except csv.Error as exc:
        raise ConfigError(f"a CSV file ({exc})", source=str(path)) from None


def _read_trace(path, fmt, with_lines, cached=True):
    if path.suffix.lower() not in (".jsonl", ".json"):
        stat = path.stat()
        read = _read_csv_trace if cached else _read_csv_trace.__wrapped__
        t, i, o, lines = read(str(path), str(path.resolve()), stat.st_mtime_ns, stat.st_size, fmt)
        arrays = (t.copy(), i.copy(), o.copy())
        return arrays + (lines.copy(),) if with_lines else arrays
    return _read_rows_trace(path, fmt, with_lines)


def _columns_of(header, fmt, path, line=1):
    """(format name, time unit, the time, input and output columns) of a trace's header (its
    column names; a JSONL trace's first row, at ``line``)."""
    name = fmt if fmt != "auto" else _detect(list(header), path)
    tcol, icol, ocol, unit = _TRACE_COLUMNS[name]
    cols = []
    for options in (tcol, icol, ocol):
        found = next((c for c in options if c in header), None)
        if found is None:
            raise ConfigError(f"a column {' or '.join(options)} ({name} trace format)", source=str(path), line=line)
        cols.append(found)
    return name, unit, cols


@functools.lru_cache(maxsize=2)
def _read_csv_trace(path, resolved, mtime_ns, size, fmt):
    """A CSV trace read once, column-wise by numpy's C reader (``np.loadtxt``) and checked a
    column at a time. Anything it does not take (a bad or missing value, a value out of range,
    blank lines or quoted line breaks, which move the line numbers) goes to the row-wise reader
    (:func:`_read_rows_trace`), which names the first bad value's line. Cached by path,
    modification time, size and format: loading a workload validates its trace and generating it
    reads it again. Returns read-only (times, inputs, outputs, lines), sorted by time, 0-output
    rows dropped."""
    with open(resolved, encoding="utf-8-sig", newline="") as f:
        header = [c.strip() for c in next(csv.reader(f), [])]
        text = f.read()
    _, unit, cols = _columns_of(header, fmt, path)
    idx = [header.index(c) for c in cols]
    regular = "\n\n" not in text and "\r\n\r\n" not in text and '"' not in text and text.strip()
    out = _csv_columns(text, idx, unit) if regular else None
    if out is None:
        return _freeze(_read_rows_trace(Path(path), fmt, True))
    times, inputs, outputs = out
    lines = np.arange(2, len(times) + 2, dtype=np.int64)
    keep = outputs > 0  # requests that failed in the traced service (BurstGPT logs them with 0 tokens)
    if not keep.any():
        raise ConfigError("a trace with at least one request, got none", source=path)
    times, inputs, outputs, lines = times[keep], inputs[keep], outputs[keep], lines[keep]
    order = np.argsort(times, kind="stable")
    return _freeze((times[order], inputs[order], outputs[order], lines[order]))


def _freeze(arrays):
    for a in arrays:
        a.flags.writeable = False
    return arrays


def _csv_columns(text, idx, unit):
    """(times in s, inputs, outputs) of the rows ``text`` (a regular CSV trace after its header) in
    columns ``idx``, or None when some value does not parse or is out of range (the row-wise
    reader then says which)."""
    try:
        try:  # one pass over the text when every cell is a number
            values = np.loadtxt(io.StringIO(text), delimiter=",", usecols=idx, dtype=np.float64, ndmin=2)
            times = values[:, 0] * (1.0 if unit == "datetime" else unit)
        except ValueError:
            if unit != "datetime":
                return None
            # Azure timestamps, "YYYY-MM-DD HH:MM:SS.ffffff": the lengths, then the times as text
            values = np.loadtxt(io.StringIO(text), delimiter=",", usecols=idx, dtype=str, ndmin=2)
            stamps = np.char.replace(np.char.strip(values[:, 0]), " ", "T")
            times = stamps.astype("datetime64[us]").astype(np.int64) / 1e6
            times[stamps == "NaT"] = np.nan
            values = values[:, 1:].astype(np.float64)
            values = np.column_stack([times, values])
    except ValueError:
        return None
    inputs, outputs = values[:, 1], values[:, 2]
    ok = np.abs(times) <= MAX_TRACE_S
    ok &= (inputs >= 1) & (inputs <= MAX_LENGTH) & (np.floor(inputs) == inputs)
    ok &= (outputs >= 0) & (outputs <= MAX_LENGTH) & (np.floor(outputs) == outputs)
    if not ok.all():
        return None
    return times.astype(np.float64), inputs.astype(np.int64), outputs.astype(np.int64)


def _read_rows_trace(path, fmt, with_lines):
    times, inputs, outputs, lines = [], [], [], []
    cols = None
    for line, row in _rows(path):
        if cols is None:
            _, unit, cols = _columns_of(row, fmt, path, 1 if path.suffix.lower() not in (".jsonl", ".json") else line)
        tk, ik, ok = cols
        t = _trace_time(row.get(tk), unit, path, line, tk)
        i_len = _trace_int(row.get(ik), path, line, ik, minimum=1)
        o_len = _trace_int(row.get(ok), path, line, ok, minimum=0)
        if o_len == 0:
            continue  # a request that failed in the traced service (BurstGPT logs them with 0 tokens)
        times.append(t)
        inputs.append(i_len)
        outputs.append(o_len)
        lines.append(line)
    if not times:
        raise ConfigError("a trace with at least one request, got none", source=str(path))
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    arrays = (t[order], np.asarray(inputs, dtype=np.int64)[order], np.asarray(outputs, dtype=np.int64)[order])
    return arrays + (np.asarray(lines, dtype=np.int64)[order],) if with_lines else arrays


def _trace_int(value, path, line, key, minimum):
    try:
        f = float(value)
        if not minimum <= f <= MAX_LENGTH or f != int(f):
            raise ValueError
        return int(f)
    except (TypeError, ValueError):
        raise ConfigError(f"an integer in [{minimum}, {MAX_LENGTH}]", source=str(path), line=line, key=key,
                          value=value) from None


def _trace_time(value, unit, path, line, key):
    bound = f"within {MAX_TRACE_S:.0e} s of 0"
    if unit == "datetime":
        try:
            t = float(value)  # already seconds
        except (TypeError, ValueError):
            try:
                text = str(value).strip().replace(" ", "T")
                t = np.datetime64(text, "us").astype(np.int64) / 1e6
            except (TypeError, ValueError):
                raise ConfigError(f"a timestamp (YYYY-MM-DD HH:MM:SS.ffffff or seconds {bound})", source=str(path),
                                  line=line, key=key, value=value) from None
        if not abs(t) <= MAX_TRACE_S:  # NaN, NaT and far dates too
            raise ConfigError(f"a timestamp (YYYY-MM-DD HH:MM:SS.ffffff or seconds {bound})", source=str(path),
                              line=line, key=key, value=value)
        return t
    try:
        t = float(value) * unit
        if not abs(t) <= MAX_TRACE_S:
            raise ValueError
        return t
    except (TypeError, ValueError):
        raise ConfigError(f"a time {bound}", source=str(path), line=line, key=key, value=value) from None


# ----------------------------------------------------------------------------- config files
_KEYS = {
    "name", "num_prompts", "request_rate", "arrival", "burstiness", "max_concurrency", "input_len",
    "output_len", "random_range_ratio", "seed", "timeout_s", "prefix_len", "prefix_hit_ratio", "trace",
    "trace_format", "time_scale", "client_jitter_ms", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
    "warmup_requests", "dataset_name", "dataset_path", "sharegpt_output_len", "sonnet_input_len", "sonnet_output_len",
    "sonnet_prefix_len", "custom_output_len", "disable_shuffle",
}
#: Workload keys a trace makes meaningless: its lengths and send times are replayed (request_rate
#: and time_scale pace it, max_concurrency caps it).
TRACE_EXCLUDES = ("input_len", "output_len", "random_range_ratio", "arrival", "burstiness", "ramp_up_strategy",
                  "ramp_up_start_rps", "ramp_up_end_rps")
_DIST_KEYS = {"distribution", "value", "low", "high", "mean", "std", "sigma", "file", "column", "min", "max"}


def _length(sec, key, ratio):
    if not sec.has(key):
        return None
    raw = sec.raw(key)
    if not isinstance(raw, dict):
        value = sec.positive_int(key)
        return random_range(value, ratio)
    d = sec.section(key)
    d.reject_unknown(_DIST_KEYS)
    kind = d.choice("distribution", LENGTH_KINDS, "fixed")
    bounds = dict(minimum=d.positive_int("min", 1), maximum=d.number("max", 0, integer=True, minimum=0))
    if bounds["maximum"] and bounds["maximum"] < bounds["minimum"]:
        raise d.error("max", bounds["maximum"], f"an integer >= min ({bounds['minimum']})")
    if kind == "fixed":
        return LengthDist("fixed", value=d.positive_int("value"), **bounds)
    if kind == "uniform":
        low = d.positive_int("low")
        high = d.number("high", integer=True, minimum=low + 1)
        return LengthDist("uniform", low=low, high=high, **bounds)
    if kind == "normal":
        return LengthDist("normal", mean=d.number("mean", exclusive_minimum=0), std=d.number("std", minimum=0), **bounds)
    if kind == "lognormal":
        return LengthDist("lognormal", mean=d.number("mean", exclusive_minimum=0),
                          sigma=d.number("sigma", minimum=0), **bounds)
    file = d.file("file")
    return LengthDist("empirical", values=tuple(read_lengths(file, d.string("column", ""))), **bounds)


def read_lengths(path, column=""):
    """Token lengths from a text file (one integer per line) or a CSV ``column``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such lengths file", source=str(path))
    try:
        values = _read_lengths(path, column)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 text file (byte {exc.start} is not)", source=str(path)) from None
    except csv.Error as exc:
        raise ConfigError(f"a CSV file ({exc})", source=str(path)) from None
    if not values:
        raise ConfigError("at least one length, got none", source=str(path))
    return values


def _read_lengths(path, column):
    values = []
    if column:
        for line, row in _rows(path):
            if column not in row:
                raise ConfigError(f"a column {column}", source=str(path), line=line)
            values.append(_trace_int(row[column], path, line, column, minimum=1))
    else:
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text.strip():
                values.append(_trace_int(text.strip(), path, line, "length", minimum=1))
    return values


#: The dataset keys (vllm bench serve's flags) of each dataset; the random dataset's lengths are
#: input_len, output_len and random_range_ratio.
DATASET_KEYS = {"sharegpt": ("sharegpt_output_len", "disable_shuffle"),
                "sonnet": ("sonnet_input_len", "sonnet_output_len", "sonnet_prefix_len"),
                "custom": ("custom_output_len", "disable_shuffle")}
RANDOM_KEYS = ("input_len", "output_len", "random_range_ratio")


def _dataset(sec, trace):
    """The :class:`Dataset` of a workload mapping's dataset keys (None for the random dataset)."""
    name = sec.choice("dataset_name", DATASETS, "random")
    keys = sorted({k for keys in DATASET_KEYS.values() for k in keys})
    for key in keys + ["dataset_path"]:
        if sec.has(key) and key not in DATASET_KEYS.get(name, ()) + ("dataset_path",) * (name != "random"):
            raise sec.error(key, sec.raw(key), f"no {key} with dataset_name {name}")
    if name == "random":
        return None
    if trace:
        raise sec.error("dataset_name", name, "no dataset with a trace (the trace's lengths are replayed)")
    for key in RANDOM_KEYS:
        if sec.has(key):
            raise sec.error(key, sec.raw(key), f"no {key} with dataset_name {name} (the dataset gives the lengths)")
    given = {k: sec.boolean(k) if k == "disable_shuffle" else
             sec.number(k, integer=True, minimum=-1 if k == "custom_output_len" else 0)
             for k in DATASET_KEYS[name] if sec.has(k)}
    return Dataset(name=name, path=str(sec.file("dataset_path")), source=sec.source, **given)


def workload_from_dict(data, source="<dict>"):
    """Validate a workload mapping (``{"workload": {...}}`` or the inner mapping)."""
    top = Section(data, source)
    sec = top.section("workload") if "workload" in data else top
    sec.reject_unknown(_KEYS)
    rate_raw = sec.raw("request_rate", "inf")
    if (isinstance(rate_raw, str) and rate_raw.strip().lower() in ("inf", "infinity", ".inf")) or (
        isinstance(rate_raw, float) and rate_raw == math.inf
    ):
        rate = math.inf
    else:
        rate = sec.number("request_rate", exclusive_minimum=0)
    ratio = sec.number("random_range_ratio", 0.0, minimum=0, maximum=1)
    trace = ""
    if sec.has("trace"):
        trace = str(sec.file("trace"))
        for key in TRACE_EXCLUDES:
            if sec.has(key):
                raise sec.error(key, sec.raw(key), f"no {key} with a trace (its lengths and send times are replayed; "
                                                   "request_rate scales the times)")
    dataset = _dataset(sec, trace)
    burst = sec.number("burstiness", 1.0, exclusive_minimum=0)
    arrival = sec.choice("arrival", ARRIVALS, "gamma" if burst != 1.0 else "poisson")
    return Workload(
        num_prompts=sec.number("num_prompts", 0 if trace else 1000, integer=True, minimum=0 if trace else 1),
        request_rate=rate,
        arrival=arrival,
        burstiness=burst,
        max_concurrency=sec.number("max_concurrency", 0, integer=True, minimum=1),
        input_len=_length(sec, "input_len", ratio) or fixed(1024),
        output_len=_length(sec, "output_len", ratio) or fixed(128),
        seed=sec.number("seed", 0, integer=True, minimum=0),
        timeout_s=sec.number("timeout_s", 0.0, minimum=0),
        prefix_len=sec.number("prefix_len", 0, integer=True, minimum=0),
        prefix_hit_ratio=sec.number("prefix_hit_ratio", 0.0, minimum=0, maximum=1),
        trace=trace,
        trace_format=sec.choice("trace_format", TRACE_FORMATS, "auto"),
        time_scale=sec.number("time_scale", 1.0, exclusive_minimum=0),
        client_jitter_ms=sec.number("client_jitter_ms", DEFAULT_CLIENT_JITTER_MS, minimum=0),
        ramp_up_strategy=sec.choice("ramp_up_strategy", RAMP_UP_STRATEGIES) if sec.has("ramp_up_strategy") else "",
        ramp_up_start_rps=sec.number("ramp_up_start_rps", 0.0, minimum=0),
        ramp_up_end_rps=sec.number("ramp_up_end_rps", 0.0, minimum=0),
        warmup_requests=sec.number("warmup_requests", 0, integer=True, minimum=0),
        dataset=dataset,
        name=sec.string("name", Path(source).stem),
        source=source,
    )


def load_workload(name_or_path):
    """Load a workload: a preset name (``"bench-1m"``), a YAML file, or a trace file
    (``.csv``/``.jsonl``) replayed as is."""
    path = presets.resolve("workloads", name_or_path, flag="--workload")
    if path.suffix.lower() in (".csv", ".jsonl"):
        read_trace(path)  # validate now: errors name the file and line
        return Workload(num_prompts=0, trace=str(path), name=path.stem, source=str(path))
    data = load_file(path)
    if data is None:
        raise ConfigError("a workload, got an empty file", source=str(path))
    return workload_from_dict(data, str(path))
