"""mkdocs hook: the pages that are generated from the code at build time, so they cannot go stale.

- ``reference/cli.md``: every subcommand's usage and options, from ``simllm.cli.app.build_parser()``.
- ``reference/api.md``: the public API (``simllm.__all__``) through mkdocstrings, each name at its
  defining module, and each subpackage's overview docstring.
- ``presets/<kind>.md``: the shipped presets, their key figures and each figure's source, from
  ``simllm.config.catalog.describe_presets`` (what ``simllm presets`` prints).
"""
import argparse
import os
import re

from mkdocs.structure.files import File

import simllm
from simllm.cli.app import build_parser
from simllm.config import catalog, presets

HELP_COLUMNS = "100"  # argparse wraps help at $COLUMNS

PRESET_TITLES = {"models": "Model presets", "hardware": "Hardware presets", "workloads": "Workload presets",
                 "frameworks": "Framework profiles"}
PRESET_INTROS = {
    "models": "Each model preset is its HuggingFace `config.json` in simllm's keys (`--model NAME`). "
              "`parameters` (and, for MoE, `active_parameters`) are counted from the dimensions, beside the "
              "published count (`declared_parameters`, where the file declares one); a "
              "figure without a comment of its own is sourced by the file's *Source* paragraph (the "
              "`config.json` it was read from) or, for the parameter count, its *Parameter count* paragraph.",
    "hardware": "GPU physics only: dense datasheet peaks, memory, links (`--hardware NAME`). The serving "
                "framework's costs are in the [framework profiles](frameworks.md); `kernel_tables` names the "
                "measured efficiency tables ([Kernel tables](../guide/kernel-tables.md)).",
    "workloads": "Request streams (`--workload NAME`); `vllm bench serve`'s flags override any of their keys "
                 "([Workloads](../guide/workloads.md)).",
    "frameworks": "What the serving framework adds outside the GPU kernels, versioned (`--framework NAME`; "
                  "[Models, hardware, frameworks](../guide/models.md#frameworks)).",
}
#: The overview table's columns per kind: (heading, keys tried in order).
OVERVIEW = {
    "models": (("parameters", ("parameters",)), ("active", ("active_parameters",)), ("layers", ("layers",)), ("hidden", ("hidden_size",)),
               ("heads / KV heads", ("num_attention_heads", "num_key_value_heads")),
               ("experts (top-k)", ("moe.num_experts", "moe.experts_per_token")),
               ("context", ("max_sequence_length",)), ("dtype", ("dtype",))),
    "hardware": (("BF16 TFLOPS", ("bf16_tflops", "fp16_tflops")), ("FP8 TFLOPS", ("fp8_tflops",)),
                 ("FP4 TFLOPS", ("fp4_tflops",)), ("memory GB/s", ("memory_bandwidth_gbps",)),
                 ("memory", ("memory_size_gib", "memory_size_gb")), ("link GB/s", ("interconnect_bandwidth_gbps",)),
                 ("GPUs/node", ("gpus_per_node",)), ("kernel tables", ("kernel_tables",))),
    "workloads": (("prompts", ("num_prompts",)), ("rate req/s", ("request_rate",)),
                  ("clients", ("max_concurrency",)), ("input", ("input_len",)), ("output", ("output_len",))),
    "frameworks": (("version", ("version",)), ("frontend ms", ("frontend_latency_ms",)),
                   ("per step us", ("iteration_overhead_us",)), ("per kernel us", ("launch_overhead_us",)),
                   ("DP padding tokens", ("dp_padding_tokens",))),
}
SUBPACKAGES = ("simllm.config", "simllm.sim", "simllm.analysis", "simllm.search", "simllm.calibration",
               "simllm.formats", "simllm.report", "simllm.cli")


URL = re.compile(r"https?://[^\s<>|]*[^\s<>|.,;:)\]]")


def _md(text):
    """``text`` safe inside Markdown (tables included): emphasis, HTML and table characters escaped,
    web addresses as links."""
    parts = URL.split(str(text))
    urls = URL.findall(str(text))
    out = [re.sub(r"([\\`*_<>|\[\]])", r"\\\1", parts[0])]
    for url, rest in zip(urls, parts[1:]):
        out += [f"<{url}>", re.sub(r"([\\`*_<>|\[\]])", r"\\\1", rest)]
    return "".join(out)


def subcommands(parser, prefix="simllm"):
    """(``simllm COMMAND [SUBCOMMAND]``, parser, one-line help) of every subcommand, nested ones
    (``simllm kernels import``) after their parent."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, command in action.choices.items():
                yield f"{prefix} {name}", command, helps.get(name) or ""
                yield from subcommands(command, f"{prefix} {name}")


def cli_page():
    """Markdown of ``simllm --help`` and every subcommand's ``--help``, as argparse prints them."""
    os.environ["COLUMNS"] = HELP_COLUMNS
    parser = build_parser()
    commands = list(subcommands(parser))
    out = ["# Command line reference", "",
           "Generated from the argument parser (`simllm.cli.app.build_parser()`) when the site is built: "
           "each subcommand's usage and options exactly as `simllm COMMAND --help` prints them.", "",
           "| command | what it does |", "| --- | --- |"]
    out += [f"| [`{name}`](#{name.replace(' ', '-')}) | {_md(help_)} |" for name, _, help_ in commands]
    out += ["", "## simllm", "", "```text", parser.format_help().rstrip(), "```"]
    for name, command, _ in commands:
        out += ["", f"## {name}", "", "```text", command.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def api_page():
    """Markdown for mkdocstrings: each public name of ``simllm`` at its defining module, then the
    subpackages' overviews."""
    out = ["# Python API reference", "",
           "Generated from the docstrings when the site is built. `import simllm` gives these names "
           "(`simllm.__all__`); the ones that simulate import numba when first read.", ""]
    for name in sorted(simllm.__all__, key=str.lower):
        obj = getattr(simllm, name)
        home = getattr(obj, "__module__", None) or simllm._HOME_OF.get(name)
        if not home or not home.startswith("simllm"):
            continue
        out += [f"::: {home}.{name}", "    options:", "      heading_level: 2", ""]
    out += ["## Subpackages", "",
            "The layers behind the public names, lowest first ([Architecture](../architecture.md)).", ""]
    for pkg in SUBPACKAGES:
        out += [f"::: {pkg}", "    options:", "      heading_level: 3", "      members: false",
                "      show_root_full_path: true", ""]
    return "\n".join(out)


def preset_page(kind):
    """Markdown of every shipped preset of ``kind``: an overview table, then each preset's figures
    with their sources and the references its YAML header gives."""
    infos = catalog.describe_presets(kind)
    columns = OVERVIEW[kind]
    out = [f"# {PRESET_TITLES[kind]}", "", PRESET_INTROS[kind], "",
           f"Generated from `configs/{kind}/` when the site is built (`simllm presets {kind}` prints the same): "
           f"{len(infos)} presets.", "",
           "| preset | " + " | ".join(heading for heading, _ in columns) + " |", "| --- " * (len(columns) + 1) + "|"]
    for info in infos:
        figures = {f.key: catalog.figure_text(f.value) for f in info.figures}
        figures.update({f.key: f"{f.value / 1e9:,.2f} B" for f in info.figures
                        if f.key in ("parameters", "active_parameters")})
        cells = []
        for heading, keys in columns:
            values = [figures[k] for k in keys if k in figures]
            if not values:
                cell = "-"
            elif heading == "memory":
                cell = values[0] + (" GiB" if "memory_size_gib" in figures else " GB")
            elif heading == "heads / KV heads":
                cell = " / ".join(values)
            elif heading == "experts (top-k)":
                cell = f"{values[0]} ({values[1]})" if len(values) == 2 else values[0]
            else:
                cell = values[0]
            cells.append(_md(cell))
        out.append(f"| [{info.name}](#{info.name.replace('.', '')}) | " + " | ".join(cells) + " |")
    for info in infos:
        out += ["", f"## {info.name}", ""]
        if info.title != info.name:
            out += [f"**{_md(info.title)}** (`configs/{kind}/{info.name}.yaml`)", ""]
        else:
            out += [f"`configs/{kind}/{info.name}.yaml`", ""]
        out += ["| key | value | source |", "| --- | --- | --- |"]
        out += [f"| `{f.key}` | {_md(catalog.figure_text(f.value))} | {_md(f.source) or '-'} |" for f in info.figures]
        if info.references:
            out.append("")
            for label, text in info.references:
                lead = f"{_md(label)} " if label.startswith("[") else (f"*{_md(label)}:* " if label else "")
                out.append(f"- {lead}{_md(text)}")
    return "\n".join(out) + "\n"


def on_files(files, config):
    """Add the generated pages to the site."""
    pages = {"reference/cli.md": cli_page(), "reference/api.md": api_page()}
    pages.update({f"presets/{kind}.md": preset_page(kind) for kind in presets.KINDS})
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files
