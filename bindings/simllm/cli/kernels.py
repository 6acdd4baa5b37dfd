"""``simllm kernels import``: fit shape-aware efficiency tables from aiconfigurator-core's measured
kernel latencies and write them where a hardware preset's ``kernel_tables`` can name them."""
from pathlib import Path

from simllm.calibration import kernels
from simllm.config.hardware import load_hardware
from simllm.errors import ConfigError
from simllm.text import table


def add_parser(sub):
    ker = sub.add_parser("kernels", help="import shape-aware kernel efficiency tables (aiconfigurator-core)")
    action = ker.add_subparsers(dest="kernels_command", metavar="ACTION")
    action.required = True
    imp = action.add_parser("import", help="fit tables for one system and framework (or --all)")
    imp.add_argument("--system", help="aiconfigurator-core system: " + ", ".join(kernels.SYSTEMS))
    imp.add_argument("--framework", choices=kernels.FRAMEWORKS, default="vllm")
    imp.add_argument("--framework-version", default=None, help="the framework version's folder (default: newest)")
    imp.add_argument("--hardware", default=None,
                     help="simllm hardware preset or YAML whose peaks define the roofline (default: the system's preset)")
    imp.add_argument("--all", action="store_true", help="every system and framework simllm has a preset for")
    imp.add_argument("--output", "-o", default="kernels",
                     help="folder; tables go to OUTPUT/<gpu>/<framework>.json (default %(default)s)")


def cmd(args, out):
    if args.all:
        jobs = [(s, fw) for s in kernels.SYSTEMS for fw in kernels.FRAMEWORKS]
    elif args.system:
        jobs = [(args.system, args.framework)]
    else:
        raise ConfigError("kernels import: give --system SYSTEM (or --all)")
    root, version = kernels.package_root()
    rows = []
    for system, framework in jobs:
        preset = args.hardware or kernels.SYSTEMS.get(system)
        if preset is None:
            raise ConfigError(f"--system {system[:100]}: no simllm preset for it; give --hardware")
        hardware = load_hardware(preset, with_tables=False)
        data = kernels.import_tables(system, framework, hardware, root=root, package_version=version,
                                     version=args.framework_version)
        path = kernels.write_tables(data, Path(args.output) / data["gpu"])
        for name, used, held, err, clipped in kernels.fit_rows(data):
            rows.append((system, f"{framework} {data['framework_version']}", name, used, held,
                         "-" if err is None else f"{100 * err:.1f}%", clipped))
        out.write(f"wrote {path}\n")
    out.write(f"\nheld-out fit error ({kernels.PACKAGE} {version}; median |predicted/measured - 1|)\n")
    out.write(table(("system", "framework", "table", "rows", "held out", "median error", "clipped >1"), rows) + "\n")
    return 0
