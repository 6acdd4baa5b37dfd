"""``simllm estimate``: per-operator cost of one prefill and one decode step, memory, ideal TTFT/TPOT."""
import sys

from simllm.cli import common
from simllm.report import text as report
from simllm.sim.estimate import estimate


def add_parser(sub):
    est = sub.add_parser("estimate", help="per-operator cost of one prefill and one decode step, memory, ideal TTFT/TPOT")
    common.add_target(est)
    common.add_engine_args(est)
    est.add_argument("--batch-size", type=common.positive_int, default=1, help="sequences per step (default %(default)s)")
    est.add_argument("--input-len", type=common.positive_int, default=1024, help="prompt tokens per request (default %(default)s)")
    est.add_argument("--output-len", type=common.positive_int, default=128, help="output tokens per request (default %(default)s)")
    est.add_argument("--format", choices=("table", "json"), default="table")


@common.shows_compiles
def cmd(args, out):
    model, hardware = common.target(args)
    est = estimate(model, hardware, common.serving(args), batch_size=args.batch_size, input_len=args.input_len,
                   output_len=args.output_len)
    if args.format == "json":
        for w in est.warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
        out.write(report.to_json(est.to_dict()) + "\n")
    else:
        out.write(report.format_estimate(est) + "\n")
    return 0
