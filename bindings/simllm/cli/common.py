"""What the commands share: argument types that check values as argparse reads them, the
argument groups (target, engine, workload, scheduler, measured results) and the builders that turn
parsed arguments into configs."""
import argparse
import functools
import math
import re
from dataclasses import replace

from simllm.calibration import validate as accuracy
from simllm.calibration.bands import summary_bands
from simllm.calibration.record import load_record
from simllm.config.disagg import DisaggConfig, parse_pool_config, parse_transfer_config
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import BATCHING, EXPERT_ROUTINGS, FRAMEWORKS, ROUTERS, ServingConfig
from simllm.config.sections import MAX_MAGNITUDE, MIN_STEP
from simllm.config.workload import (
    ARRIVALS,
    DEFAULT_CLIENT_JITTER_MS,
    MAX_COUNT,
    MAX_RATE,
    MIN_RATE,
    RAMP_UP_STRATEGIES,
    Workload,
    load_workload,
    random_range,
)
from simllm.errors import ConfigError
from simllm.formats.measurements import load_measurements
from simllm.report.progress import CompileNotice
from simllm.sim.runner import EXECUTORS

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
PROGRESS_MIN_REQUESTS = 1_000_000  # simllm run shows a progress bar from this many requests


def shows_compiles(cmd):
    """Decorate a command's ``cmd(args, out)`` that may simulate: while numba compiles kernels (a
    cold cache: minutes), stderr says so in one line with the time elapsed
    (:class:`~simllm.report.progress.CompileNotice`); nothing under ``-q``/``--quiet``."""
    @functools.wraps(cmd)
    def noticed(args, out):
        with CompileNotice(enabled=not getattr(args, "quiet", False)).listening():
            return cmd(args, out)

    return noticed


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: command line: {message}\n")


def positive_int(text):
    return int(number(text, lambda v: math.isfinite(v) and 1 <= v <= MAX_COUNT and v == int(v),
                      f"an integer in [1, {MAX_COUNT}]"))


def nonnegative_int(text):
    return int(number(text, lambda v: math.isfinite(v) and 0 <= v <= MAX_COUNT and v == int(v),
                      f"an integer in [0, {MAX_COUNT}]"))


def fraction(text):
    return number(text, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")


def ratio(text):
    return number(text, lambda v: 1.0 <= v <= 1e6, "a number in [1, 1e6]")


def number(text, ok, expected):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
    return value


def rate(text):
    return number(text, lambda v: MIN_RATE <= v <= MAX_RATE or v == math.inf,
                  f"requests per second in [{MIN_RATE:g}, {MAX_RATE:g}], or inf")


def positive_float(text):
    return number(text, lambda v: MIN_STEP <= v <= MAX_MAGNITUDE, f"a positive number up to {MAX_MAGNITUDE:.0e}")


def nonneg_float(text):
    return number(text, lambda v: 0 <= v <= MAX_MAGNITUDE, f"a number in [0, {MAX_MAGNITUDE:.0e}]")


def unit(text):
    return number(text, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def add_target(p):
    p.add_argument("model_pos", nargs="?", metavar="MODEL", help="model preset or path (same as --model)")
    p.add_argument("hardware_pos", nargs="?", metavar="HARDWARE", help="hardware preset or path (same as --hardware)")
    p.add_argument("--model", help=f"model preset name, simllm YAML, or HuggingFace config.json (default {DEFAULT_MODEL})")
    p.add_argument("--hardware", help=f"hardware preset name or YAML (default {DEFAULT_HARDWARE})")


def add_engine_args(p):
    p.add_argument("--tensor-parallel-size", "-tp", type=positive_int, default=1, help="GPUs sharing each layer (default 1)")
    p.add_argument("--dtype", default="auto",
                   help="weight dtype: auto, fp16, bf16, fp32, fp8, int8, int4, fp4 (NVFP4), mxfp4 (default auto)")
    p.add_argument("--kv-cache-dtype", default="auto", help="KV cache dtype: auto, fp16, bf16, fp8, int8, int4")
    p.add_argument("--kv-compression-ratio", type=ratio, default=0.0, help="KV bytes stored = raw / ratio (default: the model's, 1)")
    p.add_argument("--gpu-memory-utilization", type=fraction, default=0.9, help="fraction of GPU memory the engine may use (default 0.9)")
    p.add_argument("--block-size", type=positive_int, default=16, help="tokens per KV-cache block (default 16)")
    p.add_argument("--max-model-len", type=positive_int, default=0, help="longest sequence served (default: the model's)")
    p.add_argument("--max-num-seqs", type=positive_int, default=256, help="sequences per iteration (default 256)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=0,
                   help="tokens per iteration (default 8192; without chunked prefill max(max_model_len, 2048))")
    p.add_argument("--data-parallel-size", "-dp", type=positive_int, default=1,
                   help="engine replicas (with expert parallelism: attention data-parallel ranks whose tokens meet "
                        "in every MoE layer)")
    p.add_argument("--pipeline-parallel-size", "-pp", type=positive_int, default=1,
                   help="pipeline stages the layers are split over, each -tp GPUs; up to that many batches in "
                        "flight (vLLM's batch queue; default 1)")
    p.add_argument("--pp-max-micro-batch-size", type=nonnegative_int, default=0,
                   help="with pipeline parallelism: most sequences in one batch (SGLang's flag; default 0: vLLM's "
                        "scheduler, a batch takes every request it can)")
    p.add_argument("--expert-parallel-size", "-ep", type=positive_int, default=1,
                   help="MoE layers' experts spread over this many GPU groups; tensor x data parallel GPUs = EP x the "
                        "experts' own TP (default 1: experts sharded by TP)")
    p.add_argument("--moe-tensor-parallel-size", type=nonnegative_int, default=0,
                   help="each expert's tensor-parallel split (TensorRT-LLM's name); tensor x data parallel without "
                        "expert parallelism makes the MoE layers tensor-parallel over every attention data-parallel "
                        "rank, which then step together (SGLang's --enable-dp-attention; default 0: GPUs / EP)")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="vLLM's flag: expert parallelism over every GPU (EP = tensor x data parallel)")
    p.add_argument("--expert-load-imbalance", type=ratio, default=1.0,
                   help="with expert parallelism: the most loaded GPU's routed tokens over the mean, which "
                        "sets every MoE layer's pace (default 1: uniform routing)")
    p.add_argument("--expert-routing", choices=EXPERT_ROUTINGS, default="random",
                   help="with expert parallelism: balanced (every GPU its mean share of the tokens) or random "
                        "(each token's experts drawn uniformly: the busiest GPU sets the step, well over the mean "
                        "at small batches); --expert-load-imbalance skews either (default balanced)")
    p.add_argument("--num-redundant-experts", type=nonnegative_int, default=0,
                   help="with expert parallelism: expert replicas (EPLB) spread over the EP GPUs, which hold "
                        "(experts + N) / EP each (default 0)")
    p.add_argument("--speculative-config", metavar="JSON", default=None,
                   help="vLLM's speculative decoding config, e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": 1, "
                        "\"synthetic_acceptance_rates\": [0.81]}' (methods mtp, eagle, eagle3, draft_model with "
                        "\"model\", ngram; the acceptance, which simllm cannot derive, as synthetic_acceptance_rates "
                        "(per position, unconditional) or synthetic_acceptance_length): drafts verified every step, "
                        "the drafter priced, its weights and KV in memory")
    p.add_argument("--framework", default="vllm", metavar="{" + ",".join(FRAMEWORKS) + "}|PATH",
                   help="serving framework profile (configs/frameworks/NAME.yaml, or a profile YAML): its "
                        "per-request frontend time, per-iteration CPU overhead and per-kernel launch gap "
                        "(default vllm)")


def add_workload_args(p, load=True):
    """The workload flags (vllm bench serve names); ``load`` False leaves out the load itself
    (--num-prompts, --request-rate, --max-concurrency), which a load test sets per point."""
    p.add_argument("workload_pos", nargs="?", metavar="WORKLOAD", help="workload preset, YAML or trace (same as --workload)")
    p.add_argument("--workload", help="workload preset, YAML, or trace CSV/JSONL (flags below override it)")
    g = p.add_argument_group("workload (vllm bench serve names)")
    if load:
        g.add_argument("--num-prompts", type=positive_int, help="requests to send (default 1000)")
        g.add_argument("--request-rate", type=rate, help="requests per second; inf sends all at t=0 (default inf)")
        g.add_argument("--max-concurrency", type=positive_int, help="closed loop: concurrent clients")
        g.add_argument("--ramp-up-strategy", choices=RAMP_UP_STRATEGIES,
                       help="ramp the request rate from --ramp-up-start-rps to --ramp-up-end-rps over the requests "
                            "(vllm bench serve's; no --request-rate with it)")
        g.add_argument("--ramp-up-start-rps", type=positive_float, help="ramp-up: the first request's rate")
        g.add_argument("--ramp-up-end-rps", type=positive_float, help="ramp-up: the last request's rate")
    else:
        p.set_defaults(num_prompts=None, request_rate=None, max_concurrency=None, ramp_up_strategy=None,
                       ramp_up_start_rps=None, ramp_up_end_rps=None)
    g.add_argument("--burstiness", type=positive_float, help="gamma shape of inter-arrival times (1 = Poisson)")
    g.add_argument("--arrival", choices=ARRIVALS, help="inter-arrival distribution (default poisson)")
    g.add_argument("--input-len", type=positive_int, help="prompt tokens (default 1024)")
    g.add_argument("--output-len", type=positive_int, help="output tokens (default 128)")
    g.add_argument("--random-range-ratio", type=unit, help="lengths uniform in len*(1-r)..len*(1+r)")
    g.add_argument("--seed", type=nonnegative_int, help="random seed (default 0)")
    g.add_argument("--prefix-len", type=nonnegative_int, help="shared prompt prefix tokens")
    g.add_argument("--prefix-hit-ratio", type=unit, help="fraction of requests whose prefix is cached")
    g.add_argument("--timeout", type=positive_float, help="client timeout in seconds (unfinished = error)")
    g.add_argument("--client-jitter-ms", type=nonneg_float,
                   help="closed loop: mean of each client's exponential delay before a send, which keeps identical "
                        f"clients from staying in step (default {DEFAULT_CLIENT_JITTER_MS:g}; 0 turns it off)")
    g.add_argument("--warmup-requests", type=nonnegative_int,
                   help="leave the first N requests sent out of the summary (they stay in --save-detailed, marked)")


def add_run_args(p, load=True):
    """The workload, engine and scheduler flags of run (loadtest, diagnose, compare, optimize)."""
    add_workload_args(p, load)
    add_engine_args(p)
    add_scheduler_args(p)


def add_scheduler_args(p):
    eng = p.add_argument_group("engine")
    eng.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                     help="vLLM v1 chunked prefill (default on); --no-enable-chunked-prefill for v0 scheduling")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    eng.add_argument("--router", choices=ROUTERS, default="round_robin", help="how replicas share requests")
    eng.add_argument("--batching", choices=BATCHING, default="continuous", help="batching policy")
    eng.add_argument("--pad-prompts", action="store_true", help="static/dynamic: pad prompts to the longest")
    eng.add_argument("--batch-window-ms", type=nonneg_float, default=10.0, help="dynamic: longest wait for a batch")
    eng.add_argument("--batch-max", type=positive_int, default=0, help="dynamic: batch size that starts a batch")


def regex(text):
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from None


def add_measured(p):
    p.add_argument("measured", nargs="+", metavar="MEASURED",
                   help="measured results: silicon_sample.csv-style CSV, or vllm bench serve, GuideLLM, EvalScope, "
                        "genai-perf or AIPerf JSON")
    p.add_argument("--model-map", nargs="+", metavar="NAME=PRESET", help="map measured model names to presets")
    p.add_argument("--hardware-map", nargs="+", metavar="NAME=PRESET", help="map measured systems to presets")
    p.add_argument("--tensor-parallel-size", "-tp", type=positive_int, default=1,
                   help="TP of measurements that do not record it (JSON results)")
    p.add_argument("--dtype", default="", help="precision of measurements that do not record it (JSON results)")
    p.add_argument("--num-prompts", type=positive_int, default=0,
                   help="requests simulated per point (default: the measured number, else 10 x concurrency)")
    p.add_argument("--min-length-ratio", type=unit, default=None,
                   help="the client drew lengths uniformly from RATIO x to 1 x the stated ones (benchmark_serving "
                        "--random-range-ratio); default: 0.8 for CSV rows (InferenceMAX), 1 for SGLang's and JSON")
    p.add_argument("--filter", action="append", type=regex, default=[], metavar="REGEX",
                   help="only measurements whose 'model system backend' matches (repeat: all must match)")
    p.add_argument("--client-jitter-ms", type=nonneg_float, default=None,
                   help="closed loops: mean client delay before each send (default: run's default; 0 = clients in step)")


def measured_points(args, hardware=""):
    measured = load_measurements(args.measured, hardware=hardware, tp=args.tensor_parallel_size,
                                 precision=args.dtype)
    for pattern in args.filter:
        measured = [m for m in measured if pattern.search(f"{m.model} {m.hardware} {m.backend}")]
    points = accuracy.resolve(measured, accuracy.parse_map(args.model_map, "--model-map"),
                              accuracy.parse_map(args.hardware_map, "--hardware-map"))
    return points, accuracy.BenchmarkShape(min_length_ratio=args.min_length_ratio, client_jitter_ms=args.client_jitter_ms)


def target(args):
    for flag, pos in (("model", "model_pos"), ("hardware", "hardware_pos")):
        a, b = getattr(args, flag), getattr(args, pos)
        if a and b and a != b:
            raise ConfigError(f"given twice ({b!r} and --{flag} {a!r}); give one", source="command line", key=f"--{flag}")
    model = load_model(args.model or args.model_pos or DEFAULT_MODEL)
    hardware = load_hardware(args.hardware or args.hardware_pos or DEFAULT_HARDWARE)
    return model, hardware


#: The ServingConfig fields of add_engine_args (estimate, run and the rest) and those
#: add_scheduler_args adds (the commands that simulate a workload).
ENGINE_FIELDS = ("tensor_parallel_size", "dtype", "kv_cache_dtype", "kv_compression_ratio", "gpu_memory_utilization",
                 "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "data_parallel_size",
                 "pipeline_parallel_size", "pp_max_micro_batch_size",
                 "expert_parallel_size", "moe_tensor_parallel_size", "enable_expert_parallel", "expert_load_imbalance",
                 "expert_routing", "num_redundant_experts", "framework", "speculative_config")
SCHEDULER_FIELDS = ("enable_chunked_prefill", "enable_prefix_caching", "router", "batching",
                    "pad_prompts", "batch_window_ms", "batch_max")


def serving(args):
    """The engine settings of add_engine_args' flags (their dests are ServingConfig's field names)."""
    return ServingConfig(**{name: getattr(args, name) for name in ENGINE_FIELDS})


def run_serving(args):
    """The engine settings of run, loadtest and diagnose (add_run_args' flags)."""
    return ServingConfig(**{name: getattr(args, name) for name in ENGINE_FIELDS + SCHEDULER_FIELDS})


def workload(args):
    w = load_workload(args.workload or args.workload_pos) if (args.workload or args.workload_pos) else Workload()
    changes = {}
    for flag in ("num_prompts", "request_rate", "burstiness", "arrival", "max_concurrency", "seed", "prefix_len",
                 "prefix_hit_ratio", "client_jitter_ms", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
                 "warmup_requests"):
        value = getattr(args, flag)
        if value is not None:
            changes[flag] = value
    if args.burstiness is not None and args.arrival is None and w.arrival != "constant":
        changes["arrival"] = "gamma" if args.burstiness != 1.0 else "poisson"
    if args.timeout is not None:
        changes["timeout_s"] = args.timeout
    ratio = args.random_range_ratio or 0.0
    lengths = args.input_len is not None or args.output_len is not None or ratio > 0
    if lengths and w.trace:
        raise ConfigError("no --input-len/--output-len/--random-range-ratio with a trace (its lengths are replayed)",
                          source="command line", key="--workload", value=w.trace)
    if args.input_len is not None or ratio > 0:
        changes["input_len"] = random_range(int(args.input_len or w.input_len.mean_value), ratio)
    if args.output_len is not None or ratio > 0:
        changes["output_len"] = random_range(int(args.output_len or w.output_len.mean_value), ratio)
    if not changes:
        return w
    try:
        return replace(w, **changes)
    except ConfigError as exc:  # a cross-field check (ramp-up, warm-up): name the flag when one set it
        field = (exc.key or "").removeprefix("workload.")
        ramp = field.startswith("ramp_up") and any(k.startswith("ramp_up") for k in changes)
        if field not in changes and not ramp:
            raise
        flag = "--timeout" if field == "timeout_s" else "--" + field.replace("_", "-")
        raise ConfigError(exc.expected, source="command line", key=flag, value=exc.value) from None


def percentiles(text):
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or not all(0 <= v <= 100 for v in values):
        raise ConfigError("comma-separated numbers in [0, 100]", source="command line", key="--metric-percentiles",
                          value=text)
    return values


def add_executor_args(p, chunks=False):
    """Where the simulations of a many-configuration command run (the one runner,
    :mod:`simllm.sim.runner`): --executor, --scheduler, --workers (and --chunk-size)."""
    g = p.add_argument_group("execution")
    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="where simulations run (default threads, or dask with --scheduler)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address (default: a local cluster)")
    g.add_argument("--workers", type=positive_int, help="threads, processes or local dask workers (default: all cores)")
    if chunks:
        g.add_argument("--chunk-size", type=positive_int, help="configurations per task (default: ~50 ms of work)")


def executor(args):
    """``{"executor", "workers", "scheduler"}`` from :func:`add_executor_args`' flags: --scheduler
    alone means dask; with another executor it is an error."""
    if args.scheduler and args.executor not in (None, "dask"):
        raise ConfigError("dask (--scheduler is a dask scheduler's address)", source="command line",
                          key="--executor", value=args.executor)
    kind = args.executor or ("dask" if args.scheduler else None)
    return {"executor": kind, "workers": args.workers, "scheduler": args.scheduler}


def add_band_args(g):
    """The error-band flags of run, compare and optimize (output group ``g``)."""
    g.add_argument("--no-error-band", action="store_true",
                   help="leave out the error bands (from the validation errors of the nearest calibrated cases) and "
                        "the out-of-calibration warnings")
    g.add_argument("--accuracy-record", metavar="FILE.json",
                   help="the accuracy record the bands come from (default: the shipped configs/accuracy.json; "
                        "simllm validate --write-accuracy makes one)")


def band_record(args):
    """The accuracy record for --accuracy-record (the shipped one by default), or None with
    --no-error-band."""
    return None if args.no_error_band else load_record(args.accuracy_record)


def bands_of(summary, framework, record):
    """``({key: Band}, domain reasons)`` of a summary's headline figures; nothing when
    ``record`` is None (--no-error-band), the summary is None (a configuration that did not run)
    or a disaggregated run's (the bands are calibrated on aggregated runs)."""
    if record is None or summary is None or "decode_pool" in summary:
        return {}, ()
    return summary_bands(summary, framework, record)


def band_json(bands, reasons):
    """The JSON keys a result gains: ``error_band`` ({key: [lo, hi]}), ``error_band_coverage``
    and ``calibration_warnings``."""
    coverage = next(iter(bands.values())).coverage if bands else None
    return {"error_band": {key: [b.lo, b.hi] for key, b in bands.items()}, "error_band_coverage": coverage,
            "calibration_warnings": list(reasons)}


def add_disagg_args(p, title="disaggregated prefill/decode (any of these makes the run disaggregated)"):
    """The disaggregated prefill/decode flags of ``run`` (and ``optimize``'s base for its
    disaggregated grid)."""
    pd = p.add_argument_group(title)
    pd.add_argument("--prefill-instances", type=positive_int, metavar="N",
                    help="prefill engine instances (each -tp x -dp GPUs unless --prefill-config says otherwise)")
    pd.add_argument("--decode-instances", type=positive_int, metavar="N", help="decode engine instances (default 1)")
    pd.add_argument("--prefill-config", metavar="JSON",
                    help="the prefill pool's engine arguments over the flags above, e.g. "
                         "'{\"tensor_parallel_size\": 4, \"gpu\": \"b200\"}'")
    pd.add_argument("--decode-config", metavar="JSON", help="the decode pool's, as --prefill-config")
    pd.add_argument("--kv-transfer-config", metavar="JSON",
                    help="the KV cache's link: '{\"kv_transfer_bandwidth_gbps\": 50, \"kv_transfer_latency_us\": 10, "
                         "\"first_token\": \"prefill\"}' (vLLM's kv_connector / kv_role keys accepted); default: "
                         "NVLink within one node, else the GPUs' network NICs; the first token from the decode pool "
                         "for vLLM, from the prefill pool for SGLang and TensorRT-LLM")


def disagg_config(args):
    """The :class:`DisaggConfig` of :func:`add_disagg_args`' flags (None when none is given)."""
    given = (args.prefill_instances, args.decode_instances, args.prefill_config, args.decode_config,
             args.kv_transfer_config)
    if all(v is None for v in given):
        return None
    prefill, prefill_gpu = parse_pool_config(args.prefill_config, "prefill")
    decode, decode_gpu = parse_pool_config(args.decode_config, "decode")
    return DisaggConfig(prefill_instances=args.prefill_instances or 1, decode_instances=args.decode_instances or 1,
                        prefill=prefill, decode=decode, prefill_gpu=prefill_gpu, decode_gpu=decode_gpu,
                        **parse_transfer_config(args.kv_transfer_config))
