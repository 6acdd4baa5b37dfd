"""What the commands share: argument types that check values as argparse reads them, the
argument groups (target, engine, workload, scheduler, measured results) and the builders that turn
parsed arguments into configs."""
import argparse
import difflib
import functools
import math
import re
import sys
from dataclasses import replace

from simllm.calibration import validate as accuracy
from simllm.calibration.bands import summary_bands
from simllm.calibration.record import load_record
from simllm.config.disagg import DisaggConfig, parse_pool_config, parse_transfer_config
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import (
    BATCHING,
    CHUNKED_BATCHED_TOKENS,
    EXPERT_ROUTINGS,
    ROUTERS,
    UNCHUNKED_MIN_BATCHED_TOKENS,
    ServingConfig,
)
from simllm.config.sections import MAX_MAGNITUDE, MIN_STEP
from simllm.config import datasets, presets
from simllm.config.datasets import Dataset
from simllm.config.workload import (
    ARRIVALS,
    DATASET_KEYS,
    MAX_COUNT,
    MAX_RATE,
    MIN_RATE,
    RAMP_UP_STRATEGIES,
    Workload,
    load_workload,
    random_range,
)
from simllm.errors import CLI, ConfigError
from simllm.fileio import check_output
from simllm.formats.measurements import load_measurements
from simllm.report import html as html_report
from simllm.report.progress import CompileNotice
from simllm.sim.runner import EXECUTORS

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
PROGRESS_MIN_REQUESTS = 1_000_000  # simllm run shows a progress bar from this many requests


#: How close a mistyped flag or subcommand must be to a known one for "did you mean" (difflib's ratio).
SUGGEST_CUTOFF = 0.6
_INVALID_CHOICE = re.compile(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)$")


def suggestion(word, known):
    """`` (did you mean X?)`` for the entry of ``known`` closest to ``word`` (difflib), or ``""``."""
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=SUGGEST_CUTOFF)
    return f" (did you mean {near[0]}?)" if near else ""


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
    """simllm's argument parser: one-line errors (exit 2, no usage block) that suggest the nearest
    flag or subcommand for a mistyped one."""

    def error(self, message):
        match = _INVALID_CHOICE.search(message)
        if match:  # a subcommand or a choice flag's value
            choices = [c.strip().strip("'") for c in match.group(2).split(",")]
            message += suggestion(match.group(1), choices)
        self.exit(2, f"{self.prog}: error: command line: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, with what it did not recognise checked here: an unknown flag names the
        nearest flag of the subcommand it was given to."""
        if self._subparsers is not None:  # the top level: its flags come before the subcommand
            known = self.option_strings()
            for arg in sys.argv[1:] if args is None else args:
                if not arg.startswith("-"):
                    break
                flag = arg.split("=", 1)[0]
                if not any(k.startswith(flag) for k in known):  # argparse takes unique prefixes
                    self.error(f"unrecognized argument {arg}{suggestion(flag, known)}")
        namespace, extras = super().parse_known_args(args, namespace)
        unknown = [a for a in extras if a.startswith("-") and a != "-"]
        if unknown and self._subparsers is None:  # a subcommand's parser: its own flags
            flag = unknown[0].split("=", 1)[0]
            self.error(f"unrecognized argument {unknown[0]}{suggestion(flag, self.option_strings())}")
        return namespace, extras

    def option_strings(self):
        """Every flag this parser takes (``--num-prompts``, ``-tp``, ...)."""
        return [s for action in self._actions for s in action.option_strings]


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


#: The engine's and the workload's defaults: the flags' defaults and the help texts that state
#: them come from these, so that help says what the code does.
SERVING = ServingConfig()
WORKLOAD = Workload()


def add_target(p):
    p.add_argument("model_pos", nargs="?", metavar="MODEL",
                   help="model preset, HuggingFace id or path (same as --model)")
    p.add_argument("hardware_pos", nargs="?", metavar="HARDWARE", help="hardware preset or path (same as --hardware)")
    p.add_argument("--model", help="model preset name, HuggingFace id (meta-llama/Llama-3.1-8B-Instruct: the preset "
                                   "that stands for it, else its config.json in the local HuggingFace cache; never "
                                   f"downloaded), simllm YAML, or config.json (default {DEFAULT_MODEL})")
    p.add_argument("--hardware", help=f"hardware preset name or YAML (default {DEFAULT_HARDWARE})")


def add_engine_args(p):
    d = SERVING
    p.add_argument("--tensor-parallel-size", "-tp", type=positive_int, default=d.tensor_parallel_size,
                   help="GPUs sharing each layer (default %(default)s)")
    p.add_argument("--dtype", default=d.dtype,
                   help="weight dtype: auto, fp16, bf16, fp32, fp8, int8, int4, fp4 (NVFP4), mxfp4 (default %(default)s)")
    p.add_argument("--kv-cache-dtype", default=d.kv_cache_dtype,
                   help="KV cache dtype: auto, fp16, bf16, fp8, int8, int4 (default %(default)s: the model's)")
    p.add_argument("--kv-compression-ratio", type=ratio, default=d.kv_compression_ratio,
                   help="KV bytes stored = raw / ratio (default %(default)s: the model's, 1 unless it says)")
    p.add_argument("--gpu-memory-utilization", type=fraction, default=d.gpu_memory_utilization,
                   help="fraction of GPU memory the engine may use (default %(default)s)")
    p.add_argument("--block-size", type=positive_int, default=d.block_size,
                   help="tokens per KV-cache block (default %(default)s)")
    p.add_argument("--max-model-len", type=positive_int, default=d.max_model_len,
                   help="longest sequence served (default %(default)s: the model's)")
    p.add_argument("--max-num-seqs", type=positive_int, default=d.max_num_seqs,
                   help="sequences per iteration (default %(default)s)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=d.max_num_batched_tokens,
                   help=f"tokens per iteration (default %(default)s: {CHUNKED_BATCHED_TOKENS} with chunked prefill, "
                        f"else max(max_model_len, {UNCHUNKED_MIN_BATCHED_TOKENS}))")
    p.add_argument("--data-parallel-size", "-dp", type=positive_int, default=d.data_parallel_size,
                   help="engine replicas (with expert parallelism: attention data-parallel ranks whose tokens meet "
                        "in every MoE layer; default %(default)s)")
    p.add_argument("--pipeline-parallel-size", "-pp", type=positive_int, default=d.pipeline_parallel_size,
                   help="pipeline stages the layers are split over, each -tp GPUs; up to that many batches in "
                        "flight (vLLM's batch queue; default %(default)s)")
    p.add_argument("--pp-max-micro-batch-size", type=nonnegative_int, default=d.pp_max_micro_batch_size,
                   help="with pipeline parallelism: most sequences in one batch (SGLang's flag; default %(default)s: "
                        "vLLM's scheduler, a batch takes every request it can)")
    p.add_argument("--expert-parallel-size", "-ep", type=positive_int, default=d.expert_parallel_size,
                   help="MoE layers' experts spread over this many GPU groups; tensor x data parallel GPUs = EP x the "
                        "experts' own TP (default %(default)s: experts sharded by TP)")
    p.add_argument("--moe-tensor-parallel-size", type=nonnegative_int, default=d.moe_tensor_parallel_size,
                   help="each expert's tensor-parallel split (TensorRT-LLM's name); tensor x data parallel without "
                        "expert parallelism makes the MoE layers tensor-parallel over every attention data-parallel "
                        "rank, which then step together (SGLang's --enable-dp-attention; default %(default)s: GPUs / EP)")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="vLLM's flag: expert parallelism over every GPU (EP = tensor x data parallel)")
    p.add_argument("--expert-load-imbalance", type=ratio, default=d.expert_load_imbalance,
                   help="with expert parallelism: the most loaded GPU's routed tokens over the mean, which "
                        "sets every MoE layer's pace (default %(default)s: uniform routing)")
    p.add_argument("--expert-routing", choices=EXPERT_ROUTINGS, default=d.expert_routing,
                   help="with expert parallelism: balanced (every GPU its mean share of the tokens) or random "
                        "(each token's experts drawn uniformly: the busiest GPU sets the step, well over the mean "
                        "at small batches); --expert-load-imbalance skews either (default %(default)s)")
    p.add_argument("--num-redundant-experts", type=nonnegative_int, default=d.num_redundant_experts,
                   help="with expert parallelism: expert replicas (EPLB) spread over the EP GPUs, which hold "
                        "(experts + N) / EP each (default %(default)s)")
    p.add_argument("--speculative-config", metavar="JSON", default=d.speculative_config,
                   help="vLLM's speculative decoding config, e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": 1, "
                        "\"synthetic_acceptance_rates\": [0.81]}' (methods mtp, eagle, eagle3, draft_model with "
                        "\"model\", ngram; the acceptance, which simllm cannot derive, as synthetic_acceptance_rates "
                        "(per position, unconditional) or synthetic_acceptance_length): drafts verified every step, "
                        "the drafter priced, its weights and KV in memory")
    p.add_argument("--framework", default=d.framework,
                   metavar="{" + ",".join(presets.preset_names("frameworks")) + "}|PATH",
                   help="serving framework profile (configs/frameworks/NAME.yaml, or a profile YAML): its "
                        "per-request frontend time, per-step and per-sequence CPU overhead, per-kernel launch "
                        "gap and decode-attention floor (default %(default)s)")


def add_workload_args(p, load=True):
    """The workload flags (vllm bench serve names); ``load`` False leaves out the load itself
    (--num-prompts, --request-rate, --max-concurrency), which a load test sets per point. Their
    parsed defaults are None ("not given": a workload file's value stands); the defaults the help
    states are :data:`WORKLOAD`'s."""
    w = WORKLOAD
    p.add_argument("workload_pos", nargs="?", metavar="WORKLOAD", help="workload preset, YAML or trace (same as --workload)")
    p.add_argument("--workload", help="workload preset, YAML, or trace CSV/JSONL (flags below override it)")
    g = p.add_argument_group("workload (vllm bench serve names)")
    if load:
        g.add_argument("--num-prompts", type=positive_int, help=f"requests to send (default {w.num_prompts})")
        g.add_argument("--request-rate", type=rate,
                       help="requests per second; inf sends all at t=0; with a trace, its send times are scaled to "
                            f"this mean rate, keeping their shape (default {w.request_rate:g}; a trace as recorded)")
        g.add_argument("--max-concurrency", type=positive_int,
                       help="closed loop: concurrent clients (with a rate or a trace: most requests in flight)")
        g.add_argument("--ramp-up-strategy", choices=RAMP_UP_STRATEGIES,
                       help="ramp the request rate from --ramp-up-start-rps to --ramp-up-end-rps over the requests "
                            "(vllm bench serve's; no --request-rate with it)")
        g.add_argument("--ramp-up-start-rps", type=positive_float, help="ramp-up: the first request's rate")
        g.add_argument("--ramp-up-end-rps", type=positive_float, help="ramp-up: the last request's rate")
    else:
        p.set_defaults(num_prompts=None, request_rate=None, max_concurrency=None, ramp_up_strategy=None,
                       ramp_up_start_rps=None, ramp_up_end_rps=None)
    g.add_argument("--burstiness", type=positive_float,
                   help=f"gamma shape of inter-arrival times (default {w.burstiness:g}: Poisson)")
    g.add_argument("--arrival", choices=ARRIVALS, help=f"inter-arrival distribution (default {w.arrival})")
    g.add_argument("--input-len", "--random-input-len", type=positive_int,
                   help=f"prompt tokens (default {w.input_len.value})")
    g.add_argument("--output-len", "--random-output-len", type=positive_int,
                   help=f"output tokens (default {w.output_len.value})")
    g.add_argument("--random-range-ratio", type=unit, default=0.0,
                   help="lengths uniform in len*(1-r)..len*(1+r) (default %(default)s)")
    g.add_argument("--seed", type=nonnegative_int, help=f"random seed (default {w.seed})")
    g.add_argument("--prefix-len", type=nonnegative_int, help=f"shared prompt prefix tokens (default {w.prefix_len})")
    g.add_argument("--prefix-hit-ratio", type=unit,
                   help=f"fraction of requests whose prefix is cached (default {w.prefix_hit_ratio:g})")
    g.add_argument("--timeout", type=positive_float,
                   help=f"client timeout in seconds, unfinished = error (default {w.timeout_s:g}: none)")
    g.add_argument("--client-jitter-ms", type=nonneg_float,
                   help="closed loop: mean of each client's exponential delay before a send, which keeps identical "
                        f"clients from staying in step (default {w.client_jitter_ms:g}; 0 turns it off)")
    g.add_argument("--warmup-requests", type=nonnegative_int,
                   help="leave the first N requests sent out of the summary (they stay in --save-detailed, marked; "
                        f"default {w.warmup_requests})")
    d = p.add_argument_group(
        "dataset (vllm bench serve's)",
        "simllm has no tokenizer: a text's tokens are taken as ceil(ASCII characters / "
        f"{datasets.CHARS_PER_TOKEN}) + its other characters (~4 characters a token for English, 1 for CJK); chat "
        "templates and BOS tokens are not counted")
    d.add_argument("--dataset-name", choices=datasets.DATASETS,
                   help="random: lengths from the flags above; sharegpt: a ShareGPT JSON's first two turns of each "
                        f"conversation, shuffled by --seed as vLLM does, pairs under {datasets.MIN_LEN} tokens, prompts "
                        f"over {datasets.MAX_PROMPT_LEN} or pairs over {datasets.MAX_TOTAL_LEN} skipped; sonnet: "
                        "prompts of random lines of a text file after a shared prefix; custom: a JSONL of "
                        "{\"prompt\": ...} (default " + datasets.DATASETS[0] + ")")
    d.add_argument("--dataset-path", metavar="FILE", help="the sharegpt, sonnet or custom dataset file")
    d.add_argument("--sharegpt-output-len", type=positive_int,
                   help="sharegpt: output tokens of every request (default: each conversation's second turn's)")
    d.add_argument("--sonnet-input-len", type=positive_int,
                   help=f"sonnet: most prompt tokens (default {datasets.SONNET_INPUT_LEN})")
    d.add_argument("--sonnet-output-len", type=positive_int,
                   help=f"sonnet: output tokens (default {datasets.SONNET_OUTPUT_LEN})")
    d.add_argument("--sonnet-prefix-len", type=nonnegative_int,
                   help=f"sonnet: tokens of the prefix every prompt shares (default {datasets.SONNET_PREFIX_LEN}); "
                        "--prefix-len defaults to it")
    d.add_argument("--disable-shuffle", action="store_true", default=None,
                   help="sharegpt, custom: take the entries in file order (default: shuffled by --seed)")
    d.add_argument("--custom-output-len", type=int,
                   help=f"custom: output tokens of every request, -1: each row's output_tokens (default "
                        f"{datasets.CUSTOM_OUTPUT_LEN})")


def add_run_args(p, load=True):
    """The workload, engine and scheduler flags of run (loadtest, diagnose, compare, optimize)."""
    add_workload_args(p, load)
    add_engine_args(p)
    add_scheduler_args(p)


def add_scheduler_args(p):
    d = SERVING
    eng = p.add_argument_group("engine")
    eng.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=d.enable_chunked_prefill,
                     help="vLLM v1 chunked prefill (default %(default)s); --no-enable-chunked-prefill for v0 scheduling")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=d.enable_prefix_caching,
                     help="vLLM's automatic prefix caching (default %(default)s)")
    eng.add_argument("--router", choices=ROUTERS, default=d.router,
                     help="how replicas share requests (default %(default)s)")
    eng.add_argument("--batching", choices=BATCHING, default=d.batching, help="batching policy (default %(default)s)")
    eng.add_argument("--pad-prompts", action="store_true", help="static/dynamic: pad prompts to the longest")
    eng.add_argument("--batch-window-ms", type=nonneg_float, default=d.batch_window_ms,
                     help="dynamic: longest wait for a batch (default %(default)s)")
    eng.add_argument("--batch-max", type=positive_int, default=d.batch_max,
                     help="dynamic: batch size that starts a batch (default %(default)s: --max-num-seqs)")


def regex(text):
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from None


def add_measured(p):
    p.add_argument("measured", nargs="+", metavar="MEASURED",
                   help="measured results: silicon_sample.csv-style CSV, a TensorRT-LLM static-batch or genai-perf "
                        "CSV table, or vllm bench serve, GuideLLM, EvalScope, genai-perf or AIPerf JSON")
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
    if w.trace:
        check_trace_flags(args, w.trace)
    dataset = dataset_of(args, w)
    if dataset is not w.dataset:
        changes["dataset"] = dataset
        if dataset is not None and dataset.name == "sonnet" and args.prefix_len is None:
            changes["prefix_len"] = 0  # sonnet's shared prefix
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


#: The dataset flags, by the dataset they are for.
DATASET_FLAGS = {name: tuple("--" + key.replace("_", "-") for key in keys) for name, keys in DATASET_KEYS.items()}


def dataset_of(args, w):
    """The workload's dataset after the dataset flags (``w``'s own when none is given; None for the
    random dataset). The flags of another dataset than the one named, --dataset-path without a
    file dataset and the random dataset's lengths with a file dataset stop with one line."""
    name = args.dataset_name or (w.dataset.name if w.dataset is not None else "random")
    for flag in sorted({f for flags in DATASET_FLAGS.values() for f in flags}):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and flag not in DATASET_FLAGS.get(name, ()):
            meant = " or ".join(n for n, flags in DATASET_FLAGS.items() if flag in flags)
            raise ConfigError(f"no {flag} without --dataset-name {meant}", source=CLI, key=flag, value=value)
    if name == "random":
        if args.dataset_path is not None:
            raise ConfigError("--dataset-name sharegpt, sonnet or custom for it (vLLM's random dataset takes no file)",
                              source=CLI, key="--dataset-path", value=args.dataset_path)
        return None if args.dataset_name else w.dataset
    if w.trace:
        raise ConfigError("no dataset with a trace (its lengths are replayed)", source=CLI, key="--dataset-name",
                          value=name)
    for flag, value in (("--input-len", args.input_len), ("--output-len", args.output_len),
                        ("--random-range-ratio", args.random_range_ratio or None)):
        if value is not None:
            raise ConfigError(f"no {flag} with --dataset-name {name} (the dataset gives the lengths)", source=CLI,
                              key=flag, value=value)
    path = args.dataset_path or (w.dataset.path if w.dataset is not None and w.dataset.name == name else None)
    if path is None:
        raise ConfigError(f"a --dataset-path for --dataset-name {name}", source=CLI, key="--dataset-path")
    given = {key: getattr(args, key) for key in DATASET_KEYS[name] if getattr(args, key) is not None}
    if not given and args.dataset_name is None and args.dataset_path is None:
        return w.dataset  # the workload file's, as it named it
    base = {k: getattr(w.dataset, k) for k in DATASET_KEYS[name]} if w.dataset is not None and w.dataset.name == name \
        else {}
    return Dataset(name=name, path=str(path), **{**base, **given})


def check_trace_flags(args, trace):
    """Refuse the workload flags a trace makes meaningless (its lengths and send times are
    replayed): the lengths', the arrival process's, and --request-rate inf (a finite rate scales
    the trace's times to it). The others apply to a trace as to sampled requests."""
    given = [("--input-len", args.input_len), ("--output-len", args.output_len),
             ("--random-range-ratio", args.random_range_ratio or None), ("--arrival", args.arrival),
             ("--burstiness", args.burstiness)]
    for flag, value in given:
        if value is not None:
            raise ConfigError(f"no {flag} with a trace (its lengths and send times are replayed; --request-rate "
                              "scales its times, --max-concurrency caps it)", source=CLI, key=flag, value=value)
    if args.request_rate is not None and not math.isfinite(args.request_rate):
        raise ConfigError("a finite rate with a trace (its send times are scaled to that mean rate); leave "
                          "--request-rate out to replay them as recorded", source=CLI, key="--request-rate",
                          value=args.request_rate)


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
                   help="where simulations run (default: threads; processes for a sweep of 256+ small runs "
                        "where the platform forks; dask with --scheduler)")
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


def add_report_arg(g, what):
    """``--report FILE.html`` in output group ``g``; ``what`` says what the page shows."""
    g.add_argument("--report", metavar="FILE.html",
                   help=f"also write an interactive HTML report ({what}): one self-contained file that opens offline "
                        "in any browser, hover for details (needs simllm[report])")


def check_report(args):
    """Fail before simulating when ``--report`` is given but cannot be written: a name not
    ending in .html, a folder that cannot be written, or plotly (the ``report`` extra) missing."""
    if args.report:
        html_report.check_report_path(args.report)
        check_output(args.report, "--report")
        html_report.require_plotly(source=CLI, key="--report")


def write_report(args, build):
    """Write ``--report``'s page, ``build()`` (called only when the flag is given)."""
    if args.report:
        html_report.write_report(args.report, build())


def add_disagg_args(p, title="disaggregated prefill/decode (any of these makes the run disaggregated)"):
    """The disaggregated prefill/decode flags of ``run`` (and ``optimize``'s base for its
    disaggregated grid)."""
    pd = p.add_argument_group(title)
    pd.add_argument("--prefill-instances", type=positive_int, metavar="N",
                    help="prefill engine instances (each -tp x -dp GPUs unless --prefill-config says otherwise)")
    pd.add_argument("--decode-instances", type=positive_int, metavar="N",
                    help=f"decode engine instances (default {DisaggConfig.decode_instances})")
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
    return DisaggConfig(prefill_instances=args.prefill_instances or DisaggConfig.prefill_instances,
                        decode_instances=args.decode_instances or DisaggConfig.decode_instances,
                        prefill=prefill, decode=decode, prefill_gpu=prefill_gpu, decode_gpu=decode_gpu,
                        **parse_transfer_config(args.kv_transfer_config))
