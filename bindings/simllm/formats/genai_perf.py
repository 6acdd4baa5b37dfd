"""NVIDIA genai-perf's ``profile_export_genai_perf.json`` and its successor AIPerf's
``profile_export_aiperf.json``, read into one :class:`~simllm.formats.common.Measurement`.

One ``{"unit", "avg", "p50", ...}`` block per metric (``time_to_first_token``,
``inter_token_latency``, ``request_latency``, ``input_sequence_length``,
``output_sequence_length``, ``output_token_throughput``, ``request_count``), at the top level or
(early AIPerf) under ``records``, each converted from its ``unit`` (ns, us, ms, s); the model and
the load from ``input_config`` (genai-perf's flat arguments or its config sections, AIPerf's
``endpoint`` and ``loadgen`` sections), else from the recorded command line.

A table of genai-perf runs (:func:`read_genai_perf_csv`: the exports' averages flattened, one run
a row, with the deployment in ``task_inputs-*`` columns, as NVIDIA's NIM sizing dataset keeps
them) records its GPU, GPUs and precision itself.

The GPU, the parallel layout and the precision of a JSON export come from the caller. A finite request rate is an
open loop at that rate (``concurrency`` 0, whatever in-flight cap it also names); otherwise a
closed loop of the recorded concurrency (``request_rate`` inf).
"""
import math
import shlex

from simllm.errors import ConfigError
from simllm.formats.common import (
    NAN,
    Measurement,
    agg_measurement,
    checked_number,
    csv_rows,
    field_number,
    first_found,
    load_json,
    recorded_name,
    token_count,
    value_at,
)

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


def profile_metrics(data):
    """(prefix, metrics dict) of a profile export: early AIPerf nests them under ``records``."""
    if isinstance(data.get("records"), dict):
        return "records.", data["records"]
    return "", data


def profile_kind(data):
    """``"genai-perf"`` or ``"aiperf"`` when parsed JSON is one of their profile exports (a
    ``{"unit", "avg", ...}`` block for a metric), told apart by what each records; else None."""
    if not isinstance(data, dict):
        return None
    _, metrics = profile_metrics(data)
    if any(isinstance(metrics.get(name), dict) for name in _PROFILE_METRICS):
        config = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}
        if any(key in config for key in ("model", "service_kind", "perf_analyzer")):
            return "genai-perf"
        if ("aiperf_version" in data or "records" in data or "loadgen" in config or "phases" in config
                or isinstance(value_at(config, "endpoint.model_names"), (list, str))):
            return "aiperf"
        return "genai-perf"
    return None


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


def profile_rows(data, source, hardware, tp, precision):
    """The measurement of a parsed genai-perf or AIPerf profile export."""
    prefix, metrics = profile_metrics(data)
    config = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}

    def stat(name, required=False, time=False):
        block = metrics.get(name)
        key = f"{prefix}{name}"
        if not isinstance(block, dict):  # a bare number is read as the average
            value, unit = block, None
        else:
            value, unit, key = block.get("avg"), block.get("unit"), f"{key}.avg"
        v = checked_number(value, source, key, minimum=0, default=None if required else NAN)
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

    _, model = first_found(config, *_PROFILE_MODEL)
    model = recorded_name(model) or recorded_name(_command_line_option(cli, "--model", "-m", "--model-names"))
    conc_path, conc = first_found(config, *_PROFILE_CONCURRENCY)
    if conc is None:
        conc_path, conc = "cli_command --concurrency", _command_line_option(cli, "--concurrency")
    else:
        conc_path = f"input_config.{conc_path}"
    rate_path, rate = first_found(config, *_PROFILE_RATE)
    if rate is None:
        rate_path, rate = "cli_command --request-rate", _command_line_option(cli, "--request-rate")
    else:
        rate_path = f"input_config.{rate_path}"
    concurrency = checked_number(conc, source, conc_path, integer=True, minimum=0, default=0)
    rate = checked_number(rate, source, rate_path, positive=True, default=math.inf)
    if math.isfinite(rate):  # request-rate mode; a concurrency beside it only caps what is in flight
        concurrency = 0

    # The server behind the endpoint: genai-perf records the Triton backend (tensorrtllm, vllm)
    # for service kind triton; otherwise the tools record only the endpoint type (chat, ...).
    service = recorded_name(config.get("service_kind")) or recorded_name(value_at(config, "endpoint.service_kind"))
    if service == "triton":
        backend = recorded_name(config.get("backend")) or recorded_name(value_at(config, "endpoint.backend"))
    else:
        backend = recorded_name(config.get("endpoint_type")) or recorded_name(value_at(config, "endpoint.type"))

    # Both tools define inter_token_latency per request as (request latency - TTFT) / (output
    # tokens - 1): the time per output token after the first, i.e. vLLM's TPOT. It is used for
    # both TPOT and ITL.
    itl = stat("inter_token_latency", time=True)
    return [agg_measurement(
        source, model, backend, hardware, tp, precision,
        input_len=token_count(stat("input_sequence_length", required=True), source,
                              f"{prefix}input_sequence_length.avg"),
        output_len=token_count(stat("output_sequence_length", required=True), source,
                               f"{prefix}output_sequence_length.avg"),
        concurrency=concurrency, request_rate=rate, num_prompts=0 if math.isnan(count) else round(count),
        ttft_ms=stat("time_to_first_token", required=True, time=True), tpot_ms=itl, itl_ms=itl,
        e2el_ms=stat("request_latency", time=True), output_throughput=stat("output_token_throughput"),
    )]


def read_profile_export(path, hardware="", tp=1, precision=""):
    """A genai-perf ``profile_export_genai_perf.json`` or AIPerf ``profile_export_aiperf.json``."""
    data = load_json(path)
    if profile_kind(data) is None:
        raise ConfigError("a genai-perf or AIPerf profile export (a JSON object with time_to_first_token)",
                          source=str(path))
    return profile_rows(data, str(path), hardware, tp, precision)


# ----------------------------------------------------------------------------- flattened CSV tables

#: The columns of a table of genai-perf runs, one run a row: each metric's ``-unit`` and ``-avg``
#: flattened from the profile export, the run's ``input_config-*`` arguments, and the deployment in
#: ``task_inputs-*`` (model, GPU, GPUs, precision), as NVIDIA's NIM sizing dataset records them.
CSV_COLUMNS = ("task_inputs-model", "task_inputs-GPU", "task_inputs-n_gpus", "task_inputs-precision",
               "input_config-concurrency", "input_config-synthetic_input_tokens_mean",
               "input_config-synthetic_input_tokens_stddev", "input_config-output_tokens_mean",
               "time_to_first_token-avg", "time_to_first_token-unit", "inter_token_latency-avg",
               "inter_token_latency-unit")

#: The NIM dataset's model names and the checkpoints NIM serves under them.
CSV_MODELS = {"meta-llama3-8b-instruct": "meta-llama/Meta-Llama-3-8B-Instruct",
              "meta-llama3-70b-instruct": "meta-llama/Meta-Llama-3-70B-Instruct"}
#: Its GPU names and simllm's systems.
CSV_GPUS = {"H100_80GB_HBM3": "h100_sxm"}

#: Warm-up requests per client a steady-state run leaves out: GenAI-Perf measures windows until
#: their throughput and latency agree (``stability_percentage``), so the first requests of every
#: client, which meet an empty engine, are not in its figures; two a client is what the runs'
#: warm-up is posed as (the closed loop of 10 x concurrency prompts reaches a steady batch within it).
CSV_WARMUP_PER_CLIENT = 2


def is_genai_perf_csv_header(fieldnames):
    """Whether a CSV header is a table of genai-perf runs'."""
    return bool(fieldnames) and "input_config-concurrency" in fieldnames and "time_to_first_token-avg" in fieldnames


#: The framework profile of a row's server by its ``task_inputs-execution_type``: NVIDIA NIM of
#: 2024 on TensorRT-LLM, not today's trtllm-serve. Others: the backend's current profile.
CSV_PROFILES = {"NIM_TRT-LLM": "nim-trtllm"}
#: Whether those servers chunked long prompts: TensorRT-LLM's C++ executor does not unless told
#: (``ExecutorConfig(..., enableChunkedContext = false)``, cpp/include/tensorrt_llm/executor/executor.h,
#: and the Triton backend's ``enable_chunked_context`` parameter, default false), so a prompt runs
#: whole in one step, at most ``max_num_tokens`` (8,192 by default) with the decodes beside it.
CSV_CHUNKED = {"NIM_TRT-LLM": False}


def read_genai_perf_csv(path):
    """Rows of a table of genai-perf closed-loop runs (see :data:`CSV_COLUMNS`): each a closed loop
    of ``input_config-concurrency`` clients on ``task_inputs-n_gpus`` GPUs (tensor parallel), its
    prompts exactly ``synthetic_input_tokens_mean`` long when the standard deviation is 0 and its
    outputs ``output_tokens_mean`` (``max_tokens``) long, :data:`CSV_WARMUP_PER_CLIENT` warm-up
    requests a client left out. TPOT and ITL are genai-perf's ``inter_token_latency`` (per request
    (latency - TTFT) / (output tokens - 1)); E2E its ``request_latency``. Its client, perf_analyzer's
    concurrency mode, sends a client's next request as its last one ends (client jitter 0); its
    server's framework profile and chunking are :data:`CSV_PROFILES`' and :data:`CSV_CHUNKED`'s by the
    row's execution type."""
    source = str(path)
    out = []
    for line, row in csv_rows(path, CSV_COLUMNS, "a genai-perf table's"):

        def time_ms(metric, required=True):
            unit = (row.get(f"{metric}-unit") or "").strip().lower()
            value = row.get(f"{metric}-avg")
            if not required and value in (None, ""):
                return NAN
            if unit not in _TO_MS:
                raise ConfigError("a time unit (ns, us, ms or s)", source=source, line=line,
                                  key=f"{metric}-unit", value=unit)
            return field_number(row, f"{metric}-avg", source, line) * _TO_MS[unit]

        concurrency = field_number(row, "input_config-concurrency", source, line, integer=True)
        if concurrency < 1:
            raise ConfigError("an integer >= 1", source=source, line=line, key="input_config-concurrency",
                              value=concurrency)
        model = row["task_inputs-model"].strip()
        gpu = row["task_inputs-GPU"].strip()
        stddev = field_number(row, "input_config-synthetic_input_tokens_stddev", source, line)
        itl = time_ms("inter_token_latency")
        execution = (row.get("task_inputs-execution_type") or "").strip()
        out.append(Measurement(
            source=source, line=line, model=CSV_MODELS.get(model, model), hardware=CSV_GPUS.get(gpu, gpu),
            backend="trtllm", precision=row["task_inputs-precision"].strip().lower(), mode="agg",
            tp=field_number(row, "task_inputs-n_gpus", source, line, integer=True), pp=1, dp=1,
            input_len=field_number(row, "input_config-synthetic_input_tokens_mean", source, line, integer=True),
            output_len=field_number(row, "input_config-output_tokens_mean", source, line, integer=True),
            concurrency=concurrency, request_rate=math.inf, num_prompts=0,
            ttft_ms=time_ms("time_to_first_token"), tpot_ms=itl, itl_ms=itl,
            e2el_ms=time_ms("request_latency", required=False),
            output_throughput=field_number(row, "output_token_throughput-avg", source, line, default=NAN),
            fixed_lengths=stddev == 0, warmup_requests=CSV_WARMUP_PER_CLIENT * concurrency,
            client_jitter_ms=0.0,
            framework_profile=CSV_PROFILES.get(execution, ""), chunked_prefill=CSV_CHUNKED.get(execution),
        ))
    if not out:
        raise ConfigError("at least one measured row, got none", source=source)
    return out
