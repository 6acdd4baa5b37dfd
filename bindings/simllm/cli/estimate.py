"""``simllm estimate``: per-operator cost of one prefill and one decode step, memory, ideal TTFT/TPOT,
and the capacity (the saturated request rate and token throughput) at the same lengths."""
import sys

from simllm.cli import common
from simllm.config.workload import Workload, fixed
from simllm.report import text as report
from simllm.sim.capacity import capacity
from simllm.sim.estimate import estimate


def add_parser(sub):
    est = sub.add_parser("estimate", help="per-operator cost of one prefill and one decode step, memory, ideal TTFT/TPOT")
    common.add_target(est)
    common.add_engine_args(est)
    est.add_argument("--batch-size", type=common.positive_int, default=1, help="sequences per step (default %(default)s)")
    est.add_argument("--input-len", type=common.positive_int, default=1024, help="prompt tokens per request (default %(default)s)")
    est.add_argument("--output-len", type=common.positive_int, default=128, help="output tokens per request (default %(default)s)")
    est.add_argument("--no-capacity", dest="capacity", action="store_false",
                     help="skip the capacity (a simulation of the engine saturated with --input-len / --output-len "
                          "requests: its request rate and token throughput)")
    est.add_argument("--format", choices=("table", "json"), default="table")


@common.shows_compiles
def cmd(args, out):
    model, hardware = common.target(args)
    serving = common.serving(args)
    est = estimate(model, hardware, serving, batch_size=args.batch_size, input_len=args.input_len,
                   output_len=args.output_len)
    cap = None
    if args.capacity:
        cap = capacity(model, hardware, serving, Workload(input_len=fixed(args.input_len),
                                                          output_len=fixed(args.output_len)))
    if args.format == "json":
        for w in est.warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
        out.write(report.to_json({**est.to_dict(), "capacity": cap.to_dict() if cap else None}) + "\n")
    else:
        out.write(report.format_estimate(est, cap) + "\n")
    return 0
