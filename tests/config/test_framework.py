"""Serving-framework profiles (configs/frameworks/*.yaml): loading, validation with the bounds
declared with the fields, ``--framework`` choosing one, and what they add to a request alone
(the closed form: prefill iteration + the profile's per-iteration and per-request overheads)."""
import dataclasses
import json
import os

import pytest
import yaml

import simllm
import simllm.cli
from helpers import build
from simcore import iteration_time_nb
from simllm.config import framework as fwmod
from simllm.config import presets
from simllm.config.framework import BOUNDS, FRAMEWORKS, FrameworkProfile, load_framework
from simllm.config.workload import fixed


def test_shipped_profiles_load_within_their_bounds_and_cite_sources():
    assert set(FRAMEWORKS) <= set(presets.preset_names("frameworks"))
    for name in presets.preset_names("frameworks"):  # each backend's current release, and older ones
        fw = load_framework(name)
        assert (fw.name == name if name in FRAMEWORKS else fw.name in FRAMEWORKS) and fw.version
        for key, (low, high) in BOUNDS.items():
            assert low <= getattr(fw, key) <= high, (name, key)
        text = open(fw.source, encoding="utf-8").read()
        for key in ("version", *BOUNDS):  # every figure carries a comment (a source or "estimate")
            (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:")]
            assert "#" in line and ("[" in line or "estimate" in line), line
    # vLLM's OpenAI server adds a few ms at most to a short prompt.
    assert load_framework("vllm").frontend_latency_ms <= 5.0


def test_every_numeric_field_declares_bounds_and_a_default():
    numeric = [f for f in dataclasses.fields(FrameworkProfile) if f.type is float or f.type == "float"]
    assert {f.name for f in numeric} == set(BOUNDS) == {"frontend_latency_ms", "iteration_overhead_us",
                                                        "sequence_overhead_us", "unsplit_decode_ns_per_key",
                                                        "quantized_gemm_bf16_share", "launch_overhead_us",
                                                        "dp_padding_tokens"}
    for f in numeric:
        assert f.metadata["min"] <= f.default <= f.metadata["max"] and f.metadata["doc"]


def test_bad_value_is_a_one_line_error_naming_file_key_value_and_range(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text("framework:\n  name: fast\n  frontend_latency_ms: 250\n", encoding="utf-8")
    with pytest.raises(simllm.ConfigError) as err:
        load_framework(str(path))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == f"{path}:3: framework.frontend_latency_ms = 250: expected a number >= 0.0 and <= 10.0"
    path.write_text("framework:\n  iteration_overhead_ms: 1\n", encoding="utf-8")
    with pytest.raises(simllm.ConfigError, match="iteration_overhead_ms.*did you mean iteration_overhead_us"):
        load_framework(str(path))
    with pytest.raises(simllm.ConfigError, match="--framework = 'tgi'"):
        load_framework("tgi")


def test_hardware_files_hold_gpu_physics_only(tmp_path):
    for name in simllm.preset_names("hardware"):
        hw = simllm.load_hardware(name)
        assert hw.launch_overhead_us is None and hw.frontend_latency_ms is None, name
    old = tmp_path / "old.yaml"
    old.write_text("hardware:\n  fp16_tflops: 100\n  memory_bandwidth_gbps: 1000\n  memory_size_gb: 24\n"
                   "  frameworks:\n    sglang:\n      compute_utilization: 0.6\n", encoding="utf-8")
    with pytest.raises(simllm.ConfigError) as err:
        simllm.load_hardware(str(old))
    assert "\n" not in str(err.value) and "configs/frameworks" in str(err.value) and ":5:" in str(err.value)
    # An explicit override in a user's file still wins over the profile's value.
    mine = tmp_path / "mine.yaml"
    mine.write_text("hardware:\n  fp16_tflops: 100\n  memory_bandwidth_gbps: 1000\n  memory_size_gb: 24\n"
                    "  launch_overhead_us: 7.5\n  frontend_latency_ms: 4\n", encoding="utf-8")
    p = build("qwen2.5-0.5b", str(mine))[4]
    assert p.launch_s == pytest.approx(7.5e-6)
    assert p.iter_overhead_s == pytest.approx(load_framework("vllm").iteration_overhead_us * 1e-6)


def test_framework_flag_picks_the_profile(tmp_path):
    for name in FRAMEWORKS:
        fw = load_framework(name)
        p = build("llama-3.1-8b", "h100-sxm", framework=name)[4]
        assert p.launch_s == pytest.approx(fw.launch_overhead_us * 1e-6)
        assert p.iter_overhead_s == pytest.approx(fw.iteration_overhead_us * 1e-6)
    # A path to a profile YAML works as well as a name.
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"framework": {"name": "mine", "version": "1", "frontend_latency_ms": 7.0,
                                                  "iteration_overhead_us": 1000.0, "launch_overhead_us": 1.0}}),
                    encoding="utf-8")
    p = build("llama-3.1-8b", "h100-sxm", framework=str(mine))[4]
    assert p.iter_overhead_s == pytest.approx(1e-3) and p.launch_s == pytest.approx(1e-6)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    w = simllm.Workload(num_prompts=1, input_len=fixed(128), output_len=fixed(4))
    trt = simllm.simulate(model, hw, simllm.ServingConfig(framework="trtllm"), w).summary["mean_ttft_ms"]
    vllm = simllm.simulate(model, hw, simllm.ServingConfig(), w).summary["mean_ttft_ms"]
    assert trt != vllm


def test_cli_run_with_framework_trtllm(capsys):
    """``simllm run --framework trtllm`` simulates with the trtllm profile."""
    argv = ["run", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--num-prompts", "1", "--input-len", "128",
            "--output-len", "4", "--format", "json"]
    assert simllm.cli.main(argv + ["--framework", "trtllm"]) == 0
    trt = json.loads(capsys.readouterr().out)
    assert simllm.cli.main(argv) == 0
    vllm = json.loads(capsys.readouterr().out)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    w = simllm.Workload(num_prompts=1, input_len=fixed(128), output_len=fixed(4))
    expected = simllm.simulate(model, hw, simllm.ServingConfig(framework="trtllm"), w).summary["mean_ttft_ms"]
    summary = trt.get("summary", trt)
    assert summary["mean_ttft_ms"] == pytest.approx(expected, rel=1e-9)
    assert summary["mean_ttft_ms"] != vllm.get("summary", vllm)["mean_ttft_ms"]


def test_single_short_request_ttft_is_prefill_plus_the_profiles_overheads():
    """One 128-token request alone on one H100, llama-3.1-8b, vLLM profile: TTFT is the prefill
    iteration's GPU time + the profile's per-iteration CPU overhead + its frontend time, within
    a few ms of the GPU time alone (no fitted tens of ms)."""
    model, hw, s, _, p = build("llama-3.1-8b", "h100-sxm")
    fw = load_framework("vllm")
    w = simllm.Workload(num_prompts=1, input_len=fixed(128), output_len=fixed(8))
    ttft_ms = simllm.simulate(model, hw, s, w).summary["mean_ttft_ms"]
    prefill_s = iteration_time_nb(p, 128.0, 128.0 * 129.0 / 2.0, 128.0, 1.0)  # includes iter_overhead_s
    gpu_s = iteration_time_nb(p._replace(iter_overhead_s=0.0), 128.0, 128.0 * 129.0 / 2.0, 128.0, 1.0)
    assert prefill_s - gpu_s == pytest.approx(fw.iteration_overhead_us * 1e-6, rel=1e-9)
    assert ttft_ms == pytest.approx(gpu_s * 1e3 + fw.iteration_overhead_us / 1e3 + fw.frontend_latency_ms, rel=1e-9)
    assert ttft_ms - gpu_s * 1e3 < 5.0  # a few ms of framework, not tens


def test_load_framework_is_cached_and_sees_edits(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("framework:\n  frontend_latency_ms: 1\n", encoding="utf-8")
    a = load_framework(str(path))
    assert load_framework(str(path)) is a
    path.write_text("framework:\n  frontend_latency_ms: 3\n", encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert load_framework(str(path)).frontend_latency_ms == 3.0
    assert fwmod.framework_from_dict({"frontend_latency_ms": 2}).frontend_latency_ms == 2.0


def test_sequence_overhead_is_paid_per_sequence_with_a_token():
    """Eight clients in step (no jitter), 128-token prompts, 32 tokens out: one prefill step of
    eight rows, then decode steps of eight. The per-sequence overhead adds 8 x its value to every
    step, so to the mean ITL and to the TTFT (one step), and nothing else moves."""
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    fw = load_framework("nim-trtllm")
    assert fw.sequence_overhead_us > 0.0
    none = fw.with_overrides(sequence_overhead_us=0.0)
    w = simllm.Workload(num_prompts=8, max_concurrency=8, client_jitter_ms=0.0, input_len=fixed(128),
                        output_len=fixed(32))
    s = simllm.ServingConfig(framework="trtllm")
    a = simllm.simulate(model, hw, s, w, framework=fw).summary
    b = simllm.simulate(model, hw, s, w, framework=none).summary
    step_ms = 8 * fw.sequence_overhead_us / 1e3
    assert a["mean_itl_ms"] - b["mean_itl_ms"] == pytest.approx(step_ms, rel=1e-6)
    assert a["mean_ttft_ms"] - b["mean_ttft_ms"] == pytest.approx(step_ms, rel=1e-6)
    assert a["completed"] == b["completed"] == 8
