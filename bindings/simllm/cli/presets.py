"""``simllm presets``: the shipped model, hardware, workload and framework presets, each with its
key figures and each figure's source as the preset's YAML comments cite it."""
from simllm.config import catalog, presets
from simllm.report import text as report


def add_parser(sub):
    pre = sub.add_parser("presets", help="list the shipped presets with their key figures and each figure's source",
                         description="List the shipped presets: each one's key figures and, for each figure, its "
                                     "source as the preset's YAML comments cite it (the references below it).")
    pre.add_argument("kind", nargs="?", choices=presets.KINDS, help="only this kind (default: all four)")
    pre.add_argument("name", nargs="?", help="only this preset of KIND: a preset name (h100-sxm) or a YAML file of that kind")
    pre.add_argument("--names", action="store_true", help="names only, one line per kind")
    pre.add_argument("--format", choices=("table", "json"), default="table")


def cmd(args, out):
    kinds = [args.kind] if args.kind else list(presets.KINDS)
    if args.name:
        infos = [catalog.describe_preset(args.kind, args.name)]
    else:
        infos = [info for kind in kinds for info in catalog.describe_presets(kind)]
    if args.format == "json":
        out.write(report.to_json(catalog.presets_to_dict(infos, names_only=args.names)) + "\n")
    else:
        out.write(report.format_presets(infos, names_only=args.names) + "\n")
    return 0
