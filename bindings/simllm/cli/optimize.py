"""``simllm optimize``: the configuration that meets SLOs with the most goodput per GPU."""
from simllm.cli import common
from simllm.fileio import write_output
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_frontier, require_matplotlib
from simllm.report.progress import Progress
from simllm.search import optimize as sla


def add_parser(sub):
    opt = sub.add_parser("optimize", help="search a grid of engine settings and hardware for the configuration that "
                                          "meets SLOs with the most goodput per GPU (or the lowest cost per token)")
    opt.add_argument("--model", default=common.DEFAULT_MODEL,
                     help=f"model preset name, simllm YAML, or HuggingFace config.json (default {common.DEFAULT_MODEL})")
    opt.add_argument("--hardware", nargs="+", default=[common.DEFAULT_HARDWARE], metavar="HARDWARE",
                     help=f"hardware presets or YAML files (default {common.DEFAULT_HARDWARE}); several make a hardware axis "
                          "unless --over has hardware=...")
    common.add_run_args(opt)
    srch = opt.add_argument_group("search")
    srch.add_argument("--slo", nargs="+", required=True, metavar="SLO",
                      help='constraints, e.g. "ttft_p99<=2000,tpot_p99<=50": METRIC<=|<|>=|>NUMBER, METRIC one of '
                           "ttft|tpot|itl|e2el_mean|median|pNN or a summary key (error_rate<=1%%)")
    srch.add_argument("--over", nargs="+", metavar="NAME=V1,V2",
                      help="the grid (cartesian product): tp=1,2,4 replicas=1,2 max_num_seqs=64,128,256 "
                           "max_num_batched_tokens=... dtype=bf16,fp8 hardware=h100-sxm,h200-sxm, or any engine "
                           "setting by its ServingConfig name")
    srch.add_argument("--over-disagg", nargs="+", metavar="NAME=V1,V2",
                      help="also search disaggregated prefill/decode configurations (the product of these): "
                           "prefill_instances=1,2 decode_instances=1,2 prefill_tp=2,4 decode_tp=4,8, or any pool "
                           "setting as prefill_NAME / decode_NAME; the answer says whether aggregated or "
                           "disaggregated wins")
    srch.add_argument("--max-gpus", type=common.nonnegative_int, default=0, metavar="N",
                      help="GPU budget: configurations over it are rejected unsimulated (default %(default)s: none)")
    srch.add_argument("--objective", choices=("goodput_per_gpu", "cost_per_token"), default="goodput_per_gpu",
                      help="highest request goodput per GPU (default) or lowest USD per million output tokens")
    srch.add_argument("--price", nargs="+", metavar="HARDWARE=USD",
                      help="USD per GPU-hour per hardware preset (needed by --objective cost_per_token), "
                           "e.g. h100-sxm=2.5")
    srch.add_argument("--top", type=common.positive_int, default=5, help="feasible configurations listed (default 5)")
    srch.add_argument("--noise-seeds", type=common.positive_int, default=sla.NOISE_SEEDS, metavar="N",
                      help="workload draws on which the answer and the runner-up are compared, to tell a lead "
                           "from noise (default %(default)s; 1: no check)")
    common.add_disagg_args(opt, "the disaggregated grid's base (with --over-disagg; alone: one disaggregated "
                                "configuration beside the aggregated grid)")
    common.add_executor_args(opt, chunks=True)
    oout = opt.add_argument_group("output")
    oout.add_argument("--format", choices=("table", "json"), default="table")
    oout.add_argument("--output", "-o", metavar="FILE", help="also write the result as JSON to FILE")
    oout.add_argument("--plot", metavar="DIR", help="write the frontier PNGs (per-user speed and P99 TTFT) here, the "
                                                    "answer marked (needs simllm[plot])")
    common.add_report_arg(oout, "the answer, the ranked configurations with error bands, the Pareto frontiers with "
                                "each configuration's flags on hover")
    oout.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    common.add_band_args(oout)


@common.shows_compiles
def cmd(args, out):
    workload = common.workload(args)
    serving = common.run_serving(args)
    slos = sla.parse_slo(args.slo)
    over = sla.parse_over(args.over)
    over_disagg = sla.parse_over_disagg(args.over_disagg)
    disagg = common.disagg_config(args)
    prices = sla.parse_prices(args.price)
    if args.plot:
        require_matplotlib()  # fail before simulating when matplotlib is missing
    common.check_report(args)
    run_on = common.executor(args)
    record = common.band_record(args)
    total = sla.grid_size(over, args.hardware, over_disagg, disagg is not None)
    with Progress(total, "simllm optimize", enabled=not args.quiet) as bar:
        result = sla.optimize(args.model, args.hardware, serving, workload, slos, over=over,
                              objective=args.objective, top=args.top, prices=prices, progress=bar,
                              executor=run_on["executor"], max_workers=run_on["workers"],
                              scheduler=run_on["scheduler"], chunk_size=args.chunk_size,
                              over_disagg=over_disagg, disagg=disagg, max_gpus=args.max_gpus,
                              noise_seeds=args.noise_seeds)
    shown = result.ranked[:result.top]  # the answer first
    bands = [common.bands_of(c.summary, c.serving.framework, record) for c in shown]
    data = sla.optimize_to_dict(result)
    if record is not None:
        for entry, (b, reasons) in zip(data["top"], bands):
            entry.update(common.band_json(b, reasons))
        if data["answer"] is not None:
            data["answer"].update(common.band_json(*bands[0]))
    as_json = report.to_json(data) + "\n"
    if args.output:
        write_output(args.output, as_json)
    if args.plot:
        rows, chosen = result.rows(), result.answer.index if result.answer else None
        for kind, x in (("speed", "output_throughput_per_user"), ("ttft", "p99_ttft_ms")):
            # with both grids, each its own frontier on one figure
            idx = (result.frontier(kind) if len(result.modes) < 2 else
                   {sla.MODES[m]: result.frontier(kind, m) for m in result.modes})
            plot_frontier(rows, idx, args.plot, chosen=chosen, x=x)
    common.write_report(args, lambda: html_report.optimize_report(result, bands))
    if args.format == "json":
        out.write(as_json)
    else:
        band_text = report.format_band_table([(f"{i} {c.label}", b, r) for i, (c, (b, r)) in
                                              enumerate(zip(shown, bands), 1)], first="rank configuration")
        out.write(sla.format_optimize(result, after_top=band_text) + "\n")
    return 0 if result.answer else 1  # 1: no configuration meets the SLOs
