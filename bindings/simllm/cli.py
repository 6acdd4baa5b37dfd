"""The ``simllm`` command line: a thin layer over the public functions. Bad input exits with
status 2 and one line on stderr, never a traceback."""
import argparse
import sys

from simllm import presets, report
from simllm.errors import ConfigError
from simllm.estimate import estimate
from simllm.hardware import load_hardware
from simllm.model import load_model
from simllm.serving import ServingConfig

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: command line: {message}\n")


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number in (0, 1]") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number in (0, 1]")
    return value


def _ratio(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number >= 1") from None
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number >= 1")
    return value


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
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=8192, help="tokens per iteration (default 8192)")


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

    pre = sub.add_parser("presets", help="list the shipped model, hardware and workload presets")
    pre.add_argument("kind", nargs="?", choices=presets.KINDS)
    return parser


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
        return {"estimate": _cmd_estimate, "presets": _cmd_presets}[args.command](args, sys.stdout)
    except ConfigError as exc:
        print(f"simllm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
