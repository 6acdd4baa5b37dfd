"""The ``simllm`` command line: a thin layer over the public functions. Bad input exits with
status 2 and one line on stderr, never a traceback."""
import argparse
import logging
import math
import re
import sys
from dataclasses import replace

from simllm import exports, presets, report
from simllm.errors import ConfigError
from simllm.diagnose import (CHANGES, DEFAULT_CHANGES, diagnose, diagnosis_to_dict, format_diagnosis,
                             format_run_section, what_if)
from simllm.estimate import estimate
from simllm.fileio import write_output
from simllm.calibrate import DEFAULT_FACTORS
from simllm.hardware import FACTOR_KEYS, load_hardware
from simllm.model import load_model
from simllm.progress import Progress
from simllm.serving import BATCHING, FRAMEWORKS, ROUTERS, ServingConfig
from simllm.simulate import simulate
from simllm.workload import ARRIVALS, Workload, load_workload, random_range

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: command line: {message}\n")


PROGRESS_MIN_REQUESTS = 1_000_000  # simllm run shows a progress bar from this many requests


def _positive_int(text):
    return int(_number(text, lambda v: math.isfinite(v) and v >= 1 and v == int(v), "a positive integer"))


def _fraction(text):
    return _number(text, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")


def _ratio(text):
    return _number(text, lambda v: v >= 1.0, "a number >= 1")


def _number(text, ok, expected):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
    return value


def _rate(text):
    return _number(text, lambda v: v > 0, "a positive number of requests per second, or inf")


def _positive_float(text):
    return _number(text, lambda v: v > 0 and math.isfinite(v), "a positive number")


def _nonneg_float(text):
    return _number(text, lambda v: v >= 0 and math.isfinite(v), "a number >= 0")


def _unit(text):
    return _number(text, lambda v: 0 <= v <= 1, "a number in [0, 1]")


def _nonneg_int(text):
    return int(_number(text, lambda v: math.isfinite(v) and v >= 0 and v == int(v), "an integer >= 0"))


def _add_target(p):
    p.add_argument("model_pos", nargs="?", metavar="MODEL", help="model preset or path (same as --model)")
    p.add_argument("hardware_pos", nargs="?", metavar="HARDWARE", help="hardware preset or path (same as --hardware)")
    p.add_argument("--model", help=f"model preset name, simllm YAML, or HuggingFace config.json (default {DEFAULT_MODEL})")
    p.add_argument("--hardware", help=f"hardware preset name or YAML (default {DEFAULT_HARDWARE})")


def _add_engine_args(p):
    p.add_argument("--tensor-parallel-size", "-tp", type=_positive_int, default=1, help="GPUs sharing each layer (default 1)")
    p.add_argument("--dtype", default="auto", help="weight dtype: auto, fp16, bf16, fp32, fp8, int8, int4 (default auto)")
    p.add_argument("--kv-cache-dtype", default="auto", help="KV cache dtype: auto, fp16, bf16, fp8, int8, int4")
    p.add_argument("--kv-compression-ratio", type=_ratio, default=0.0, help="KV bytes stored = raw / ratio (default: the model's, 1)")
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9, help="fraction of GPU memory the engine may use (default 0.9)")
    p.add_argument("--block-size", type=_positive_int, default=16, help="tokens per KV-cache block (default 16)")
    p.add_argument("--max-model-len", type=_positive_int, default=0, help="longest sequence served (default: the model's)")
    p.add_argument("--max-num-seqs", type=_positive_int, default=256, help="sequences per iteration (default 256)")
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=0,
                   help="tokens per iteration (default 8192; without chunked prefill max(max_model_len, 2048))")
    p.add_argument("--framework", choices=FRAMEWORKS, default="vllm",
                   help="serving framework whose calibrated factors to apply, where the hardware profile has them")


def _add_workload_args(p, load=True):
    """The workload flags (vllm bench serve names); ``load`` False leaves out the load itself
    (--num-prompts, --request-rate, --max-concurrency), which a load test sets per point."""
    p.add_argument("workload_pos", nargs="?", metavar="WORKLOAD", help="workload preset, YAML or trace (same as --workload)")
    p.add_argument("--workload", help="workload preset, YAML, or trace CSV/JSONL (flags below override it)")
    g = p.add_argument_group("workload (vllm bench serve names)")
    if load:
        g.add_argument("--num-prompts", type=_positive_int, help="requests to send (default 1000)")
        g.add_argument("--request-rate", type=_rate, help="requests per second; inf sends all at t=0 (default inf)")
        g.add_argument("--max-concurrency", type=_positive_int, help="closed loop: concurrent clients")
    else:
        p.set_defaults(num_prompts=None, request_rate=None, max_concurrency=None)
    g.add_argument("--burstiness", type=_positive_float, help="gamma shape of inter-arrival times (1 = Poisson)")
    g.add_argument("--arrival", choices=ARRIVALS, help="inter-arrival distribution (default poisson)")
    g.add_argument("--input-len", type=_positive_int, help="prompt tokens (default 1024)")
    g.add_argument("--output-len", type=_positive_int, help="output tokens (default 128)")
    g.add_argument("--random-range-ratio", type=_unit, help="lengths uniform in len*(1-r)..len*(1+r)")
    g.add_argument("--seed", type=_nonneg_int, help="random seed (default 0)")
    g.add_argument("--prefix-len", type=_nonneg_int, help="shared prompt prefix tokens")
    g.add_argument("--prefix-hit-ratio", type=_unit, help="fraction of requests whose prefix is cached")
    g.add_argument("--timeout", type=_positive_float, help="client timeout in seconds (unfinished = error)")


def _add_run_args(p, load=True):
    """The workload, engine and scheduler flags of run (loadtest, diagnose, compare, optimize)."""
    _add_workload_args(p, load)
    _add_engine_args(p)
    _add_scheduler_args(p)


def _add_scheduler_args(p):
    eng = p.add_argument_group("engine")
    eng.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                     help="vLLM v1 chunked prefill (default on); --no-enable-chunked-prefill for v0 scheduling")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    eng.add_argument("--data-parallel-size", "-dp", type=_positive_int, default=1, help="engine replicas")
    eng.add_argument("--router", choices=ROUTERS, default="round_robin", help="how replicas share requests")
    eng.add_argument("--batching", choices=BATCHING, default="continuous", help="batching policy")
    eng.add_argument("--pad-prompts", action="store_true", help="static/dynamic: pad prompts to the longest")
    eng.add_argument("--batch-window-ms", type=_nonneg_float, default=10.0, help="dynamic: longest wait for a batch")
    eng.add_argument("--batch-max", type=_positive_int, default=0, help="dynamic: batch size that starts a batch")


def build_parser():
    parser = _Parser(prog="simllm", description="Predict LLM serving performance on given hardware without running it.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    est = sub.add_parser("estimate", help="per-operator cost of one prefill and one decode step, memory, ideal TTFT/TPOT")
    _add_target(est)
    _add_engine_args(est)
    est.add_argument("--batch-size", type=_positive_int, default=1, help="sequences per step (default 1)")
    est.add_argument("--input-len", type=_positive_int, default=1024, help="prompt tokens per request (default 1024)")
    est.add_argument("--output-len", type=_positive_int, default=128, help="output tokens per request (default 128)")
    est.add_argument("--format", choices=("table", "json"), default="table")

    run = sub.add_parser("run", help="simulate serving a workload: TTFT, TPOT, ITL, latency, throughput, utilisation")
    _add_target(run)
    _add_run_args(run)
    out = run.add_argument_group("output")
    out.add_argument("--format", choices=("table", "json"), default="table")
    out.add_argument("--metric-percentiles", default="50,90,95,99", help="comma-separated percentiles (default 50,90,95,99)")
    out.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for request_goodput, e.g. ttft:500 tpot:50")
    out.add_argument("--output", "-o", metavar="FILE",
                     help="also write the result to FILE: .json (vllm bench serve --save-result keys, plus "
                          "simllm's), .csv or .parquet (the summary as one row); see --export-format")
    out.add_argument("--export-format", choices=exports.FORMATS,
                     help="what --output holds: for .json vllm (default) or guidellm (a GuideLLM benchmarks.json); "
                          "for .csv/.parquet summary (default) or requests (one row per request)")
    out.add_argument("--plot", metavar="DIR",
                     help="write TTFT/TPOT CDFs and KV-cache/throughput-over-time PNGs here (needs simllm[plot])")
    out.add_argument("--save-detailed", help="per-request rows to FILE.csv or FILE.parquet")
    out.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    out.add_argument("--quiet", "-q", action="store_true", help="print one summary line")
    out.add_argument("--no-fast-forward", action="store_true", help="simulate every iteration one by one (checks)")

    val = sub.add_parser("validate", help="simulate measured serving results and report the prediction error")
    _add_measured(val)
    val.add_argument("--hardware", default="", help="hardware of measurements that do not name one (JSON results)")
    val.add_argument("--factors-from", metavar="PROFILE",
                     help="apply this calibrated profile's factors to every point's hardware (cross-system test)")
    val.add_argument("--plot", metavar="DIR", help="write predicted-vs-measured PNGs here (needs simllm[plot])")
    val.add_argument("--format", choices=("table", "json"), default="table")

    cal = sub.add_parser("calibrate", help="fit a hardware profile's efficiency factors to measured results")
    _add_measured(cal)
    cal.add_argument("--hardware", required=True, metavar="BASE",
                     help="the profile to calibrate (preset or YAML); measurements of other GPUs are left out")
    cal.add_argument("--output", "-o", required=True, help="calibrated hardware YAML to write")
    cal.add_argument("--framework", choices=FRAMEWORKS, default="vllm",
                     help="fit this framework's measurements; vllm sets the profile's factors, the others "
                          "its frameworks: entry (default vllm)")
    cal.add_argument("--fit", nargs="+", metavar="FACTOR", default=list(DEFAULT_FACTORS),
                     help=f"factors to fit (default all: {', '.join(DEFAULT_FACTORS)})")
    cal.add_argument("--max-iterations", type=_positive_int, default=12, help="Levenberg-Marquardt iterations")
    cal.add_argument("--format", choices=("table", "json"), default="table")

    prof = sub.add_parser("profile", help="time GEMMs, attention and copies on this machine's GPU (needs "
                                          "simllm[profile]) and write a calibrated hardware profile")
    prof.add_argument("--hardware", required=True, metavar="BASE",
                      help="datasheet profile of the GPU (preset or YAML): peaks kept, efficiencies measured")
    prof.add_argument("--output", "-o", required=True, help="hardware YAML to write")
    prof.add_argument("--raw-output", help="raw measurements (.json or .csv; default next to --output)")
    prof.add_argument("--device", default="cuda", help="torch device: cuda, cuda:N or cpu (default cuda)")
    prof.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16", help="GEMM dtype (default bf16)")
    prof.add_argument("--size", choices=("full", "tiny"), default="full", help="shape grid (tiny: seconds, for tests)")

    lt = sub.add_parser("loadtest", help="EvalScope-style load test: one simulation per concurrency or request rate, "
                                         "a table, and the concurrency past which throughput stops rising")
    _add_target(lt)
    _add_run_args(lt, load=False)
    pts = lt.add_argument_group("load points (exactly one of --parallel, --concurrency-range, --request-rate)")
    pts.add_argument("--parallel", nargs="+", type=_positive_int, metavar="N",
                     help="closed-loop concurrencies, e.g. 1 10 50 100 200 (evalscope perf --parallel)")
    pts.add_argument("--number", nargs="+", type=_positive_int, metavar="N",
                     help="requests per point, paired element by element with --parallel (evalscope perf --number; "
                          "default 10 per client); with the other modes also one value for all points")
    pts.add_argument("--concurrency-range", metavar="START:STOP:STEP",
                     help="concurrencies START..STOP: STEP xF multiplies (1:256:x2), +N adds (16:128:+16)")
    pts.add_argument("--request-rate", dest="request_rates", nargs="+", type=_rate, metavar="RPS",
                     help="open-loop request rates in req/s (default --number: the workload's num_prompts, 1000)")
    pts.add_argument("--min-gain", type=_unit, default=0.10,
                     help="throughput gain per step below which it counts as saturated (default 0.10 = 10%%)")
    pts.add_argument("--slo-p99-latency-ms", type=_positive_float, metavar="MS",
                     help="recommend only points whose P99 end-to-end latency is within this")
    lout = lt.add_argument_group("output")
    lout.add_argument("--format", choices=("table", "json", "csv"), default="table")
    lout.add_argument("--output", "-o", help="also write the result to this file (.csv: CSV, else JSON)")
    lout.add_argument("--plot", metavar="DIR", help="write throughput and latency vs load PNGs here (simllm[plot])")
    lout.add_argument("--quiet", "-q", action="store_true", help="no progress bar; print the recommendation alone")
    lout.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))

    dia = sub.add_parser("diagnose", help="what limits a simulated run (prefill, decode bandwidth, KV cache, "
                                          "concurrency), with the numbers, and what one change would do")
    _add_target(dia)
    _add_run_args(dia)
    dia.add_argument("--what-if", nargs="+", metavar="CHANGE", choices=list(CHANGES),
                     help=f"changes to re-simulate one at a time (default all: {', '.join(CHANGES)})")
    dia.add_argument("--no-what-if", action="store_true", help="only the diagnosis")
    dia.add_argument("--format", choices=("table", "json"), default="table")

    cmpp = sub.add_parser("compare", help="one workload on several hardware presets and/or models side by side, "
                                          "with each metric's ratio to the first column")
    cmpp.add_argument("--model", nargs="+", default=[DEFAULT_MODEL], metavar="MODEL",
                      help=f"model presets, simllm YAML or config.json files (default {DEFAULT_MODEL})")
    cmpp.add_argument("--hardware", nargs="+", default=[DEFAULT_HARDWARE], metavar="HARDWARE",
                      help=f"hardware presets or YAML files (default {DEFAULT_HARDWARE}); the columns are every "
                           "model on the first hardware, then on the next")
    _add_run_args(cmpp)
    cout = cmpp.add_argument_group("output")
    cout.add_argument("--metrics", nargs="+", metavar="KEY",
                      help="rows: summary keys (default: TTFT/TPOT/E2E mean and P99, request/s, output tok/s, "
                           "output tok/s per GPU, MFU, MBU, KV usage, error rate)")
    cout.add_argument("--metric-percentiles", default="50,90,95,99", help="comma-separated percentiles (default 50,90,95,99)")
    cout.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for request_goodput, e.g. ttft:500 tpot:50")
    cout.add_argument("--format", choices=("table", "json", "csv"), default="table")
    cout.add_argument("--output", "-o", metavar="FILE", help="also write the comparison to FILE.json, .csv or .txt")
    cout.add_argument("--plot", metavar="DIR",
                      help="write bar charts of output tok/s per GPU, mean TTFT and mean TPOT here (needs simllm[plot])")

    fr = sub.add_parser("frontier", help="the Pareto frontier of a results table: output tok/s per GPU vs "
                                         "per-user speed (or vs P99 TTFT)")
    fr.add_argument("results", metavar="RESULTS", help="a CSV with a header (a sweep's table) or a JSON list of rows "
                                                      "with metric columns")
    fr.add_argument("--x", default="output_throughput_per_user",
                    help="column on the x axis (default output_throughput_per_user = 1000 / mean_tpot_ms; "
                         "p99_ttft_ms for the TTFT frontier); *_ms columns, error_rate and cost are minimised, "
                         "others maximised")
    fr.add_argument("--y", default="output_throughput_per_gpu",
                    help="column on the y axis (default output_throughput_per_gpu = output_throughput / GPUs)")
    fr.add_argument("--format", choices=("table", "json"), default="table")
    fr.add_argument("--plot", metavar="DIR", help="write the frontier PNG here (needs simllm[plot])")

    opt = sub.add_parser("optimize", help="search a grid of engine settings and hardware for the configuration that "
                                          "meets SLOs with the most goodput per GPU (or the lowest cost per token)")
    opt.add_argument("--model", default=DEFAULT_MODEL,
                     help=f"model preset name, simllm YAML, or HuggingFace config.json (default {DEFAULT_MODEL})")
    opt.add_argument("--hardware", nargs="+", default=[DEFAULT_HARDWARE], metavar="HARDWARE",
                     help=f"hardware presets or YAML files (default {DEFAULT_HARDWARE}); several make a hardware axis "
                          "unless --over has hardware=...")
    _add_run_args(opt)
    srch = opt.add_argument_group("search")
    srch.add_argument("--slo", nargs="+", required=True, metavar="SLO",
                      help='constraints, e.g. "ttft_p99<=2000,tpot_p99<=50": METRIC<=|<|>=|>NUMBER, METRIC one of '
                           "ttft|tpot|itl|e2el_mean|median|pNN or a summary key (error_rate<=1%%)")
    srch.add_argument("--over", nargs="+", metavar="NAME=V1,V2",
                      help="the grid (cartesian product): tp=1,2,4 replicas=1,2 max_num_seqs=64,128,256 "
                           "max_num_batched_tokens=... dtype=bf16,fp8 hardware=h100-sxm,h200-sxm, or any engine "
                           "setting by its ServingConfig name")
    srch.add_argument("--objective", choices=("goodput_per_gpu", "cost_per_token"), default="goodput_per_gpu",
                      help="highest request goodput per GPU (default) or lowest USD per million output tokens")
    srch.add_argument("--price", nargs="+", metavar="HARDWARE=USD",
                      help="USD per GPU-hour per hardware preset (needed by --objective cost_per_token), "
                           "e.g. h100-sxm=2.5")
    srch.add_argument("--top", type=_positive_int, default=5, help="feasible configurations listed (default 5)")
    oout = opt.add_argument_group("output")
    oout.add_argument("--format", choices=("table", "json"), default="table")
    oout.add_argument("--output", "-o", metavar="FILE", help="also write the result as JSON to FILE")
    oout.add_argument("--plot", metavar="DIR", help="write the frontier PNGs (per-user speed and P99 TTFT) here, the "
                                                    "answer marked (needs simllm[plot])")
    oout.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    swp = sub.add_parser("sweep", help="simulate a grid or Monte Carlo sweep of configurations in parallel: one "
                                       "table, P5-P95 bands over seeds, resumable output")
    swp.add_argument("spec", metavar="SPEC.yaml",
                     help="sweep spec: base (model, hardware, serving, workload), grid, samples, num_samples, "
                          "seeds, slo, output")
    swp.add_argument("--executor", choices=("threads", "processes", "dask"), default=None,
                     help="where simulations run (default threads, or dask with --scheduler)")
    swp.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address (default: a local cluster)")
    swp.add_argument("--workers", type=_positive_int, help="threads, processes or local dask workers (default: all cores)")
    swp.add_argument("--chunk-size", type=_positive_int, help="configurations per task (default: ~50 ms of work)")
    swp.add_argument("--output", "-o", metavar="FILE",
                     help="results .csv or .parquet (default: the spec's output:); journaled as chunks finish, "
                          "so rerunning the same command resumes an interrupted sweep")
    swp.add_argument("--plot", metavar="DIR", help="PNGs of key metrics vs the first numeric grid path (simllm[plot])")
    swp.add_argument("--format", choices=("table", "json", "csv"), default="table")
    swp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    swp.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))

    pre = sub.add_parser("presets", help="list the shipped model, hardware and workload presets")
    pre.add_argument("kind", nargs="?", choices=presets.KINDS)
    return parser


def _regex(text):
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from None


def _add_measured(p):
    p.add_argument("measured", nargs="+", metavar="MEASURED",
                   help="measured results: silicon_sample.csv-style CSV, or vllm bench serve, GuideLLM, EvalScope, "
                        "genai-perf or AIPerf JSON")
    p.add_argument("--model-map", nargs="+", metavar="NAME=PRESET", help="map measured model names to presets")
    p.add_argument("--hardware-map", nargs="+", metavar="NAME=PRESET", help="map measured systems to presets")
    p.add_argument("--tensor-parallel-size", "-tp", type=_positive_int, default=1,
                   help="TP of measurements that do not record it (JSON results)")
    p.add_argument("--dtype", default="", help="precision of measurements that do not record it (JSON results)")
    p.add_argument("--num-prompts", type=_positive_int, default=0,
                   help="requests simulated per point (default: the measured number, else 10 x concurrency)")
    p.add_argument("--min-length-ratio", type=_unit, default=None,
                   help="the client drew lengths uniformly from RATIO x to 1 x the stated ones (benchmark_serving "
                        "--random-range-ratio); default: 0.8 for CSV rows (InferenceMAX), 1 for SGLang's and JSON")
    p.add_argument("--filter", action="append", type=_regex, default=[], metavar="REGEX",
                   help="only measurements whose 'model system backend' matches (repeat: all must match)")


def _points(args, hardware=""):
    from simllm import accuracy  # noqa: PLC0415 - only the measurement commands need these
    from simllm.measurements import load_measurements  # noqa: PLC0415

    measured = load_measurements(args.measured, hardware=hardware, tp=args.tensor_parallel_size,
                                 precision=args.dtype)
    for pattern in args.filter:
        measured = [m for m in measured if pattern.search(f"{m.model} {m.hardware} {m.backend}")]
    points = accuracy.resolve(measured, accuracy.parse_map(args.model_map, "--model-map"),
                              accuracy.parse_map(args.hardware_map, "--hardware-map"))
    return points, accuracy.BenchmarkShape(min_length_ratio=args.min_length_ratio)


def _target(args):
    for flag, pos in (("model", "model_pos"), ("hardware", "hardware_pos")):
        a, b = getattr(args, flag), getattr(args, pos)
        if a and b and a != b:
            raise ConfigError(f"given twice ({b!r} and --{flag} {a!r}); give one", source="command line", key=f"--{flag}")
    model = load_model(args.model or args.model_pos or DEFAULT_MODEL)
    hardware = load_hardware(args.hardware or args.hardware_pos or DEFAULT_HARDWARE)
    return model, hardware


def _serving(args):
    return ServingConfig(
        tensor_parallel_size=args.tensor_parallel_size,
        dtype=args.dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        kv_compression_ratio=args.kv_compression_ratio,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        framework=args.framework,
    )


def _run_serving(args):
    """The engine settings of run, loadtest and diagnose."""
    return replace(
        _serving(args),
        enable_chunked_prefill=args.enable_chunked_prefill,
        enable_prefix_caching=args.enable_prefix_caching,
        data_parallel_size=args.data_parallel_size,
        router=args.router,
        batching=args.batching,
        pad_prompts=args.pad_prompts,
        batch_window_ms=args.batch_window_ms,
        batch_max=args.batch_max,
    )


def _cmd_estimate(args, out):
    model, hardware = _target(args)
    est = estimate(model, hardware, _serving(args), batch_size=args.batch_size, input_len=args.input_len,
                   output_len=args.output_len)
    if args.format == "json":
        for w in est.warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
        out.write(report.to_json(est.to_dict()) + "\n")
    else:
        out.write(report.format_estimate(est) + "\n")
    return 0


def _workload(args):
    w = load_workload(args.workload or args.workload_pos) if (args.workload or args.workload_pos) else Workload()
    changes = {}
    for flag in ("num_prompts", "request_rate", "burstiness", "arrival", "max_concurrency", "seed", "prefix_len",
                 "prefix_hit_ratio"):
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
    return replace(w, **changes) if changes else w


def _goodput(items):
    if not items:
        return None
    slos = {}
    for item in items:
        key, _, value = item.partition(":")
        if key not in ("ttft", "tpot", "e2el"):
            raise ConfigError("ttft:MS, tpot:MS or e2el:MS", source="command line", key="--goodput", value=item)
        try:
            slos[key] = float(value)
        except ValueError:
            raise ConfigError("KEY:MS with a number of milliseconds", source="command line", key="--goodput",
                              value=item) from None
    return slos


def _percentiles(text):
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or not all(0 <= v <= 100 for v in values):
        raise ConfigError("comma-separated numbers in [0, 100]", source="command line", key="--metric-percentiles",
                          value=text)
    return values


def _cmd_run(args, out):
    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    model, hardware = _target(args)
    workload = _workload(args)
    percentiles = _percentiles(args.metric_percentiles)
    serving = _run_serving(args)
    if args.export_format and not args.output:
        raise ConfigError("--export-format needs --output FILE", source="command line")
    if args.output:
        exports.resolve_format(args.output, args.export_format)  # a bad name fails before simulating
    keep_requests = bool(args.save_detailed or args.plot or args.export_format in ("guidellm", "requests"))
    # A progress bar for long runs only (a million requests and more), on a terminal.
    long_run = workload.num_prompts >= PROGRESS_MIN_REQUESTS and not args.quiet
    with Progress(workload.num_prompts, "simllm run", enabled=long_run) as bar:
        result = simulate(model, hardware, serving, workload, fast_forward=not args.no_fast_forward,
                          percentiles=percentiles, goodput=_goodput(args.goodput), keep_requests=keep_requests,
                          progress=(lambda done, _total: bar.advance(done - bar.done)) if bar.active else None)
    if args.save_detailed:
        result.save_detailed(args.save_detailed)
    if args.output:  # vLLM JSON: the per-request lists only with --save-detailed, as vllm bench serve
        exports.export(result, args.output, args.export_format, detailed=bool(args.save_detailed))
    if args.plot:
        from simllm.plots import plot_run  # noqa: PLC0415

        plot_run(result, args.plot)
    if args.quiet:
        out.write(report.format_run_line(result) + "\n")
    elif args.format == "json":
        for w in result.warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
        out.write(report.to_json(result.to_dict()) + "\n")
    else:
        diag = diagnose(result, model, hardware, serving, workload)
        out.write(report.format_run(result, percentiles, diagnosis=format_run_section(diag)) + "\n")
    return 0


def _cmd_validate(args, out):
    from simllm import accuracy  # noqa: PLC0415

    points, shape = _points(args, args.hardware)
    hardware_for = None
    if args.factors_from:
        source = load_hardware(args.factors_from)
        factors = {k: getattr(source, k) for k in FACTOR_KEYS}

        def hardware_for(name):
            return replace(load_hardware(name), frameworks=source.frameworks, **factors)

    points = accuracy.predict_points(accuracy.with_bounds(points, args.num_prompts, shape), hardware_for,
                                     args.num_prompts, shape)
    summary = accuracy.error_summary(points)
    by = accuracy.error_summary_by(points, lambda p: p.measurement.backend or "unknown")
    if args.plot:
        from simllm.plots import plot_validation  # noqa: PLC0415

        plot_validation(points, args.plot)
    if args.format == "json":
        rows = [{"source": p.measurement.where, "model": p.model, "hardware": p.hardware,
                 "backend": p.measurement.backend, "skipped": p.reason or None,
                 **{f"measured_{k}_ms": getattr(p.measurement, f"{k}_ms") for k in accuracy.METRICS},
                 **{f"predicted_{k}_ms": (p.predicted or {}).get(k) for k in accuracy.METRICS},
                 **{f"peak_bound_{k}_ms": (p.bound or {}).get(k) for k in accuracy.METRICS}} for p in points]
        out.write(report.to_json({"points": rows, "summary": summary, "by_backend": by}) + "\n")
    else:
        out.write(report.format_validation(points, summary, by) + "\n")
    return 0


def _cmd_calibrate(args, out):
    from simllm import calibrate  # noqa: PLC0415

    base = load_hardware(args.hardware)
    points, shape = _points(args, args.hardware)
    wanted = {args.hardware, base.gpu}
    points = [p for p in points if p.hardware in wanted
              and (p.measurement.backend if p.measurement.backend in FRAMEWORKS else "vllm") == args.framework]
    progress = None if args.format == "json" else (lambda line: print(f"simllm: {line}", file=sys.stderr))
    fit = calibrate.calibrate(points, base, args.fit, args.max_iterations, shape, args.num_prompts, progress=progress)
    path = calibrate.write_calibration(fit, args.output, args.framework)
    if args.format == "json":
        out.write(report.to_json({"output": str(path), "framework": args.framework, "factors": fit.factors,
                                  "initial": fit.initial, "fit_error": fit.fit_error, "loo_error": fit.loo_error,
                                  "fitted_on": calibrate.describe_points(fit.points),
                                  "iterations": fit.iterations, "evaluations": fit.evaluations}) + "\n")
    else:
        out.write(report.format_calibration(fit, args.framework, path) + "\n")
    return 0


def _cmd_profile(args, out):
    from simllm import profile  # noqa: PLC0415

    base = load_hardware(args.hardware)
    result = profile.profile_hardware(base, device=args.device, dtype=args.dtype, size=args.size,
                                      progress=lambda line: print(f"simllm: {line}", file=sys.stderr))
    yaml_path, raw_path = profile.write_profile(result, base, args.output, args.raw_output)
    out.write(profile.format_profile(result) + f"\nwrote {yaml_path} and {raw_path}\n")
    return 0


def _cmd_loadtest(args, out):
    from simllm import loadtest  # noqa: PLC0415
    from simllm.progress import Progress  # noqa: PLC0415

    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    model, hardware = _target(args)
    workload = _workload(args)
    serving = _run_serving(args)
    points = loadtest.plan_points(parallel=args.parallel, number=args.number,
                                  concurrency_range=args.concurrency_range, request_rates=args.request_rates,
                                  default_num_prompts=workload.num_prompts)
    with Progress(len(points), "simllm loadtest", enabled=not args.quiet) as bar:
        result = loadtest.run_loadtest(model, hardware, serving, workload, points, progress=bar,
                                       min_gain=args.min_gain, slo_p99_latency_ms=args.slo_p99_latency_ms)
    if not args.quiet:
        for w in result.results[0].warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
    as_csv = loadtest.loadtest_to_csv(result)
    as_json = report.to_json(loadtest.loadtest_to_json(result)) + "\n"
    if args.output:
        write_output(args.output, as_csv if args.output.lower().endswith(".csv") else as_json)
    if args.plot:
        from simllm.plots import plot_loadtest  # noqa: PLC0415

        plot_loadtest(loadtest.plot_rows(result), args.plot)
    if args.quiet:
        out.write(("recommended: " if result.recommended is not None else "no recommendation: ")
                  + result.reason + "\n")
    elif args.format == "json":
        out.write(as_json)
    elif args.format == "csv":
        out.write(as_csv)
    else:
        out.write(loadtest.format_loadtest(result) + "\n")
    return 0


def _cmd_diagnose(args, out):
    model, hardware = _target(args)
    workload = _workload(args)
    serving = _run_serving(args)
    result = simulate(model, hardware, serving, workload, keep_requests=False)
    diag = diagnose(result, model, hardware, serving, workload)
    lines = None if args.no_what_if else what_if(model, hardware, serving, workload,
                                                  args.what_if or DEFAULT_CHANGES, base=result)
    if args.format == "json":
        out.write(report.to_json(diagnosis_to_dict(diag, lines)) + "\n")
    else:
        out.write(format_diagnosis(diag, lines) + "\n")
    return 0


def _cmd_compare(args, out):
    from simllm import compare as cmp  # noqa: PLC0415

    workload = _workload(args)
    serving = _run_serving(args)
    percentiles = _percentiles(args.metric_percentiles)
    if args.output:
        cmp.check_save_path(args.output)  # a bad name fails before simulating
    comparison = cmp.compare(args.model, args.hardware, serving, workload, args.metrics or cmp.DEFAULT_METRICS,
                             percentiles=percentiles, goodput=_goodput(args.goodput))
    if args.output:
        cmp.save_comparison(comparison, args.output)
    if args.plot:
        from simllm.plots import plot_compare  # noqa: PLC0415

        plot_compare(comparison, args.plot)
    if args.format == "json":
        out.write(report.to_json(cmp.comparison_to_dict(comparison)) + "\n")
    elif args.format == "csv":
        out.write(cmp.comparison_to_csv(comparison))
    else:
        out.write(cmp.format_comparison(comparison, title=f"simllm compare: {workload.describe()}") + "\n")
    return 0


def _cmd_frontier(args, out):
    from simllm import frontier as fr  # noqa: PLC0415

    rows = fr.read_rows(args.results)
    idx = fr.frontier_rows(rows, args.x, args.y)
    if args.plot:
        from simllm.plots import plot_frontier  # noqa: PLC0415

        plot_frontier(rows, idx, args.plot, x=args.x, y=args.y)
    if args.format == "json":
        out.write(report.to_json(fr.frontier_to_dict(rows, idx, args.x, args.y)) + "\n")
    else:
        out.write(fr.format_frontier(rows, idx, args.x, args.y) + "\n")
    return 0


def _cmd_optimize(args, out):
    from simllm import sla  # noqa: PLC0415

    workload = _workload(args)
    serving = _run_serving(args)
    slos = sla.parse_slo(args.slo)
    over = sla.parse_over(args.over)
    prices = sla.parse_prices(args.price)
    if args.plot:
        from simllm.plots import _matplotlib  # noqa: PLC0415

        _matplotlib()  # fail before simulating when matplotlib is missing
    with Progress(sla.grid_size(over, args.hardware), "simllm optimize", enabled=not args.quiet) as bar:
        result = sla.optimize(args.model, args.hardware, serving, workload, slos, over=over,
                              objective=args.objective, top=args.top, prices=prices,
                              progress=lambda done, _total: bar.advance(done - bar.done))
    as_json = report.to_json(sla.optimize_to_dict(result)) + "\n"
    if args.output:
        write_output(args.output, as_json)
    if args.plot:
        from simllm.plots import plot_frontier  # noqa: PLC0415

        rows, chosen = result.rows(), result.answer.index if result.answer else None
        plot_frontier(rows, result.frontier("speed"), args.plot, chosen=chosen)
        plot_frontier(rows, result.frontier("ttft"), args.plot, chosen=chosen, x="p99_ttft_ms")
    out.write(as_json if args.format == "json" else sla.format_optimize(result) + "\n")
    return 0 if result.answer else 1  # 1: no configuration meets the SLOs


def _cmd_sweep(args, out):
    from simllm import sweeps as sw  # noqa: PLC0415
    from simllm.sweep_spec import load_sweep_spec  # noqa: PLC0415

    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    if args.scheduler and args.executor not in (None, "dask"):
        raise ConfigError("dask (--scheduler is a dask scheduler's address)", source="command line",
                          key="--executor", value=args.executor)
    executor = args.executor or ("dask" if args.scheduler else "threads")
    spec = load_sweep_spec(args.spec)
    bar = Progress(0, "simllm sweep", enabled=not args.quiet)  # run_spec sets its total
    try:
        result = sw.run_spec(spec, executor, workers=args.workers, scheduler=args.scheduler,
                             chunk_size=args.chunk_size, progress=bar, output=args.output)
    finally:
        bar.close()
    if args.plot:
        from simllm.plots import plot_sweep  # noqa: PLC0415

        plot_sweep(result, args.plot)
    if args.format == "json":
        out.write(exports.to_json(sw.result_to_dict(result)))  # strict JSON: NaN -> null
    elif args.format == "csv":
        out.write(sw.table_to_csv(result.table))
    else:
        out.write(sw.format_sweep(result) + "\n")
    return 0


def _cmd_presets(args, out):
    for kind in [args.kind] if args.kind else presets.KINDS:
        names = presets.preset_names(kind)
        out.write(f"{kind}: {', '.join(names) if names else '(none)'}\n")
    return 0


def main(argv=None):
    """Entry point of the ``simllm`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        commands = {"estimate": _cmd_estimate, "run": _cmd_run, "validate": _cmd_validate,
                    "calibrate": _cmd_calibrate, "profile": _cmd_profile, "loadtest": _cmd_loadtest, "diagnose": _cmd_diagnose,
                    "compare": _cmd_compare, "frontier": _cmd_frontier, "optimize": _cmd_optimize,
                    "sweep": _cmd_sweep,
                    "presets": _cmd_presets}
        return commands[args.command](args, sys.stdout)
    except ConfigError as exc:
        print(f"simllm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
