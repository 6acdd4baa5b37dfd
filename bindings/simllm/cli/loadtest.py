"""``simllm loadtest``: EvalScope-style load test over concurrencies or request rates."""
import logging
import sys

from simllm.analysis import loadtest
from simllm.cli import common
from simllm.fileio import write_output
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_loadtest
from simllm.report.progress import Progress


def add_parser(sub):
    lt = sub.add_parser("loadtest", help="EvalScope-style load test: one simulation per concurrency or request rate, "
                                         "a table, and the concurrency past which throughput stops rising")
    common.add_target(lt)
    common.add_run_args(lt, load=False)
    pts = lt.add_argument_group("load points (exactly one of --parallel, --concurrency-range, --request-rate)")
    pts.add_argument("--parallel", nargs="+", type=common.positive_int, metavar="N",
                     help="closed-loop concurrencies, e.g. 1 10 50 100 200 (evalscope perf --parallel)")
    pts.add_argument("--number", nargs="+", type=common.positive_int, metavar="N",
                     help="requests per point, paired element by element with --parallel (evalscope perf --number; "
                          f"default {loadtest.DEFAULT_NUMBER_PER_CLIENT} per client); with the other modes also one value for all "
                          "points")
    pts.add_argument("--concurrency-range", metavar="START:STOP:STEP",
                     help="concurrencies START..STOP: STEP xF multiplies (1:256:x2), +N adds (16:128:+16)")
    pts.add_argument("--request-rate", dest="request_rates", nargs="+", type=common.rate, metavar="RPS",
                     help="open-loop request rates in req/s (requests per point: --number, else the workload's num_prompts, "
                          f"default {common.WORKLOAD.num_prompts})")
    pts.add_argument("--min-gain", type=common.unit, default=loadtest.DEFAULT_MIN_GAIN,
                     help="throughput gain per step below which it counts as saturated (default %(default)s = 10%%)")
    pts.add_argument("--slo-p99-latency-ms", type=common.positive_float, metavar="MS",
                     help="recommend only points whose P99 end-to-end latency is within this")
    common.add_executor_args(lt)
    lout = lt.add_argument_group("output")
    lout.add_argument("--format", choices=("table", "json", "csv"), default="table")
    lout.add_argument("--output", "-o", help="also write the result to this file (.csv: CSV, else JSON)")
    lout.add_argument("--plot", metavar="DIR", help="write throughput and latency vs load PNGs here (simllm[plot])")
    common.add_report_arg(lout, "the load points with error bands, throughput and latency against the load with "
                                "the knee marked")
    common.add_band_args(lout)
    lout.add_argument("--quiet", "-q", action="store_true", help="no progress bar; print the recommendation alone")
    lout.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


@common.shows_compiles
def cmd(args, out):
    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    model, hardware = common.target(args)
    workload = common.workload(args)
    serving = common.run_serving(args)
    common.check_report(args)
    record = common.band_record(args) if args.report else None  # the bands are the report's; a bad record fails here
    points = loadtest.plan_points(parallel=args.parallel, number=args.number,
                                  concurrency_range=args.concurrency_range, request_rates=args.request_rates,
                                  default_num_prompts=workload.num_prompts)
    with Progress(len(points), "simllm loadtest", enabled=not args.quiet) as bar:
        result = loadtest.run_loadtest(model, hardware, serving, workload, points, progress=bar,
                                       min_gain=args.min_gain, slo_p99_latency_ms=args.slo_p99_latency_ms,
                                       **common.executor(args))
    if not args.quiet:
        for w in result.results[0].warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
    as_csv = loadtest.loadtest_to_csv(result)
    as_json = report.to_json(loadtest.loadtest_to_json(result)) + "\n"
    if args.output:
        write_output(args.output, as_csv if args.output.lower().endswith(".csv") else as_json)
    if args.plot:
        plot_loadtest(loadtest.plot_rows(result), args.plot)
    common.write_report(args, lambda: html_report.loadtest_report(
        result, [common.bands_of(r.summary, serving.framework, record) for r in result.results]))
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
