"""``simllm profile``: time kernels on this machine's GPU and write a calibrated hardware profile
and the shape-aware kernel tables it names."""
import sys

from simllm.calibration import profile
from simllm.config.hardware import load_hardware
from simllm.config.serving import FRAMEWORKS
from simllm.errors import ConfigError

TABLES_FRAMEWORK = "vllm"  # whose kernel-table file profile writes when --framework is not given


def add_parser(sub):
    prof = sub.add_parser("profile", help="time GEMMs, attention and copies on this machine's GPU (needs "
                                          "simllm[profile]) and write a calibrated hardware profile with kernel tables")
    prof.add_argument("--hardware", required=True, metavar="BASE",
                      help="datasheet profile of the GPU (preset or YAML): peaks kept, efficiencies measured")
    prof.add_argument("--output", "-o", required=True, help="hardware YAML to write")
    prof.add_argument("--raw-output", help="raw measurements (.json or .csv; default: next to --output)")
    prof.add_argument("--device", default="cuda", help="torch device: cuda, cuda:N or cpu (default %(default)s)")
    prof.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16", help="GEMM dtype (default %(default)s)")
    prof.add_argument("--size", choices=("full", "tiny"), default="full", help="shape grid (tiny: seconds, for tests)")
    prof.add_argument("--framework", choices=FRAMEWORKS, default=None,
                      help="kernel tables: which framework's file to write, TABLES_DIR/<gpu>/FRAMEWORK.json "
                           f"(default: {TABLES_FRAMEWORK})")
    prof.add_argument("--tables-dir", default=None, metavar="TABLES_DIR",
                      help="kernel tables: folder of <gpu>/<framework>.json, named by the YAML's kernel_tables "
                           "(default: kernels next to --output)")
    prof.add_argument("--no-tables", action="store_true",
                      help="time and write only the scalar factors (no kernel tables; the base's kernel_tables kept)")


def cmd(args, out):
    if args.no_tables and (args.framework is not None or args.tables_dir is not None):
        raise ConfigError("--no-tables writes no kernel tables: drop --framework / --tables-dir")
    framework = args.framework or TABLES_FRAMEWORK
    base = load_hardware(args.hardware)
    result = profile.profile_hardware(base, device=args.device, dtype=args.dtype, size=args.size,
                                      progress=lambda line: print(f"simllm: {line}", file=sys.stderr),
                                      tables=not args.no_tables)
    tables = None if args.no_tables else profile.kernel_tables(result, base, framework)
    yaml_path, raw_path, tables_path = profile.write_profile(result, base, args.output, args.raw_output,
                                                             tables=tables, tables_dir=args.tables_dir)
    text = profile.format_profile(result)
    if tables is not None:
        text += "\n" + profile.format_tables(tables)
    written = f"{yaml_path} and {raw_path}" if tables_path is None else f"{yaml_path}, {tables_path} and {raw_path}"
    out.write(text + f"\nwrote {written}\n")
    return 0
