"""``simllm presets``: the shipped model, hardware and workload presets."""
from simllm.config import presets


def add_parser(sub):
    pre = sub.add_parser("presets", help="list the shipped model, hardware and workload presets")
    pre.add_argument("kind", nargs="?", choices=presets.KINDS)


def cmd(args, out):
    for kind in [args.kind] if args.kind else presets.KINDS:
        names = presets.preset_names(kind)
        out.write(f"{kind}: {', '.join(names) if names else '(none)'}\n")
    return 0
