"""``simllm sweep``: a grid or Monte Carlo sweep of configurations in parallel."""
import logging

from simllm.cli import common
from simllm.fileio import check_output
from simllm.report import html as html_report
from simllm.report.plots import plot_sweep
from simllm.report.progress import Progress
from simllm.search import sweep as sw
from simllm.search.spec import load_sweep_spec
from simllm.text import to_json


def add_parser(sub):
    swp = sub.add_parser("sweep", help="simulate a grid or Monte Carlo sweep of configurations in parallel: one "
                                       "table, P5-P95 bands over seeds, resumable output")
    swp.add_argument("spec", metavar="SPEC.yaml",
                     help="sweep spec: base (model, hardware, serving, workload), grid, samples, num_samples, "
                          "seeds, slo, output")
    common.add_executor_args(swp, chunks=True)
    swp.add_argument("--output", "-o", metavar="FILE",
                     help="results .csv or .parquet (default: the spec's output:); journaled as chunks finish, "
                          "so rerunning the same command resumes an interrupted sweep")
    swp.add_argument("--plot", metavar="DIR", help="PNGs of key metrics vs the first numeric grid path (simllm[plot])")
    common.add_report_arg(swp, "the configurations with P5-P95 bands, metrics over the grid, the Pareto frontier "
                               "with each point's configuration")
    swp.add_argument("--format", choices=("table", "json", "csv"), default="table")
    swp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    swp.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


@common.shows_compiles
def cmd(args, out):
    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    run_on = common.executor(args)
    spec = load_sweep_spec(args.spec)
    if args.output:
        check_output(args.output, "--output")
    common.check_report(args)
    bar = Progress(0, "simllm sweep", enabled=not args.quiet)  # run_spec sets its total
    try:
        result = sw.run_spec(spec, run_on["executor"] or "threads", workers=run_on["workers"],
                             scheduler=run_on["scheduler"], chunk_size=args.chunk_size, progress=bar,
                             output=args.output)
    except KeyboardInterrupt:
        done = f"{bar.done} of {bar.total} simulations done"
        output = args.output or spec.output
        if output:  # the journal next to the output keeps the finished chunks
            raise KeyboardInterrupt(f"{done}, resume with the same command") from None
        raise KeyboardInterrupt(f"{done}; pass -o FILE to journal a sweep and resume it") from None
    finally:
        bar.close()
    if args.plot:
        plot_sweep(result, args.plot)
    common.write_report(args, lambda: html_report.sweep_report(result, subtitle=args.spec))
    if args.format == "json":
        out.write(to_json(sw.result_to_dict(result)))  # strict JSON: NaN -> null
    elif args.format == "csv":
        out.write(sw.table_to_csv(result.table))
    else:
        out.write(sw.format_sweep(result) + "\n")
    return 0
