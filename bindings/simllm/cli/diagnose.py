"""``simllm diagnose``: what limits a simulated run, and what one change would do."""
from simllm.analysis.diagnose import CHANGES, DEFAULT_CHANGES, diagnose, diagnosis_to_dict, format_diagnosis, what_if
from simllm.cli import common
from simllm.report import text as report
from simllm.sim.simulate import simulate


def add_parser(sub):
    dia = sub.add_parser("diagnose", help="what limits a simulated run (prefill, decode bandwidth, KV cache, "
                                          "concurrency), with the numbers, and what one change would do")
    common.add_target(dia)
    common.add_run_args(dia)
    dia.add_argument("--what-if", nargs="+", metavar="CHANGE", choices=list(CHANGES),
                     help=f"changes to re-simulate one at a time (default: all, {', '.join(CHANGES)})")
    dia.add_argument("--no-what-if", action="store_true", help="only the diagnosis")
    dia.add_argument("--format", choices=("table", "json"), default="table")
    common.add_executor_args(dia)


@common.shows_compiles
def cmd(args, out):
    model, hardware = common.target(args)
    workload = common.workload(args)
    serving = common.run_serving(args)
    result = simulate(model, hardware, serving, workload, keep_requests=False)
    diag = diagnose(result, model, hardware, serving, workload)
    lines = None if args.no_what_if else what_if(model, hardware, serving, workload,
                                                  args.what_if or DEFAULT_CHANGES, base=result, **common.executor(args))
    if args.format == "json":
        out.write(report.to_json(diagnosis_to_dict(diag, lines)) + "\n")
    else:
        out.write(format_diagnosis(diag, lines) + "\n")
    return 0
