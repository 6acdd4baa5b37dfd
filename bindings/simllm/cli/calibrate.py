"""``simllm calibrate``: fit a hardware profile's efficiency factors and a framework profile's
overheads to measured results."""
import sys

from simllm.calibration import fit as calibrate
from simllm.calibration.fit import DEFAULT_FRAMEWORK_FACTORS, FACTORS, describe_bound_hit
from simllm.calibration.validate import METRICS, profile_of
from simllm.cli import common
from simllm.config.framework import load_framework
from simllm.config.hardware import load_hardware
from simllm.config.presets import preset_names, refuse_protected
from simllm.fileio import check_output
from simllm.report import text as report


def add_parser(sub):
    cal = sub.add_parser("calibrate", help="fit a hardware profile's efficiency factors and a framework profile's "
                                           "overheads to measured results")
    common.add_measured(cal)
    cal.add_argument("--hardware", required=True, nargs="+", metavar="BASE",
                     help="the profile to calibrate (preset or YAML); measurements of other GPUs are left out. "
                          "Several presets when only framework (or measurement) quantities are fitted: those do "
                          "not depend on the GPU, each point runs on its own")
    cal.add_argument("--output", "-o", default=None,
                     help="calibrated hardware YAML to write (needed when GPU factors are fitted)")
    cal.add_argument("--framework", choices=preset_names("frameworks"), default="vllm",
                     help="fit the measurements of this shipped framework profile (a backend's current release, or "
                          "an older one a measurement format names), starting from it (default %(default)s)")
    cal.add_argument("--framework-output", metavar="YAML",
                     help="framework profile YAML to write the fitted framework quantities to (default: your own "
                          "profile NAME.yaml in frameworks/ of simllm's user config folder, ~/.config/simllm on "
                          "Linux, which --framework NAME then uses before the shipped one); written only when some "
                          "are fitted; never inside simllm's package or shipped presets")
    cal.add_argument("--fit", nargs="+", metavar="FACTOR", default=None,
                     help=f"factors to fit, of {', '.join(FACTORS)} (default: the framework's "
                          f"{', '.join(DEFAULT_FRAMEWORK_FACTORS)} when the GPU has kernel tables for it, else all)")
    cal.add_argument("--fit-metrics", nargs="+", choices=METRICS, default=list(calibrate.FIT_METRICS),
                     metavar="METRIC", help=f"measured metrics whose log errors the fit minimises, of "
                                            f"{', '.join(METRICS)} (default: {' and '.join(calibrate.FIT_METRICS)}); "
                                            f"tpot alone fits per-step quantities without what a TTFT carries "
                                            f"beyond the engine")
    cal.add_argument("--max-iterations", type=common.positive_int, default=12, help="Levenberg-Marquardt iterations")
    cal.add_argument("--format", choices=("table", "json"), default="table")


@common.shows_compiles
def cmd(args, out):
    for path, flag in ((args.output, "-o"), (args.framework_output, "--framework-output")):
        if path:
            refuse_protected(path, flag)  # before the fit, not after it
            check_output(path, flag)
    bases = [load_hardware(h) for h in args.hardware]
    base = bases[0]
    points, shape = common.measured_points(args, args.hardware[0] if len(args.hardware) == 1 else "")
    wanted = set(args.hardware) | {b.gpu for b in bases}
    points = [p for p in points if p.hardware in wanted and profile_of(p.measurement) == args.framework]
    progress = None if args.format == "json" else (lambda line: print(f"simllm: {line}", file=sys.stderr))
    fit = calibrate.calibrate(points, base, args.fit, args.max_iterations, shape, args.num_prompts, progress=progress,
                              framework=load_framework(args.framework), metrics=tuple(args.fit_metrics))
    path, fw_path = calibrate.write_calibration(fit, args.output, args.framework_output)
    if args.format == "json":
        out.write(report.to_json({"output": str(path) if path else None, "framework": args.framework,
                                  "framework_output": str(fw_path) if fw_path else None, "factors": fit.factors,
                                  "bound_hits": [describe_bound_hit(h) for h in fit.bound_hits],
                                  "initial": fit.initial, "fit_error": fit.fit_error, "loo_error": fit.loo_error,
                                  "fitted_on": calibrate.describe_points(fit.points),
                                  "iterations": fit.iterations, "evaluations": fit.evaluations}) + "\n")
    else:
        out.write(report.format_calibration(fit, args.framework, path, fw_path) + "\n")
        if fw_path and not args.framework_output:
            out.write(f"--framework {args.framework} now uses it before the shipped profile (delete it to go back)\n")
    return 0
