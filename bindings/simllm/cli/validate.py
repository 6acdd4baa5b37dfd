"""``simllm validate``: simulate measured serving results and report the prediction error."""
from dataclasses import replace

from simllm.calibration import validate as accuracy
from simllm.calibration.record import build_record, write_record
from simllm.cli import common
from simllm.config.framework import load_framework
from simllm.config.hardware import FACTOR_KEYS, load_hardware
from simllm.report import html as html_report
from simllm.report import text as report
from simllm.report.plots import plot_validation


def add_parser(sub):
    val = sub.add_parser("validate", help="simulate measured serving results and report the prediction error")
    common.add_measured(val)
    val.add_argument("--hardware", default="", help="hardware of measurements that do not name one (JSON results)")
    val.add_argument("--factors-from", metavar="PROFILE",
                     help="apply this calibrated profile's factors to every point's hardware (cross-system test)")
    val.add_argument("--framework-profile", metavar="PROFILE",
                     help="simulate every point with this framework profile (name or YAML, e.g. one simllm "
                          "calibrate wrote) instead of its backend's shipped one")
    val.add_argument("--plot", metavar="DIR", help="write predicted-vs-measured PNGs here (needs simllm[plot])")
    common.add_report_arg(val, "the error per metric, backend and mode, predicted-vs-measured scatters with each "
                               "point's source on hover")
    val.add_argument("--format", choices=("table", "json"), default="table")
    val.add_argument("--write-accuracy", metavar="FILE.json",
                     help="also write every predicted point's features and measured and predicted TTFT, TPOT and "
                          "throughput, with provenance, to this accuracy record (what run/compare/optimize's error "
                          "bands come from; the shipped one is configs/accuracy.json)")
    common.add_executor_args(val)


@common.shows_compiles
def cmd(args, out):
    common.check_report(args)
    points, shape = common.measured_points(args, args.hardware)
    hardware_for = _with_factors_of(args.factors_from) if args.factors_from else None
    run_on = common.executor(args)
    bounded = accuracy.with_bounds(points, args.num_prompts, shape, run_on["workers"] or 0,
                                   executor=run_on["executor"], scheduler=run_on["scheduler"])
    framework_for = None
    if args.framework_profile:
        profile = load_framework(args.framework_profile)
        framework_for = lambda _name: profile  # noqa: E731
    points = accuracy.predict_points(bounded, hardware_for, args.num_prompts, shape, run_on["workers"] or 0,
                                     executor=run_on["executor"], scheduler=run_on["scheduler"],
                                     framework_for=framework_for)
    summary = accuracy.error_summary(points)
    by = accuracy.error_summary_by(points, lambda p: p.measurement.backend or "unknown")
    by_mode = accuracy.error_summary_by(points, lambda p: p.measurement.mode)
    if args.plot:
        plot_validation(points, args.plot)
    common.write_report(args, lambda: html_report.validate_report(points, summary, {"backend": by, "mode": by_mode},
                                                                  subtitle=" ".join(map(str, args.measured))))
    if args.write_accuracy:
        settings = {"filters": [f.pattern for f in args.filter], "min_length_ratio": args.min_length_ratio,
                    "num_prompts": args.num_prompts, "factors_from": args.factors_from,
                    "model_map": args.model_map or [], "hardware_map": args.hardware_map or []}
        write_record(args.write_accuracy, build_record(points, args.measured, settings))
    if args.format == "json":
        rows = [{"source": p.measurement.where, "model": p.model, "hardware": p.hardware,
                 "backend": p.measurement.backend, "mode": p.measurement.mode, "skipped": p.reason or None,
                 **{f"measured_{k}_ms": getattr(p.measurement, f"{k}_ms") for k in accuracy.METRICS},
                 **{f"predicted_{k}_ms": (p.predicted or {}).get(k) for k in accuracy.METRICS},
                 **{f"peak_bound_{k}_ms": (p.bound or {}).get(k) for k in accuracy.METRICS}} for p in points]
        out.write(report.to_json({"points": rows, "summary": summary, "by_backend": by,
                                    "by_mode": by_mode}) + "\n")
    else:
        out.write(report.format_validation(points, summary, {"backend": by, "mode": by_mode}) + "\n")
    return 0


def _with_factors_of(profile):
    """Point hardware -> that preset with ``profile``'s efficiency factors (the cross-system test)."""
    source = load_hardware(profile)
    factors = {k: getattr(source, k) for k in FACTOR_KEYS}

    def hardware_for(name):
        return replace(load_hardware(name), **factors)

    return hardware_for
