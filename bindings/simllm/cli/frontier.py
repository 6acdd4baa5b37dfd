"""``simllm frontier``: the Pareto frontier of a results table."""
from simllm.cli import common
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_frontier
from simllm.search import pareto as fr


def add_parser(sub):
    fr = sub.add_parser("frontier", help="the Pareto frontier of a results table: output tok/s per GPU vs "
                                         "per-user speed (or vs P99 TTFT)")
    fr.add_argument("results", metavar="RESULTS", help="a CSV with a header (a sweep's table) or a JSON list of rows "
                                                      "with metric columns")
    fr.add_argument("--x", default="output_throughput_per_user",
                    help="column on the x axis (default %(default)s = 1000 / mean_tpot_ms; "
                         "p99_ttft_ms for the TTFT frontier); *_ms columns, error_rate and cost are minimised, "
                         "others maximised")
    fr.add_argument("--y", default="output_throughput_per_gpu",
                    help="column on the y axis (default %(default)s = output_throughput / GPUs)")
    fr.add_argument("--format", choices=("table", "json"), default="table")
    common.add_report_arg(fr, "the frontier table and figure, hover a point for its configuration")
    fr.add_argument("--plot", metavar="DIR", help="write the frontier PNG here (needs simllm[plot])")
    fr.add_argument("--per-seed", action="store_true",
                    help="a point per row; by default the rows of one configuration (a sweep's seeds) make one "
                         "point, the mean over its seeds, with their min-max")


def cmd(args, out):
    common.check_report(args)
    rows = fr.read_rows(args.results)
    if not args.per_seed:
        fr.frontier_rows(rows, args.x, args.y)  # the columns' check, on the table as given
        rows, _ = fr.aggregate_seeds(rows, args.x, args.y)
    idx = fr.frontier_rows(rows, args.x, args.y)
    if args.plot:
        plot_frontier(rows, idx, args.plot, x=args.x, y=args.y)
    common.write_report(args, lambda: html_report.frontier_report(rows, args.x, args.y, frontier_idx=idx,
                                                                  subtitle=args.results))
    if args.format == "json":
        out.write(report.to_json(fr.frontier_to_dict(rows, idx, args.x, args.y)) + "\n")
    else:
        out.write(fr.format_frontier(rows, idx, args.x, args.y) + "\n")
    return 0
