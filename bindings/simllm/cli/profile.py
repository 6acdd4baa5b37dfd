"""``simllm profile``: time kernels on this machine's GPU and write a calibrated hardware profile."""
import sys

from simllm.calibration import profile
from simllm.config.hardware import load_hardware


def add_parser(sub):
    prof = sub.add_parser("profile", help="time GEMMs, attention and copies on this machine's GPU (needs "
                                          "simllm[profile]) and write a calibrated hardware profile")
    prof.add_argument("--hardware", required=True, metavar="BASE",
                      help="datasheet profile of the GPU (preset or YAML): peaks kept, efficiencies measured")
    prof.add_argument("--output", "-o", required=True, help="hardware YAML to write")
    prof.add_argument("--raw-output", help="raw measurements (.json or .csv; default next to --output)")
    prof.add_argument("--device", default="cuda", help="torch device: cuda, cuda:N or cpu (default cuda)")
    prof.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16", help="GEMM dtype (default bf16)")
    prof.add_argument("--size", choices=("full", "tiny"), default="full", help="shape grid (tiny: seconds, for tests)")


def cmd(args, out):
    base = load_hardware(args.hardware)
    result = profile.profile_hardware(base, device=args.device, dtype=args.dtype, size=args.size,
                                      progress=lambda line: print(f"simllm: {line}", file=sys.stderr))
    yaml_path, raw_path = profile.write_profile(result, base, args.output, args.raw_output)
    out.write(profile.format_profile(result) + f"\nwrote {yaml_path} and {raw_path}\n")
    return 0
