"""``simllm run``: simulate serving a workload (vllm bench serve's flags and result keys)."""
import logging
import sys

from simllm.analysis.diagnose import diagnose, format_run_section
from simllm.cli import common
from simllm.errors import ConfigError
from simllm.fileio import check_output
from simllm.formats import exports
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_run
from simllm.report.progress import Progress
from simllm.sim.disagg import simulate_disagg
from simllm.sim.simulate import simulate
from simllm.sim.slo import parse_goodput


def add_parser(sub):
    run = sub.add_parser("run", help="simulate serving a workload: TTFT, TPOT, ITL, latency, throughput, utilisation")
    common.add_target(run)
    common.add_run_args(run)
    common.add_disagg_args(run)
    out = run.add_argument_group("output")
    out.add_argument("--format", choices=("table", "json"), default="table")
    out.add_argument("--metric-percentiles", default="50,90,95,99", help="comma-separated percentiles (default %(default)s)")
    out.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for request_goodput, e.g. ttft:500 tpot:50")
    out.add_argument("--output", "-o", metavar="FILE",
                     help="also write the result to FILE: .json (vllm bench serve --save-result keys, plus "
                          "simllm's), .csv or .parquet (the summary as one row); see --export-format")
    out.add_argument("--export-format", choices=exports.FORMATS,
                     help="what --output holds: for .json vllm (default) or guidellm (a GuideLLM benchmarks.json); "
                          "for .csv/.parquet summary (default) or requests (one row per request)")
    out.add_argument("--plot", metavar="DIR",
                     help="write TTFT/TPOT CDFs and KV-cache/throughput-over-time PNGs here (needs simllm[plot])")
    common.add_report_arg(out, "headline with error bands, TTFT/TPOT/ITL/E2E distributions, throughput, batch size, "
                               "KV cache and queue over time")
    out.add_argument("--save-detailed", help="per-request rows to FILE.csv or FILE.parquet")
    out.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    out.add_argument("--quiet", "-q", action="store_true", help="print one summary line")
    out.add_argument("--no-fast-forward", action="store_true", help="simulate every iteration one by one (checks)")
    common.add_band_args(out)


def _no_progress(done, total):
    """Still a progress callback: the kernel then runs on a worker thread and Ctrl-C stops the run
    at once instead of when the kernel returns."""


@common.shows_compiles
def cmd(args, out):
    logging.basicConfig(level=getattr(logging, args.log_level), format="simllm: %(message)s")
    model, hardware = common.target(args)
    workload = common.workload(args)
    percentiles = common.percentiles(args.metric_percentiles)
    serving = common.run_serving(args)
    if args.export_format and not args.output:
        raise ConfigError("--export-format needs --output FILE", source="command line")
    if args.output:
        exports.resolve_format(args.output, args.export_format)  # a bad name fails before simulating
        check_output(args.output, "--output")
    if args.save_detailed:
        check_output(args.save_detailed, "--save-detailed")
    common.check_report(args)
    record = None if args.quiet and not args.report else common.band_record(args)  # a bad record fails before simulating
    disagg = common.disagg_config(args)
    # --save-detailed alone does not keep the rows in memory: simulate writes them (a long
    # summary-only run streams them to the file as its requests end).
    keep_requests = bool(args.plot or args.report or args.export_format in ("guidellm", "requests")
                         or (args.save_detailed and (args.output or disagg is not None)))
    # A progress bar for long runs only (a million requests and more), on a terminal.
    long_run = workload.num_prompts >= common.PROGRESS_MIN_REQUESTS and not args.quiet
    with Progress(workload.num_prompts, "simllm run", enabled=long_run) as bar:
        kwargs = dict(fast_forward=not args.no_fast_forward, percentiles=percentiles,
                      goodput=parse_goodput(args.goodput), keep_requests=keep_requests,
                      progress=(lambda done, _total: bar.advance(done - bar.done)) if bar.active else _no_progress)
        if disagg is None:
            result = simulate(model, hardware, serving, workload, save_detailed=args.save_detailed, **kwargs)
        else:
            result = simulate_disagg(model, hardware, serving, workload, disagg, **kwargs)
    if args.save_detailed and disagg is not None:
        result.save_detailed(args.save_detailed)
    if args.output:  # vLLM JSON: the per-request lists only with --save-detailed, as vllm bench serve
        exports.export(result, args.output, args.export_format, detailed=bool(args.save_detailed))
    if args.plot:
        plot_run(result, args.plot)
    bands, reasons = common.bands_of(result.summary, serving.framework, record)
    common.write_report(args, lambda: html_report.run_report(result, bands=bands, reasons=reasons,
                                                             percentiles=percentiles))
    if args.quiet:
        out.write(report.format_run_line(result) + "\n")
    elif args.format == "json":
        for w in result.warnings:
            print(f"simllm: warning: {w}", file=sys.stderr)
        extra = common.band_json(bands, reasons) if record is not None else {}
        out.write(report.to_json({**result.to_dict(), **extra}) + "\n")
    else:
        # diagnose's what-ifs re-simulate one aggregated engine: not a disaggregated run's
        diag = None if disagg else diagnose(result, model, hardware, serving, workload)
        out.write(report.format_run(result, percentiles, diagnosis=format_run_section(diag) if diag else None, bands=bands,
                                    calibration=reasons) + "\n")
    return 0
