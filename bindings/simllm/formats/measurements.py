"""Measured serving results, read into one table of :class:`Measurement` rows.

Formats (a ``.json`` file's format is told from its keys, not its name):

- CSV: NVIDIA aiconfigurator's ``silicon_sample.csv`` (one row per measured point: model, system,
  backend, precision, mode, isl/osl, concurrency ``batch_size``, TP/PP/DP, mean TTFT and TPOT).
- ``vllm bench serve`` result JSON (``--save-result``; the older ``benchmark_serving.py`` keys
  too): ``model_id``, ``num_prompts``, ``request_rate``, ``max_concurrency``,
  ``total_input_tokens``, ``total_output_tokens``, ``completed``, ``mean_ttft_ms``,
  ``mean_tpot_ms``, ``mean_itl_ms``, ``mean_e2el_ms``, ``output_throughput``.
- GuideLLM ``benchmarks.json`` (``--output-path``): one row per entry of ``benchmarks``. The
  means of the successful requests' ``metrics.<name>.successful.mean`` for
  ``time_to_first_token_ms``, ``time_per_output_token_ms``, ``inter_token_latency_ms``,
  ``request_latency`` (seconds), ``prompt_token_count``, ``output_token_count`` and
  ``output_tokens_per_second``; the request counts from ``request_totals`` (under ``metrics``
  from 0.4); the load from the scheduling strategy (``args.strategy`` up to 0.3,
  ``config.strategy`` from 0.4: ``type_`` synchronous, concurrent with ``streams``, throughput,
  constant or poisson with ``rate``).
- EvalScope perf ``benchmark_summary.json``, both key generations: the older sentences in
  seconds (``Average time to first token (s)``, ``Average time per output token (s)``,
  ``Average inter-token latency (s)``, ``Average latency (s)``, ``Number of concurrency``,
  ``Request rate (req/s)``, ``Succeed requests``, ``Average input tokens per request``,
  ``Average output tokens per request``, ``Output token throughput (tok/s)``) and the newer
  short names (``TTFT (ms)``, ``TPOT (ms)``, ``ITL (ms)``, ``Avg Latency (s)``, ``Concurrency``,
  ``Request Rate (req/s)``, ``Success Requests``, ``Avg Input Tokens``, ``Avg Output Tokens``,
  ``Output Throughput (tok/s)``).
- genai-perf ``profile_export_genai_perf.json`` and AIPerf ``profile_export_aiperf.json``: one
  ``{"unit", "avg", "p50", ...}`` block per metric (``time_to_first_token``,
  ``inter_token_latency``, ``request_latency``, ``input_sequence_length``,
  ``output_sequence_length``, ``output_token_throughput``, ``request_count``), at the top level
  or (early AIPerf) under ``records``, each converted from its ``unit`` (ns, us, ms, s); the
  model and the load from ``input_config`` (genai-perf's flat arguments or its config sections,
  AIPerf's ``endpoint`` and ``loadgen`` sections).

None of the JSON formats records the GPU, the parallel layout or the precision: those come from
the caller. A GuideLLM, EvalScope, genai-perf or AIPerf result that records a finite request rate
is an open loop at that rate (``concurrency`` 0, whatever in-flight cap it also names); otherwise
it is a closed loop of the recorded concurrency (``request_rate`` inf).
"""
import csv
import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from simllm.errors import ConfigError

NAN = float("nan")


@dataclass(frozen=True)
class Measurement:
    """One measured serving point. Times in ms (``nan`` when not measured); ``concurrency`` is a
    closed loop's clients (0 for an open loop at ``request_rate``)."""

    source: str
    line: int
    model: str  # as the measurement names it (a HuggingFace id)
    hardware: str  # as the measurement names it ("h100_sxm"), or "" when it does not say
    backend: str
    precision: str  # "" = the model's native dtype
    mode: str  # "agg" (one engine) or "disagg" (separate prefill/decode workers)
    tp: int
    pp: int
    dp: int
    input_len: int
    output_len: int
    concurrency: int
    request_rate: float
    num_prompts: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float = NAN
    e2el_ms: float = NAN
    output_throughput: float = NAN

    @property
    def where(self):
        return f"{self.source}:{self.line}" if self.line else self.source


def _number(row, key, source, line, integer=False, default=None):
    value = row.get(key)
    if value in (None, ""):
        if default is not None:
            return default
        raise ConfigError("a value", source=source, line=line, key=key, value=value)
    try:
        f = float(value)
        if integer:
            if f != int(f):
                raise ValueError
            return int(f)
        return f
    except (TypeError, ValueError):
        raise ConfigError("an integer" if integer else "a number", source=source, line=line, key=key,
                          value=value) from None


_SILICON_COLUMNS = ("model_path", "system", "backend", "precision", "mode", "isl", "osl", "batch_size", "tp_size",
                    "silicon_ttft_ms", "silicon_tpot_ms")


def read_silicon_csv(path):
    """Rows of an aiconfigurator-style ``silicon_sample.csv``."""
    out = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _SILICON_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"expected the silicon_sample.csv columns; missing {', '.join(missing)}",
                              source=str(path), line=1)
        for row in reader:
            line = reader.line_num
            # Disaggregated rows describe their workers in prefill_*/decode_* columns instead.
            opt = 0 if row.get("mode") != "agg" else None
            out.append(Measurement(
                source=str(path), line=line, model=row["model_path"], hardware=row["system"], backend=row["backend"],
                precision=row["precision"], mode=row["mode"],
                tp=_number(row, "tp_size", path, line, integer=True, default=opt),
                pp=_number(row, "pp_size", path, line, integer=True, default=1),
                dp=_number(row, "attention_dp_size", path, line, integer=True, default=1),
                input_len=_number(row, "isl", path, line, integer=True),
                output_len=_number(row, "osl", path, line, integer=True),
                concurrency=_number(row, "batch_size", path, line, integer=True, default=opt),
                request_rate=math.inf, num_prompts=0,
                ttft_ms=_number(row, "silicon_ttft_ms", path, line),
                tpot_ms=_number(row, "silicon_tpot_ms", path, line),
            ))
    if not out:
        raise ConfigError("at least one measured row, got none", source=str(path))
    return out


def _load_json(path):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 JSON file ({exc.reason} at byte {exc.start})", source=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None


def _vllm_rows(data, source, hardware, tp, precision):
    completed = _number(data, "completed", source, None, integer=True)
    if completed <= 0:
        raise ConfigError("completed > 0", source=source, key="completed", value=completed)
    rate = data.get("request_rate", "inf")
    rate = math.inf if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    return [Measurement(
        source=source, line=0, model=str(data.get("model_id") or data.get("tokenizer_id") or ""),
        hardware=hardware, backend=str(data.get("backend", "vllm")), precision=precision, mode="agg",
        tp=tp, pp=1, dp=1,
        input_len=round(_number(data, "total_input_tokens", source, None) / completed),
        output_len=round(_number(data, "total_output_tokens", source, None) / completed),
        concurrency=int(data.get("max_concurrency") or 0), request_rate=rate,
        num_prompts=int(data.get("num_prompts") or completed),
        ttft_ms=_number(data, "mean_ttft_ms", source, None),
        tpot_ms=_number(data, "mean_tpot_ms", source, None, default=NAN),
        itl_ms=_number(data, "mean_itl_ms", source, None, default=NAN),
        e2el_ms=_number(data, "mean_e2el_ms", source, None, default=NAN),
        output_throughput=_number(data, "output_throughput", source, None, default=NAN),
    )]


def read_vllm_result(path, hardware="", tp=1, precision=""):
    """One ``vllm bench serve`` result JSON (current or ``benchmark_serving.py`` keys)."""
    data = _load_json(path)
    if not isinstance(data, dict) or "mean_ttft_ms" not in data:
        raise ConfigError("a vllm bench serve result (a JSON object with mean_ttft_ms)", source=str(path))
    return _vllm_rows(data, str(path), hardware, tp, precision)


# --- shared helpers of the JSON importers ------------------------------------------------------

def _at(data, path):
    """The value at the dotted ``path`` in nested dicts, or None where any step is missing."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _first(data, *paths):
    """``(path, value)`` of the first of ``paths`` holding a value (not None), else (paths[0], None)."""
    for path in paths:
        value = _at(data, path)
        if value is not None:
            return path, value
    return paths[0], None


def _value(value, source, key, *, integer=False, minimum=None, positive=False, default=None):
    """``value`` as a finite number, or a ConfigError naming ``source``, ``key`` and the value.

    With a ``default``, a missing value (None, "") or NaN gives the default instead."""
    if value is None or value == "":
        if default is not None:
            return default
        raise ConfigError("a value", source=source, key=key, value=value)
    what = "an integer" if integer else "a number"
    if isinstance(value, bool):  # JSON true/false is not a count or a time
        raise ConfigError(what, source=source, key=key, value=value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(what, source=source, key=key, value=value) from None
    if math.isnan(f) and default is not None:
        return default
    if not math.isfinite(f):
        raise ConfigError(f"a finite {what[3:] if integer else 'number'}", source=source, key=key, value=value)
    if integer:
        if f != int(f):
            raise ConfigError(what, source=source, key=key, value=value)
        f = int(f)
    if positive and f <= 0:
        raise ConfigError(f"{what} > 0", source=source, key=key, value=value)
    if minimum is not None and f < minimum:
        raise ConfigError(f"{what} >= {minimum}", source=source, key=key, value=value)
    return f


def _tokens(mean, source, key):
    """Mean tokens per request, rounded to the fixed length the simulation replays."""
    n = round(_value(mean, source, key, minimum=0))
    if n < 1:
        raise ConfigError("at least one token per request on average", source=source, key=key, value=mean)
    return n


def _text(value):
    """A recorded name as a string ("" when absent; GuideLLM writes "None" for no model)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return "" if value in (None, "", "None") else str(value)


def _row(source, model, backend, hardware, tp, precision, **kw):
    """A measurement of one aggregated engine; the JSON formats name no line, PP or DP."""
    return Measurement(source=source, line=0, model=model, hardware=hardware, backend=backend, precision=precision,
                       mode="agg", tp=tp, pp=1, dp=1, **kw)


# --- GuideLLM benchmarks.json ------------------------------------------------------------------

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
        return _value(strategy.get("streams"), source, f"{key}.streams", integer=True, positive=True), math.inf
    if kind == "throughput":  # everything at once, up to max_concurrency in flight when capped
        cap = strategy.get("max_concurrency")
        conc = 0 if cap is None else _value(cap, source, f"{key}.max_concurrency", integer=True, positive=True)
        return conc, math.inf
    if kind in ("constant", "poisson"):
        return 0, _value(strategy.get("rate"), source, f"{key}.rate", positive=True)
    raise ConfigError("a strategy type_ of synchronous, concurrent, throughput, constant or poisson",
                      source=source, key=f"{key}.type_", value=kind)


def _guidellm_row(bench, k, name, source, report_args, hardware, tp, precision):
    """The measurement of ``bench`` (``benchmarks[i]`` = ``k``), named ``name`` in the table."""
    if not isinstance(bench, dict) or not isinstance(bench.get("metrics"), dict):
        raise ConfigError("a benchmark object with metrics", source=source, key=k)
    metrics = bench["metrics"]

    totals_path, totals = _first(bench, *_GUIDELLM_TOTALS)
    if not isinstance(totals, dict):
        raise ConfigError("the request counts (metrics.request_totals, or request_totals before GuideLLM 0.4)",
                          source=source, key=f"{k}.{totals_path}", value=totals)
    completed = _value(totals.get("successful"), source, f"{k}.{totals_path}.successful", integer=True, minimum=0)
    if completed == 0:
        raise ConfigError("at least one successful request", source=source, key=f"{k}.{totals_path}.successful",
                          value=0)

    strategy_path, strategy = _first(bench, *_GUIDELLM_STRATEGY)
    if not isinstance(strategy, dict):
        raise ConfigError("a scheduling strategy (config.strategy, or args.strategy before GuideLLM 0.4)",
                          source=source, key=f"{k}.{strategy_path}", value=strategy)
    concurrency, rate = _guidellm_load(strategy, source, f"{k}.{strategy_path}")

    def mean(metric, scale=1.0, required=False):
        """The mean over the successful requests of ``metric``, times ``scale``."""
        key = f"{k}.metrics.{metric}.successful.mean"
        return _value(_at(metrics, f"{metric}.successful.mean"), source, key, minimum=0,
                      default=None if required else NAN) * scale

    def tokens(metric):
        return _tokens(_at(metrics, f"{metric}.successful.mean"), source, f"{k}.metrics.{metric}.successful.mean")

    _, model = _first(bench, *_GUIDELLM_MODEL)
    return _row(
        name, _text(model) or _text(report_args.get("model")),
        _text(_at(bench, "worker.backend_type")) or _text(report_args.get("backend")), hardware, tp, precision,
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


def _guidellm_rows(data, source, hardware, tp, precision):
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
    data = _load_json(path)
    if _json_format(data) != "guidellm":
        raise ConfigError("a GuideLLM benchmarks.json (a JSON object with a benchmarks list)", source=str(path))
    return _guidellm_rows(data, str(path), hardware, tp, precision)


# --- EvalScope perf benchmark_summary.json -----------------------------------------------------

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


def _evalscope_rows(data, source, hardware, tp, precision):
    def pick(field):
        """(key, value, factor to ms) of ``field`` in whichever generation the file uses."""
        for key, scale in _EVALSCOPE[field]:
            if key in data:
                return key, data[key], scale
        return _EVALSCOPE[field][-1][0], None, _EVALSCOPE[field][-1][1]

    def time_ms(field, required=False):
        key, value, scale = pick(field)
        if required:
            return _value(value, source, key, minimum=0) * scale
        # EvalScope writes -1 (or 0 without streaming) for a metric it could not measure.
        v = _value(value, source, key, default=NAN)
        return v * scale if v > 0 else NAN

    key, succeeded, _ = pick("succeeded")
    if succeeded is None:  # only the total: assume all succeeded
        key, succeeded, _ = pick("total")
    completed = _value(succeeded, source, key, integer=True, minimum=0)
    if completed == 0:
        raise ConfigError("at least one successful request", source=source, key=key, value=succeeded)
    key, conc, _ = pick("concurrency")
    concurrency = _value(conc, source, key, integer=True, minimum=0, default=0)
    key, rate, _ = pick("rate")
    rate = _value(rate, source, key, default=-1.0)
    if rate > 0:  # --rate: an open loop (--parallel only caps what is in flight)
        concurrency = 0
    else:  # -1: no rate limit, a closed loop of --parallel clients
        rate = math.inf
    key, thr, _ = pick("throughput")
    throughput = _value(thr, source, key, default=NAN)
    return [_row(
        source, "", "", hardware, tp, precision,  # the summary names neither the model nor the server
        input_len=_tokens(pick("input")[1], source, pick("input")[0]),
        output_len=_tokens(pick("output")[1], source, pick("output")[0]),
        concurrency=concurrency, request_rate=rate, num_prompts=completed,
        ttft_ms=time_ms("ttft", required=True), tpot_ms=time_ms("tpot"), itl_ms=time_ms("itl"),
        e2el_ms=time_ms("e2el"), output_throughput=throughput if throughput >= 0 else NAN,
    )]


def read_evalscope_result(path, hardware="", tp=1, precision=""):
    """An EvalScope ``evalscope perf`` ``benchmark_summary.json`` (either key generation)."""
    data = _load_json(path)
    if _json_format(data) != "evalscope":
        raise ConfigError("an EvalScope perf benchmark_summary.json", source=str(path))
    return _evalscope_rows(data, str(path), hardware, tp, precision)


# --- genai-perf / AIPerf profile exports -------------------------------------------------------

_TO_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0}
_PROFILE_METRICS = ("time_to_first_token", "inter_token_latency", "request_latency", "input_sequence_length",
                    "output_sequence_length", "output_token_throughput", "request_throughput")
# Where each generation keeps the model and the load in ``input_config``: genai-perf's flat
# command-line arguments, genai-perf's config sections, AIPerf's UserConfig (model_names at the
# top in its first releases), AIPerf's BenchmarkConfig phases.
_PROFILE_MODEL = ("model", "model_names", "endpoint.model_names")
_PROFILE_CONCURRENCY = ("concurrency", "perf_analyzer.stimulus.concurrency", "loadgen.concurrency",
                        "phases.profiling.concurrency")
_PROFILE_RATE = ("request_rate", "perf_analyzer.stimulus.request_rate", "loadgen.request_rate",
                 "phases.profiling.request_rate")


def _profile_metrics(data):
    """(prefix, metrics dict) of a profile export: early AIPerf nests them under ``records``."""
    if isinstance(data.get("records"), dict):
        return "records.", data["records"]
    return "", data


def _command_line_option(command, *flags):
    """The value of the first of ``flags`` in a recorded command line (AIPerf's cli_command)."""
    try:
        words = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        return None
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in flags:
            if eq:
                return value
            if i + 1 < len(words):
                return words[i + 1]
    return None


def _profile_rows(data, source, hardware, tp, precision):
    prefix, metrics = _profile_metrics(data)
    config = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}

    def stat(name, required=False, time=False):
        block = metrics.get(name)
        key = f"{prefix}{name}"
        if not isinstance(block, dict):  # a bare number is read as the average
            value, unit = block, None
        else:
            value, unit, key = block.get("avg"), block.get("unit"), f"{key}.avg"
        v = _value(value, source, key, minimum=0, default=None if required else NAN)
        if time:
            if unit is None:  # both tools write "ms" for their time metrics
                unit = "ms"
            if str(unit).lower() not in _TO_MS:
                raise ConfigError("a time unit (ns, us, ms or s)", source=source, key=f"{prefix}{name}.unit",
                                  value=unit)
            v *= _TO_MS[str(unit).lower()]
        return v

    count = stat("request_count")
    if count == 0:
        key = f"{prefix}request_count" + (".avg" if isinstance(metrics.get("request_count"), dict) else "")
        raise ConfigError("at least one successful request", source=source, key=key, value=0)
    cli = data.get("run_info", {}).get("cli_command") if isinstance(data.get("run_info"), dict) else None
    cli = cli or config.get("cli_command")

    _, model = _first(config, *_PROFILE_MODEL)
    model = _text(model) or _text(_command_line_option(cli, "--model", "-m", "--model-names"))
    conc_path, conc = _first(config, *_PROFILE_CONCURRENCY)
    if conc is None:
        conc_path, conc = "cli_command --concurrency", _command_line_option(cli, "--concurrency")
    else:
        conc_path = f"input_config.{conc_path}"
    rate_path, rate = _first(config, *_PROFILE_RATE)
    if rate is None:
        rate_path, rate = "cli_command --request-rate", _command_line_option(cli, "--request-rate")
    else:
        rate_path = f"input_config.{rate_path}"
    concurrency = _value(conc, source, conc_path, integer=True, minimum=0, default=0)
    rate = _value(rate, source, rate_path, positive=True, default=math.inf)
    if math.isfinite(rate):  # request-rate mode; a concurrency beside it only caps what is in flight
        concurrency = 0

    # The server behind the endpoint: genai-perf records the Triton backend (tensorrtllm, vllm)
    # for service kind triton; otherwise the tools record only the endpoint type (chat, ...).
    service = _text(config.get("service_kind")) or _text(_at(config, "endpoint.service_kind"))
    if service == "triton":
        backend = _text(config.get("backend")) or _text(_at(config, "endpoint.backend"))
    else:
        backend = _text(config.get("endpoint_type")) or _text(_at(config, "endpoint.type"))

    # Both tools define inter_token_latency per request as (request latency - TTFT) / (output
    # tokens - 1): the time per output token after the first, i.e. vLLM's TPOT. It is used for
    # both TPOT and ITL.
    itl = stat("inter_token_latency", time=True)
    return [_row(
        source, model, backend, hardware, tp, precision,
        input_len=_tokens(stat("input_sequence_length", required=True), source, f"{prefix}input_sequence_length.avg"),
        output_len=_tokens(stat("output_sequence_length", required=True), source,
                           f"{prefix}output_sequence_length.avg"),
        concurrency=concurrency, request_rate=rate, num_prompts=0 if math.isnan(count) else round(count),
        ttft_ms=stat("time_to_first_token", required=True, time=True), tpot_ms=itl, itl_ms=itl,
        e2el_ms=stat("request_latency", time=True), output_throughput=stat("output_token_throughput"),
    )]


def read_profile_export(path, hardware="", tp=1, precision=""):
    """A genai-perf ``profile_export_genai_perf.json`` or AIPerf ``profile_export_aiperf.json``."""
    data = _load_json(path)
    if _json_format(data) not in ("genai-perf", "aiperf"):
        raise ConfigError("a genai-perf or AIPerf profile export (a JSON object with time_to_first_token)",
                          source=str(path))
    return _profile_rows(data, str(path), hardware, tp, precision)


# --- dispatch ----------------------------------------------------------------------------------

JSON_FORMATS = ("vllm", "guidellm", "evalscope", "genai-perf", "aiperf")
_ACCEPTED = ("a vllm bench serve result (mean_ttft_ms), a GuideLLM benchmarks.json (benchmarks), an EvalScope "
             "perf benchmark_summary.json or a genai-perf/AIPerf profile export (time_to_first_token)")


def _json_format(data):
    """Which of :data:`JSON_FORMATS` a parsed result is, from its keys; None when none fits."""
    if not isinstance(data, dict):
        return None
    if "mean_ttft_ms" in data:
        return "vllm"
    if isinstance(data.get("benchmarks"), list):
        return "guidellm"
    if any(key in data for key in _EVALSCOPE_MARKERS):
        return "evalscope"
    _, metrics = _profile_metrics(data)
    if any(isinstance(metrics.get(name), dict) for name in _PROFILE_METRICS):
        config = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}
        if any(key in config for key in ("model", "service_kind", "perf_analyzer")):
            return "genai-perf"
        if ("aiperf_version" in data or "records" in data or "loadgen" in config or "phases" in config
                or isinstance(_at(config, "endpoint.model_names"), (list, str))):
            return "aiperf"
        return "genai-perf"
    return None


def detect_json_format(path):
    """The format of a result JSON file (one of :data:`JSON_FORMATS`), told from its keys."""
    fmt = _json_format(_load_json(path))
    if fmt is None:
        raise ConfigError(f"unrecognized result JSON: expected {_ACCEPTED}", source=str(path))
    return fmt


_JSON_ROWS = {"vllm": _vllm_rows, "guidellm": _guidellm_rows, "evalscope": _evalscope_rows,
              "genai-perf": _profile_rows, "aiperf": _profile_rows}


def read_json_result(path, hardware="", tp=1, precision=""):
    """The rows of a result JSON in any of :data:`JSON_FORMATS`, told from its keys."""
    data = _load_json(path)
    fmt = _json_format(data)
    if fmt is None:
        raise ConfigError(f"unrecognized result JSON: expected {_ACCEPTED}", source=str(path))
    return _JSON_ROWS[fmt](data, str(path), hardware, tp, precision)


def load_measurements(paths, hardware="", tp=1, precision=""):
    """Read measured results from CSV (silicon_sample format) and JSON files (vllm bench serve,
    GuideLLM, EvalScope perf, genai-perf or AIPerf; the format is told from the content).

    ``hardware``, ``tp`` and ``precision`` fill in what a JSON result does not record.
    """
    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("no such file", source=str(p))
        if p.suffix.lower() == ".csv":
            out += read_silicon_csv(p)
        elif p.suffix.lower() == ".json":
            out += read_json_result(p, hardware=hardware, tp=tp, precision=precision)
        else:
            raise ConfigError("a .csv (silicon_sample format) or .json (vllm bench serve, GuideLLM, EvalScope, "
                              "genai-perf or AIPerf result) file", source=str(p))
    return out
