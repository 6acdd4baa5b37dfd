"""simllm profile: measurements on the CPU at size "tiny", the fit, and the written YAML.

Every test but the missing-torch one needs PyTorch (the ``profile`` extra) and skips without it:
the skip sits in the fixtures (``pytest.importorskip``) rather than at module level so that the
missing-torch test runs everywhere.
"""
import csv
import dataclasses
import importlib
import json
import math
import os
import re
import sys

import pytest
import yaml

import simllm
from simllm.config.hardware import load_hardware
from simllm.errors import ConfigError

# Keys of a hardware profile that are datasheet figures, not measured ones.
DATASHEET = ("gpu", "name", "fp16_tflops", "bf16_tflops", "fp8_tflops", "int8_tops", "fp32_tflops",
             "memory_bandwidth_gbps", "memory_size_bytes", "interconnect", "interconnect_bandwidth_gbps",
             "gpus_per_node", "runtime_overhead_gib")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def profile_mod(torch):
    from simllm.calibration import profile

    return profile


@pytest.fixture(scope="module")
def tiny(profile_mod):
    """One tiny CPU profile against the H100 SXM datasheet, shared by the tests of this module."""
    lines = []
    result = profile_mod.profile_hardware(load_hardware("h100-sxm"), device="cpu", size="tiny", progress=lines.append)
    assert lines, "progress was never called"
    return result


def test_missing_torch_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.delitem(sys.modules, "simllm.calibration.profile", raising=False)
    monkeypatch.delattr(simllm, "profile", raising=False)
    profile = importlib.import_module("simllm.calibration.profile")  # the module itself imports without torch
    with pytest.raises(ConfigError) as info:
        profile.profile_hardware(load_hardware("h100-sxm"), device="cpu", size="tiny")
    message = str(info.value)
    assert "\n" not in message
    assert 'pip install "simllm[profile]"' in message


def test_measurements_cover_every_kind(tiny, profile_mod):
    rows = tiny.measurements
    assert {r["kind"] for r in rows} == set(profile_mod.KINDS)
    reduces = [r for r in rows if r["kind"] == "allreduce"]
    assert reduces and all(r["skipped"] and r["reason"] for r in reduces)
    assert any("all-reduce skipped" in note for note in tiny.notes)
    done = [r for r in rows if not r["skipped"]]
    assert {r["kind"] for r in done} == set(profile_mod.KINDS) - {"allreduce"}
    for r in done:
        assert r["seconds"] > 0 and math.isfinite(r["seconds"]), r
        assert r["bytes"] > 0 and r["flops"] >= 0, r
        for key in ("achieved_fraction", "compute_fraction", "bandwidth_fraction", "achieved_tflops", "achieved_gbps"):
            assert math.isfinite(r[key]) and r[key] >= 0, (key, r)
        assert r["achieved_fraction"] > 0
        assert r["achieved_fraction"] == max(r["compute_fraction"], r["bandwidth_fraction"])
    gemms = [r for r in done if r["kind"] == "gemm"]
    grid = profile_mod._GRIDS["tiny"]
    assert {(r["m"], r["n"], r["k"]) for r in gemms} == {(m, n, k) for m in grid.gemm_m for n, k in grid.gemm_nk}
    assert all(r["flops"] == 2.0 * r["m"] * r["n"] * r["k"] and r["compute_fraction"] > 0 for r in gemms)
    decode = [r for r in done if r["kind"] == "attention_decode"]
    assert decode and all(r["kv_heads"] < r["heads"] for r in decode)  # GQA-shaped
    prefill = [r for r in done if r["kind"] == "attention_prefill"]
    assert prefill and all(r["compute_fraction"] > 0 for r in prefill)
    assert {r["mode"] for r in done if r["kind"] == "launch"} == {"eager"}  # no CUDA graphs on the CPU


def test_fit(tiny, torch):
    assert 0 < tiny.compute_utilization <= 1
    assert 0 < tiny.bandwidth_utilization <= 1
    assert 0 < tiny.launch_overhead_us < 1e5
    assert tiny.interconnect_utilization is None and tiny.interconnect_latency_us is None
    assert set(tiny.fitted) == {"compute_utilization", "bandwidth_utilization", "launch_overhead_us"}
    assert set(tiny.methods) == set(tiny.fitted)
    assert [p["m"] for p in tiny.gemm_curve] == [1, 16, 128]
    assert all(p["compute_fraction"] > 0 and p["shapes"] == 2 for p in tiny.gemm_curve)
    # The fit is what the measurements say: the median over the largest-M GEMMs, the copy's bandwidth.
    large = sorted(r["compute_fraction"] for r in tiny.measurements if r["kind"] == "gemm" and r["m"] == 128)
    assert tiny.compute_utilization == pytest.approx(sum(large) / 2, rel=1e-3)
    copy = next(r for r in tiny.measurements if r["kind"] == "copy")
    assert tiny.bandwidth_utilization == pytest.approx(copy["bandwidth_fraction"], rel=1e-3)
    assert 0 < tiny.decode_bandwidth_fraction and 0 < tiny.prefill_compute_fraction
    assert tiny.device == "cpu" and tiny.device_name and tiny.torch_version == str(torch.__version__)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", tiny.date)
    assert (tiny.gemm_dtype, tiny.peak_tflops, tiny.memory_bandwidth_gbps) == ("bf16", 989.4, 3350)
    json.dumps(tiny.to_dict(), allow_nan=False)


def test_write_profile_loads_and_keeps_the_datasheet(tiny, profile_mod, tmp_path):
    out = tmp_path / "my-gpu.yaml"
    yaml_path, raw_path, tables_path = profile_mod.write_profile(tiny, "h100-sxm", out)
    assert yaml_path == out and raw_path == tmp_path / "my-gpu.profile.json" and tables_path is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-gpu.profile.json", "my-gpu.yaml"]  # no temp files
    base, calibrated = load_hardware("h100-sxm"), load_hardware(out)
    for key in DATASHEET:
        assert getattr(calibrated, key) == getattr(base, key), key
    assert calibrated.compute_utilization == tiny.compute_utilization
    assert calibrated.bandwidth_utilization == tiny.bandwidth_utilization
    assert calibrated.launch_overhead_us == tiny.launch_overhead_us
    # Not measured on one device: the base's interconnect figures stay.
    assert calibrated.interconnect_utilization == base.interconnect_utilization
    assert calibrated.interconnect_latency_us == base.interconnect_latency_us
    text = out.read_text()
    base_lines = (simllm.config.presets.configs_dir() / "hardware" / "h100-sxm.yaml").read_text().splitlines()
    kept = [line for line in base_lines if not line.lstrip().startswith(tuple(tiny.fitted))]
    assert all(line in text.splitlines() for line in kept)  # datasheet keys and source comments as they were
    stamp = f"measured by simllm profile on {tiny.device_name}, {tiny.date}, torch {tiny.torch_version}: "
    for key in tiny.fitted:
        (line,) = [line for line in text.splitlines() if line.startswith(f"  {key}:")]  # not frameworks:
        assert stamp in line, line
    raw = json.loads(raw_path.read_text())
    assert len(raw["measurements"]) == len(tiny.measurements)
    assert raw["fitted"] == tiny.fitted
    assert [p["m"] for p in raw["gemm_curve"]] == [1, 16, 128]


def test_write_profile_csv_raw(tiny, profile_mod, tmp_path):
    _, raw_path, _ = profile_mod.write_profile(tiny, load_hardware("h100-sxm"), tmp_path / "gpu.yaml",
                                               raw_output=tmp_path / "raw.csv")
    with raw_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(tiny.measurements) + len(tiny.gemm_curve) + len(tiny.table_measurements)
    assert sum(r["set"] == "kernel_tables" for r in rows) == len(tiny.table_measurements) > 0
    assert {r["kind"] for r in rows} == {*profile_mod.KINDS, "gemm_curve"}
    assert all(float(r["seconds"]) > 0 for r in rows if r["kind"] == "gemm")


def test_fractions_above_one_are_clamped(profile_mod, tmp_path):
    base_file = tmp_path / "slow-gpu.yaml"
    base_file.write_text("hardware:\n  gpu: slow-gpu\n  fp16_tflops: 1.0e-9   # far below any CPU\n"
                         "  memory_bandwidth_gbps: 1.0e-9\n  memory_size_gb: 1\n")
    result = profile_mod.profile_hardware(load_hardware(base_file), device="cpu", size="tiny")
    assert result.compute_utilization == 1.0 and result.bandwidth_utilization == 1.0
    assert result.raw_fits["compute_utilization"] > 1 and result.raw_fits["bandwidth_utilization"] > 1
    assert "clamped to 1.0" in result.methods["compute_utilization"]
    out = tmp_path / "out.yaml"
    profile_mod.write_profile(result, base_file, out)
    loaded = load_hardware(out)
    assert (loaded.compute_utilization, loaded.bandwidth_utilization) == (1.0, 1.0)
    assert loaded.fp16_tflops == 1e-9
    assert "clamped to 1.0" in out.read_text()


def test_fp8_without_an_fp8_peak_falls_back_to_bf16(profile_mod):
    result = profile_mod.profile_hardware(load_hardware("custom-gpu"), device="cpu", dtype="fp8", size="tiny",
                                          repeats=1)
    assert (result.dtype, result.gemm_dtype) == ("fp8", "bf16")
    assert result.peak_tflops == 80
    assert any("fp8" in note and "bf16" in note for note in result.notes)


def test_fp8_probe(profile_mod, torch):
    ok, why = profile_mod.fp8_gemm_available(torch, torch.device("cpu"))
    assert isinstance(ok, bool) and (ok or why)


def test_cuda_without_a_gpu_is_a_one_line_error(profile_mod, torch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    with pytest.raises(ConfigError) as info:
        profile_mod.profile_hardware(load_hardware("h100-sxm"), device="cuda", size="tiny")
    assert "\n" not in str(info.value) and "cpu" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"dtype": "int4"}, {"size": "huge"}, {"repeats": 0}, {"device": "tpu"}])
def test_bad_arguments(profile_mod, kwargs):
    with pytest.raises(ConfigError):
        profile_mod.profile_hardware(load_hardware("h100-sxm"), **{"device": "cpu", "size": "tiny", **kwargs})


def test_write_profile_refuses_another_base(tiny, profile_mod, tmp_path):
    with pytest.raises(ConfigError, match="measured against"):
        profile_mod.write_profile(tiny, "a100-sxm-80gb", tmp_path / "x.yaml")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing_behind(tiny, profile_mod, tmp_path, monkeypatch):
    out = tmp_path / "gpu.yaml"
    out.write_text("old\n")

    def fail(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        profile_mod.write_profile(tiny, "h100-sxm", out)
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.yaml"] and out.read_text() == "old\n"


def test_block_yaml_edit_keeps_continuation_comments_of_other_keys(tiny, profile_mod, tmp_path):
    # mi300x has a comment continuation line under interconnect_bandwidth_gbps, and no
    # interconnect_utilization key: a measured one is appended to the mapping.
    measured = dataclasses.replace(
        tiny, gpu="mi300x", peak_tflops=1307.4, memory_bandwidth_gbps=5300, interconnect_utilization=0.5,
        interconnect_latency_us=12.5,
        methods={**tiny.methods, "interconnect_utilization": "u", "interconnect_latency_us": "l"})
    out = tmp_path / "mi.yaml"
    profile_mod.write_profile(measured, "mi300x", out)
    text = out.read_text()
    assert "# (a 2-GPU group gets only 64 GB/s per direction) [3]" in text
    loaded = load_hardware(out)
    assert (loaded.interconnect_utilization, loaded.interconnect_latency_us) == (0.5, 12.5)
    assert loaded.interconnect_bandwidth_gbps == 448
    assert yaml.safe_load(text)["hardware"]["interconnect_utilization"] == 0.5


@pytest.mark.parametrize("x", [1e-5, 1.234e-7, 0.5, 1.0, 2.521, 3e16])
def test_yaml_number_round_trips(x):
    from simllm.calibration.hwyaml import yaml_number  # needs no torch

    assert yaml.safe_load(yaml_number(x)) == x


# ----------------------------------------------------------------------------- kernel tables

def test_profile_times_the_kernel_table_shapes(tiny, profile_mod):
    rows = tiny.table_measurements
    grid = profile_mod._TABLE_GRIDS["tiny"]
    gemms = {(r["m"], r["n"], r["k"]) for r in rows if r["kind"] == "gemm" and not r["skipped"]}
    assert gemms == set(grid.gemms + grid.gemms_held)
    assert {r["heads"] for r in rows if r["kind"] == "attention_decode"} == {grid.heads, grid.held_heads}
    assert [r["skipped"] for r in rows if r["kind"] == "allreduce"] == [True]  # one CPU: no collective
    # Kept apart: the scalar fit sees only its own measurements.
    assert {(r["m"], r["n"], r["k"]) for r in tiny.measurements if r["kind"] == "gemm"} != gemms


def test_written_kernel_tables_load_and_the_yaml_names_them(tiny, profile_mod, tmp_path):
    from simllm.config.kernels import load_tables

    out = tmp_path / "my-gpu.yaml"
    tables = profile_mod.kernel_tables(tiny, load_hardware("h100-sxm"))
    yaml_path, raw_path, tables_path = profile_mod.write_profile(tiny, "h100-sxm", out, tables=tables)
    assert tables_path == tmp_path / "kernels" / "h100-sxm" / "vllm.json"
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["kernels/h100-sxm/vllm.json", "my-gpu.profile.json", "my-gpu.yaml"]  # no temp files
    loaded = load_tables(tables_path)
    assert (loaded.gpu, loaded.framework, loaded.framework_version) == ("h100-sxm", "vllm",
                                                                        f"torch {tiny.torch_version}")
    prov = json.loads(loaded.provenance)
    assert prov["source"] == "simllm profile" and prov["torch_version"] == tiny.torch_version
    assert prov["device_name"] == tiny.device_name
    assert prov["rows_measured"] == sum(not r["skipped"] for r in tiny.table_measurements)
    assert {"gemm_bf16", "attention_prefill", "attention_decode"} <= set(prov["fit"])
    assert all(prov["fit"][t]["held_out_rows"] > 0 for t in ("gemm_bf16", "attention_prefill", "attention_decode"))
    assert "all-reduce needs two or more" in prov["omitted"]["allreduce"]
    assert yaml.safe_load(out.read_text())["hardware"]["kernel_tables"] == "kernels/h100-sxm"
    hardware = load_hardware(out)
    assert hardware.tables_for("vllm").source == str(tables_path)
    assert hardware.tables_for("sglang") is None  # measured for vllm only: the others take the scalar factors
    assert hardware.compute_utilization == tiny.compute_utilization


def test_cli_profile_writes_tables_that_simllm_run_uses(torch, tmp_path, monkeypatch, capsys):
    from simllm.cli.app import main

    monkeypatch.chdir(tmp_path)
    argv = ["profile", "--hardware", "h100-sxm", "--device", "cpu", "--size", "tiny", "-o", "out/gpu.yaml"]
    assert main(argv + ["--framework", "sglang", "--tables-dir", "tabs"]) == 0
    stdout = capsys.readouterr().out
    assert "kernel tables (sglang.json" in stdout and "tabs/h100-sxm/sglang.json" in stdout
    assert (tmp_path / "tabs/h100-sxm/sglang.json").is_file() and not (tmp_path / "out/kernels").exists()
    assert yaml.safe_load((tmp_path / "out/gpu.yaml").read_text())["hardware"]["kernel_tables"] == "../tabs/h100-sxm"
    assert load_hardware(tmp_path / "out/gpu.yaml").tables_for("sglang") is not None
    run = ["run", "--model", "llama-3.1-8b", "--hardware", "out/gpu.yaml", "--framework", "sglang",
           "--num-prompts", "8", "--max-concurrency", "2", "--format", "json"]
    assert main(run) == 0
    assert json.loads(capsys.readouterr().out)["completed"] == 8


def test_cli_no_tables_writes_no_json(torch, tmp_path, monkeypatch, capsys):
    from simllm.cli.app import main

    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--hardware", "h100-sxm", "--device", "cpu", "--size", "tiny", "-o", "gpu.yaml",
                 "--no-tables"]) == 0
    assert "kernel tables" not in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.profile.json", "gpu.yaml"]
    assert yaml.safe_load((tmp_path / "gpu.yaml").read_text())["hardware"]["kernel_tables"] == "h100-sxm"  # the base's
    assert json.loads((tmp_path / "gpu.profile.json").read_text())["table_measurements"] == []


@pytest.mark.parametrize("flags", [["--no-tables", "--tables-dir", "t"], ["--no-tables", "--framework", "vllm"],
                                   ["--framework", "tgi"]])
def test_cli_bad_table_flags_are_one_line_errors(flags, tmp_path, monkeypatch, capsys):
    from simllm.cli.app import main

    monkeypatch.chdir(tmp_path)
    try:
        rc = main(["profile", "--hardware", "h100-sxm", "--device", "cpu", "--size", "tiny", "-o", "g.yaml", *flags])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "error" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_help_lists_the_table_flags(capsys):
    from simllm.cli.app import main

    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    text = capsys.readouterr().out
    assert all(flag in text for flag in ("--framework", "--tables-dir", "--no-tables"))
