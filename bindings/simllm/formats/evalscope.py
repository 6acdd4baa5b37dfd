"""EvalScope's ``evalscope perf`` ``benchmark_summary.json``, read into one
:class:`~simllm.formats.common.Measurement`.

Both key generations: the older sentences in seconds (``Average time to first token (s)``,
``Average time per output token (s)``, ``Average inter-token latency (s)``, ``Average latency
(s)``, ``Number of concurrency``, ``Request rate (req/s)``, ``Succeed requests``, ``Average input
tokens per request``, ``Average output tokens per request``, ``Output token throughput
(tok/s)``) and the newer short names (``TTFT (ms)``, ``TPOT (ms)``, ``ITL (ms)``, ``Avg Latency
(s)``, ``Concurrency``, ``Request Rate (req/s)``, ``Success Requests``, ``Avg Input Tokens``,
``Avg Output Tokens``, ``Output Throughput (tok/s)``).

The summary names neither the model, the server, the GPU, the parallel layout nor the precision:
those come from the caller. A finite request rate is an open loop at that rate (``concurrency``
0, ``--parallel`` only capping what is in flight); otherwise a closed loop of the recorded
concurrency (``request_rate`` inf).
"""
import math

from simllm.errors import ConfigError
from simllm.formats.common import NAN, agg_measurement, checked_number, load_json, token_count

# Per field: the key of each generation (older sentence, newer short name) and the factor to ms
# (None: not a time).
_EVALSCOPE = {
    "ttft": (("Average time to first token (s)", 1000.0), ("TTFT (ms)", 1.0)),
    "tpot": (("Average time per output token (s)", 1000.0), ("TPOT (ms)", 1.0)),
    "itl": (("Average inter-token latency (s)", 1000.0), ("ITL (ms)", 1.0)),
    "e2el": (("Average latency (s)", 1000.0), ("Avg Latency (s)", 1000.0)),
    "concurrency": (("Number of concurrency", None), ("Concurrency", None)),
    "rate": (("Request rate (req/s)", None), ("Request Rate (req/s)", None)),
    "succeeded": (("Succeed requests", None), ("Success Requests", None)),
    "total": (("Total requests", None), ("Total Requests", None)),
    "input": (("Average input tokens per request", None), ("Avg Input Tokens", None)),
    "output": (("Average output tokens per request", None), ("Avg Output Tokens", None)),
    "throughput": (("Output token throughput (tok/s)", None), ("Output Throughput (tok/s)", None)),
}
_EVALSCOPE_MARKERS = tuple(key for field in ("ttft", "concurrency", "e2el") for key, _ in _EVALSCOPE[field])


def is_evalscope_summary(data):
    """Whether parsed JSON is an EvalScope perf summary (it has a TTFT, concurrency or latency key
    of either generation)."""
    return isinstance(data, dict) and any(key in data for key in _EVALSCOPE_MARKERS)


def evalscope_rows(data, source, hardware, tp, precision):
    """The measurement of a parsed EvalScope benchmark_summary.json."""
    def pick(field):
        """(key, value, factor to ms) of ``field`` in whichever generation the file uses."""
        for key, scale in _EVALSCOPE[field]:
            if key in data:
                return key, data[key], scale
        return _EVALSCOPE[field][-1][0], None, _EVALSCOPE[field][-1][1]

    def time_ms(field, required=False):
        key, value, scale = pick(field)
        if required:
            return checked_number(value, source, key, minimum=0) * scale
        # EvalScope writes -1 (or 0 without streaming) for a metric it could not measure.
        v = checked_number(value, source, key, default=NAN)
        return v * scale if v > 0 else NAN

    key, succeeded, _ = pick("succeeded")
    if succeeded is None:  # only the total: assume all succeeded
        key, succeeded, _ = pick("total")
    completed = checked_number(succeeded, source, key, integer=True, minimum=0)
    if completed == 0:
        raise ConfigError("at least one successful request", source=source, key=key, value=succeeded)
    key, conc, _ = pick("concurrency")
    concurrency = checked_number(conc, source, key, integer=True, minimum=0, default=0)
    key, rate, _ = pick("rate")
    rate = checked_number(rate, source, key, default=-1.0)
    if rate > 0:  # --rate: an open loop (--parallel only caps what is in flight)
        concurrency = 0
    else:  # -1: no rate limit, a closed loop of --parallel clients
        rate = math.inf
    key, thr, _ = pick("throughput")
    throughput = checked_number(thr, source, key, default=NAN)
    return [agg_measurement(
        source, "", "", hardware, tp, precision,  # the summary names neither the model nor the server
        input_len=token_count(pick("input")[1], source, pick("input")[0]),
        output_len=token_count(pick("output")[1], source, pick("output")[0]),
        concurrency=concurrency, request_rate=rate, num_prompts=completed,
        ttft_ms=time_ms("ttft", required=True), tpot_ms=time_ms("tpot"), itl_ms=time_ms("itl"),
        e2el_ms=time_ms("e2el"), output_throughput=throughput if throughput >= 0 else NAN,
    )]


def read_evalscope_result(path, hardware="", tp=1, precision=""):
    """An EvalScope ``evalscope perf`` ``benchmark_summary.json`` (either key generation)."""
    data = load_json(path)
    if not is_evalscope_summary(data):
        raise ConfigError("an EvalScope perf benchmark_summary.json", source=str(path))
    return evalscope_rows(data, str(path), hardware, tp, precision)
