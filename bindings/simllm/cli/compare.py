"""``simllm compare``: one workload on several GPUs and/or models side by side."""
from simllm.analysis import compare as cmp
from simllm.cli import common
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_compare
from simllm.sim.slo import parse_goodput


def add_parser(sub):
    cmpp = sub.add_parser("compare", help="one workload on several hardware presets and/or models side by side, "
                                          "with each metric's ratio to the first column")
    cmpp.add_argument("--model", nargs="+", default=[common.DEFAULT_MODEL], metavar="MODEL",
                      help=f"model presets, simllm YAML or config.json files (default {common.DEFAULT_MODEL})")
    cmpp.add_argument("--hardware", nargs="+", default=[common.DEFAULT_HARDWARE], metavar="HARDWARE",
                      help=f"hardware presets or YAML files (default {common.DEFAULT_HARDWARE}); the columns are every "
                           "model on the first hardware, then on the next")
    common.add_run_args(cmpp)
    common.add_disagg_args(cmpp, "disaggregated prefill/decode (any of these adds a P/D column after each "
                                 "aggregated one)")
    common.add_executor_args(cmpp)
    cout = cmpp.add_argument_group("output")
    cout.add_argument("--metrics", nargs="+", metavar="KEY",
                      help="rows: summary keys (default: TTFT/TPOT/E2E mean and P99, request/s, output tok/s, "
                           "output tok/s per GPU, MFU, MBU, KV usage, error rate)")
    cout.add_argument("--metric-percentiles", default="50,90,95,99", help="comma-separated percentiles (default %(default)s)")
    cout.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for request_goodput, e.g. ttft:500 tpot:50")
    cout.add_argument("--format", choices=("table", "json", "csv"), default="table")
    cout.add_argument("--output", "-o", metavar="FILE", help="also write the comparison to FILE.json, .csv or .txt")
    cout.add_argument("--plot", metavar="DIR",
                      help="write bar charts of output tok/s per GPU, mean TTFT and mean TPOT here (needs simllm[plot])")
    common.add_report_arg(cout, "every metric side by side with error bands, bar charts with the bands as error bars")
    common.add_band_args(cout)


@common.shows_compiles
def cmd(args, out):
    workload = common.workload(args)
    serving = common.run_serving(args)
    percentiles = common.percentiles(args.metric_percentiles)
    if args.output:
        cmp.check_save_path(args.output)  # a bad name fails before simulating
    common.check_report(args)
    record = common.band_record(args)
    disagg = common.disagg_config(args)
    comparison = cmp.compare(args.model, args.hardware, serving, workload, args.metrics or cmp.DEFAULT_METRICS,
                             percentiles=percentiles, goodput=parse_goodput(args.goodput), disagg=disagg,
                             **common.executor(args))
    if args.output:
        cmp.save_comparison(comparison, args.output)
    if args.plot:
        plot_compare(comparison, args.plot)
    bands = [common.bands_of(c.summary, serving.framework, record) for c in comparison.columns]
    common.write_report(args, lambda: html_report.compare_report(comparison, bands,
                                                                 subtitle=f"simllm compare: {workload.describe()}"))
    if args.format == "json":
        data = cmp.comparison_to_dict(comparison)
        if record is not None:
            for column, (b, reasons) in zip(data["columns"], bands):
                column.update(common.band_json(b, reasons))
        out.write(report.to_json(data) + "\n")
    elif args.format == "csv":
        out.write(cmp.comparison_to_csv(comparison))
    else:
        text = cmp.format_comparison(comparison, title=f"simllm compare: {workload.describe()}")
        band_text = report.format_band_table([(c.label, b, r) for c, (b, r) in zip(comparison.columns, bands)],
                                             first="column")
        out.write(text + ("\n\n" + band_text if band_text else "") + "\n")
    return 0
