"""What ships: each preset's key figures and, for each figure, its source as the YAML's comments cite it.

One function, :func:`describe_presets`, reads the shipped presets (``configs/models``,
``configs/hardware``, ``configs/workloads``, ``configs/frameworks``) and their comments; ``simllm
presets`` prints it and the documentation's preset pages are generated from it at build time, so
neither can go stale.

A model's total (and, for MoE, active) parameters are counted from its dimensions, beside the
published count the file declares. A figure's source is the comment on its line (``fp8_tflops: 1978.9  # dense [1]``, continued on
the comment lines below it), else the file's header paragraph that covers it (``Parameter count:``
for ``declared_parameters``, ``Source:`` for the rest). The header's references (``[1] NVIDIA H100
... whitepaper``) and labelled paragraphs (``Source: https://...``) come with each preset, so a
``[1]`` in a figure's source can be looked up.
"""
import dataclasses
import re
from dataclasses import dataclass

from simllm.config import presets, yamlio
from simllm.config.model import load_model
from simllm.errors import ConfigError

#: The figures shown for each kind of preset, as (dotted) keys of the file's section, in order. A
#: preset shows those it sets.
KEY_FIGURES = {
    "models": ("dtype", "declared_parameters", "layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "kv_lora_rank", "intermediate_size", "moe.num_experts", "moe.experts_per_token",
               "moe.moe_intermediate_size", "moe.num_shared_experts", "sliding_window", "attention_chunk_size",
               "vocab_size", "max_sequence_length"),
    "hardware": ("fp16_tflops", "bf16_tflops", "fp8_tflops", "fp4_tflops", "int8_tops", "memory_bandwidth_gbps",
                 "memory_size_gib", "memory_size_gb", "interconnect", "interconnect_bandwidth_gbps", "gpus_per_node",
                 "network_bandwidth_gbps", "kernel_tables"),
    "workloads": ("num_prompts", "request_rate", "max_concurrency", "arrival", "burstiness", "input_len",
                  "output_len", "prefix_len", "prefix_hit_ratio", "trace", "seed"),
    "frameworks": ("version", "frontend_latency_ms", "iteration_overhead_us", "sequence_overhead_us",
                   "unsplit_decode_ns_per_key", "quantized_gemm_bf16_share", "launch_overhead_us",
                   "dp_padding_tokens"),
}
#: A model's figures counted from its dimensions (``ModelConfig``), shown before the file's own.
DERIVED_SOURCE = "counted from the dimensions"
#: The section each kind's files hold.
SECTIONS = {"models": "model", "hardware": "hardware", "workloads": "workload", "frameworks": "framework"}

_REFERENCE = re.compile(r"^#\s{1,3}(\[\d+\])\s*(.*)$")  # "#  [1] NVIDIA H100 ..."
_LABELLED = re.compile(r"^#\s?([A-Z][A-Za-z -]{1,30}):\s*(.*)$")  # "# Source: https://..."
_COMMENT = re.compile(r"\s#\s?(.*)$")  # a comment after a value


@dataclass(frozen=True)
class PresetFigure:
    """One key figure of a preset: its key (dotted for nested keys), its value as the YAML loads it
    (:func:`figure_text` writes it for people), and its source (the comment that cites it; empty
    when the file cites none)."""

    key: str
    value: str
    source: str


@dataclass(frozen=True)
class PresetInfo:
    """One shipped preset: its name (what ``--model`` etc. take), the title it gives itself
    (``name:``), its key figures, and the header's references and paragraphs as (label, text)
    pairs (``("[1]", "NVIDIA H100 ...")``, ``("Source", "https://...")``)."""

    kind: str
    name: str
    title: str
    figures: tuple
    references: tuple


def _indent(raw):
    """Spaces between a comment line's ``#`` and its text."""
    return len(raw) - 1 - len(raw[1:].lstrip(" "))


def _header(lines):
    """(label, text) paragraphs of the comment block before the file's section: numbered
    references (``[1] ...``), ``Label:`` paragraphs and unlabelled prose (label ``""``). A line
    continues the paragraph before it unless it starts a reference or a label, or follows a
    reference without being indented deeper than it."""
    out = []  # [label, text, indent]
    for raw in lines:
        if not raw.startswith("#"):
            break
        body, indent = raw[1:].strip(), _indent(raw)
        ref, labelled = _REFERENCE.match(raw), _LABELLED.match(raw)
        if not body:
            continue
        if ref:
            out.append([ref.group(1), ref.group(2).strip(), indent])
        elif labelled and indent <= 1:
            out.append([labelled.group(1), labelled.group(2).strip(), indent])
        elif out and (indent > out[-1][2] or not out[-1][0].startswith("[")):
            out[-1][1] = f"{out[-1][1]} {body}"
        else:
            out.append(["", body, indent])
    return tuple((label, " ".join(text.split())) for label, text, _ in out if text.strip())


def _inline_comment(lines, line):
    """The comment on 1-based ``line`` and the comment-only lines right below it, joined."""
    match = _COMMENT.search(lines[line - 1])
    if not match:
        return ""
    parts = [match.group(1).strip()]
    for raw in lines[line:]:
        stripped = raw.strip()
        if not stripped.startswith("#") or raw.startswith("#"):
            break
        parts.append(stripped[1:].strip())
    return " ".join(p for p in parts if p)


def _lookup(section, key):
    """(value, line) of dotted ``key`` in ``section`` (LineDicts), or (None, None)."""
    mapping = section
    *parents, last = key.split(".")
    for parent in parents:
        mapping = mapping.get(parent) if isinstance(mapping, dict) else None
    if not isinstance(mapping, dict) or last not in mapping:
        return None, None
    return mapping[last], yamlio.line_of(mapping, last)


def figure_text(value):
    """A value as the file means it: numbers with thousands separators, mappings in flow style."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1e6 else f"{value:g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(figure_text(v) for v in value) + "]"
    return str(value)


def _fallback(key, labels):
    """The header paragraph that covers a figure without a comment of its own."""
    if key == "declared_parameters" and "Parameter count" in labels:
        return "Parameter count"
    for label in ("Source", "Sources"):
        if label in labels:
            return label
    return ""


def describe_preset(kind, name):
    """The :class:`PresetInfo` of the preset ``name`` of ``kind``: a shipped preset's name or a
    YAML file of that kind.

    Raises
    ------
    ConfigError
        When ``name`` is neither a file nor a shipped preset (naming the nearest names), or the file
        is not valid YAML or has no section of ``kind`` (``hardware:`` for hardware).
    """
    path = presets.resolve(kind, name, flag="NAME")
    text = path.read_text(encoding="utf-8")
    data = yamlio.load_yaml_text(text, str(path))
    lines = text.splitlines()
    section = data.get(SECTIONS[kind]) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        if kind != "models" or path.suffix.lower() != ".json":  # a HuggingFace config.json has no section
            raise ConfigError(f"missing: a {kind[:-1] if kind != 'hardware' else kind} file holds its keys under "
                              f"'{SECTIONS[kind]}:'", source=str(path), key=SECTIONS[kind])
        section = {}
    references = _header(lines)
    labels = {label for label, _ in references}
    figures = []
    if kind == "models":
        model = load_model(path)
        figures.append(PresetFigure("parameters", model.parameter_count(), DERIVED_SOURCE))
        if model.is_moe:
            figures.append(PresetFigure("active_parameters", model.active_parameter_count(), DERIVED_SOURCE))
    for key in KEY_FIGURES[kind]:
        value, line = _lookup(section, key)
        if value is None:
            continue
        source = (_inline_comment(lines, line) if line else "") or _fallback(key, labels)
        figures.append(PresetFigure(key, value, source))
    title = str(section.get("name") or section.get("gpu") or path.stem)
    return PresetInfo(kind, path.stem, title, tuple(figures), references)


def describe_presets(kind):
    """Every shipped preset of ``kind`` (``"models"``, ``"hardware"``, ``"workloads"`` or
    ``"frameworks"``), sorted by name, as :class:`PresetInfo`: what ``simllm presets`` prints and
    the documentation lists."""
    if kind not in presets.KINDS:
        raise ValueError(f"kind must be one of {', '.join(presets.KINDS)}, not {kind!r}")
    return [describe_preset(kind, name) for name in presets.preset_names(kind)]


def presets_to_dict(infos, names_only=False):
    """``{kind: [preset, ...]}`` for JSON: each preset's fields (figures and references as
    mappings), or its name alone with ``names_only``."""
    out = {}
    for info in infos:
        entry = info.name if names_only else {
            "name": info.name, "title": info.title,
            "figures": [dataclasses.asdict(f) for f in info.figures],
            "references": [{"label": label, "text": text} for label, text in info.references]}
        out.setdefault(info.kind, []).append(entry)
    return out
