"""The preset catalogue (``simllm.config.catalog``): every shipped preset's key figures are the values
the loaders read, and each figure's source is the comment its YAML gives it, with every reference it
cites present in the file's header. ``simllm presets`` and the docs' preset pages print this."""
import re

import pytest

import simllm
from simllm.config import catalog, presets
from simllm.config.framework import load_framework
from simllm.errors import ConfigError

ALL = [(kind, name) for kind in presets.KINDS for name in presets.preset_names(kind)]


@pytest.mark.parametrize("kind", presets.KINDS)
def test_every_shipped_preset_is_described(kind):
    infos = catalog.describe_presets(kind)
    assert [i.name for i in infos] == presets.preset_names(kind)
    assert all(i.figures and i.kind == kind for i in infos)


@pytest.mark.parametrize("kind, name", ALL, ids=[f"{k}/{n}" for k, n in ALL])
def test_every_cited_reference_is_in_the_header(kind, name):
    """A figure that cites ``[n]`` finds ``[n]`` among its preset's references; a figure citing a
    header paragraph by label finds that paragraph."""
    info = catalog.describe_preset(kind, name)
    labels = {label for label, _ in info.references}
    for fig in info.figures:
        for ref in re.findall(r"\[\d+\]", fig.source):
            assert ref in labels, (name, fig.key, fig.source, sorted(labels))
        if fig.source in ("Source", "Parameter count"):
            assert fig.source in labels, (name, fig.key)


@pytest.mark.parametrize("name", presets.preset_names("hardware"))
def test_hardware_figures_are_what_the_loader_reads_and_are_sourced(name):
    info = catalog.describe_preset("hardware", name)
    hw = simllm.load_hardware(name)
    figures = {f.key: f for f in info.figures}
    for key in ("fp16_tflops", "bf16_tflops", "fp8_tflops", "memory_bandwidth_gbps", "interconnect_bandwidth_gbps"):
        if key in figures:
            assert float(figures[key].value) == pytest.approx(getattr(hw, key)), (name, key)
    assert figures["memory_bandwidth_gbps"].source, name  # every GPU's bandwidth says where it comes from
    size = figures.get("memory_size_gib") or figures["memory_size_gb"]
    scale = 2 ** 30 if size.key.endswith("gib") else 1e9
    assert float(size.value) * scale == pytest.approx(hw.memory_size_bytes)


@pytest.mark.parametrize("name", presets.preset_names("models"))
def test_model_figures_are_what_the_loader_reads(name):
    figures = {f.key: f.value for f in catalog.describe_preset("models", name).figures}
    model = simllm.load_model(name)
    for key, attr in (("layers", "layers"), ("hidden_size", "hidden_size"), ("vocab_size", "vocab_size"),
                      ("num_attention_heads", "num_attention_heads"), ("moe.num_experts", "num_experts"),
                      ("moe.experts_per_token", "experts_per_token")):
        if key in figures:
            assert figures[key] == getattr(model, attr), (name, key)


def test_h100_figures_cite_the_whitepaper_and_datasheet():
    info = catalog.describe_preset("hardware", "h100-sxm")
    figures = {f.key: f for f in info.figures}
    refs = dict(info.references)
    assert figures["fp8_tflops"].value == 1978.9 and figures["fp8_tflops"].source == "dense [1]"
    assert "Hopper" in refs["[1]"] or "whitepaper" in refs["[1]"]
    assert figures["memory_bandwidth_gbps"].value == 3350 and figures["memory_bandwidth_gbps"].source.startswith("[2]")
    assert "datasheet" in refs["[2]"] and "https://www.nvidia.com/en-us/data-center/h100/" in refs["[2]"]
    assert info.title == "NVIDIA H100 SXM5 80GB"


def test_model_figures_without_a_comment_cite_the_header():
    info = catalog.describe_preset("models", "llama-3.1-8b")
    figures = {f.key: f for f in info.figures}
    refs = dict(info.references)
    assert figures["declared_parameters"].value == 8_030_261_248
    assert figures["declared_parameters"].source == "Parameter count" and "8,030,261,248" in refs["Parameter count"]
    assert figures["layers"].source == "Source"
    assert refs["Source"].startswith("https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json")


def test_a_comment_continued_on_the_next_line_is_one_source():
    """mi300x's interconnect comment runs over two lines."""
    fig = {f.key: f for f in catalog.describe_preset("hardware", "mi300x").figures}["interconnect_bandwidth_gbps"]
    assert fig.source.endswith("(a 2-GPU group gets only 64 GB/s per direction) [3]")


def test_framework_figures_are_the_profile():
    for name in presets.preset_names("frameworks"):
        figures = {f.key: f for f in catalog.describe_preset("frameworks", name).figures}
        profile = load_framework(name)
        for key in ("frontend_latency_ms", "iteration_overhead_us", "sequence_overhead_us", "launch_overhead_us"):
            assert float(figures[key].value) == pytest.approx(getattr(profile, key)), (name, key)
            assert figures[key].source, (name, key)


def test_header_paragraphs(tmp_path):
    """References, labelled paragraphs and prose: a deeper-indented line continues a reference, an
    unindented one after it starts prose, and prose continues prose."""
    path = tmp_path / "gpu.yaml"
    path.write_text("# Sources:\n#  [1] First source,\n#      continued.\n#  [2] Second.\n"
                    "# A note that\n# runs on.\n# Source: the blog\n#   (verbatim).\n"
                    "hardware:\n  gpu: x\n  fp16_tflops: 80   # dense [1]\n  memory_bandwidth_gbps: 2000\n"
                    "  memory_size_gb: 40 # [2]\n", encoding="utf-8")
    info = catalog.describe_preset("hardware", str(path))
    assert info.references == (("[1]", "First source, continued."), ("[2]", "Second."),
                               ("", "A note that runs on."), ("Source", "the blog (verbatim)."))
    assert [(f.key, f.value, f.source) for f in info.figures] == [
        ("fp16_tflops", 80, "dense [1]"), ("memory_bandwidth_gbps", 2000, "Source"), ("memory_size_gb", 40, "[2]")]


def test_a_file_of_another_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="'workload:'"):
        catalog.describe_preset("workloads", str(presets.resolve("hardware", "h100-sxm", flag="x")))


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="did you mean h100-sxm"):
        catalog.describe_preset("hardware", "h100")
    with pytest.raises(ValueError):
        catalog.describe_presets("gpus")


def test_figure_text():
    assert catalog.figure_text(8_030_261_248) == "8,030,261,248"
    assert catalog.figure_text(1978.9) == "1978.9"
    assert catalog.figure_text(671e9) == "671,000,000,000"
    assert catalog.figure_text({"distribution": "uniform", "low": 100}) == "{distribution: uniform, low: 100}"
    assert catalog.figure_text(True) == "true"


def test_model_parameters_are_counted_beside_the_published_count():
    """llama-3.1-8b's dimensions give its published safetensors total exactly; DeepSeek-V3's give
    the 671B / 37B its report states (the header says 671.03B / 37.55B)."""
    llama = {f.key: f for f in catalog.describe_preset("models", "llama-3.1-8b").figures}
    assert llama["parameters"].value == llama["declared_parameters"].value == 8_030_261_248
    assert llama["parameters"].source == catalog.DERIVED_SOURCE and "active_parameters" not in llama
    ds = {f.key: f.value for f in catalog.describe_preset("models", "deepseek-v3").figures}
    assert round(ds["parameters"] / 1e9, 2) == 671.03 and round(ds["active_parameters"] / 1e9, 2) == 37.55
