"""The ``simllm`` command line: bad input exits 2 with exactly one line on stderr naming where the
bad value came from, the key or flag, the value and what was expected; good input prints tables
or JSON."""
import gc
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import simllm
from helpers import DATA, ROOT, assert_one_line_error, run_main, stderr_lines
from simllm.cli.app import GC_THRESHOLD_ALLOCATIONS
from simllm.config.workload import LengthDist

GOOD_MODEL = {
    "name": "tiny",
    "dtype": "fp16",
    "layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1024,
    "vocab_size": 1000,
    "max_sequence_length": 2048,
}


def model_yaml(tmp_path, name="model.yaml", drop=(), rename=None, **overrides):
    """Write a small simllm model YAML (one key per line, in GOOD_MODEL's order) and return its path."""
    values = dict(GOOD_MODEL, **overrides)
    lines = ["model:"]
    for key, value in values.items():
        if key in drop:
            continue
        key = (rename or {}).get(key, key)
        lines.append(f"  {key}: {value}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def line_of(path, key):
    for i, text in enumerate(Path(path).read_text().splitlines(), 1):
        if text.strip().startswith(f"{key}:"):
            return i
    raise AssertionError(key)


def run_cli(*args, check=None, **kw):
    proc = subprocess.run([sys.executable, "-m", "simllm", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, **kw)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


# ---------------------------------------------------------------- bad input


def _case_missing_key(tmp_path):
    path = model_yaml(tmp_path, drop=("hidden_size",))
    return ["estimate", "--model", path], [str(path), "hidden_size", "missing"]


def _case_zero_size(tmp_path):
    path = model_yaml(tmp_path, hidden_size=0)
    return ["estimate", "--model", path], [f"{path}:{line_of(path, 'hidden_size')}:", "hidden_size", "= 0",
                                           ">= 1"]


def _case_negative_size(tmp_path):
    path = model_yaml(tmp_path, layers=-4)
    return ["estimate", "--model", path], [f"{path}:{line_of(path, 'layers')}:", "layers", "-4", ">= 1"]


def _case_negative_hidden(tmp_path):
    path = model_yaml(tmp_path, hidden_size=-4096)
    return ["estimate", "--model", path], [str(path), "hidden_size", "-4096", ">= 1"]


def _case_non_numeric(tmp_path):
    path = model_yaml(tmp_path, layers="abc")
    return ["estimate", "--model", path], [f"{path}:{line_of(path, 'layers')}:", "layers", "'abc'", "integer"]


def _case_unknown_dtype(tmp_path):
    path = model_yaml(tmp_path, dtype="fp13")
    return ["estimate", "--model", path], [str(path), "dtype", "fp13", "one of", "bf16"]


def _case_unknown_preset(tmp_path):
    return ["estimate", "--model", "lama-3.1-8b"], ["command line", "--model", "lama-3.1-8b", "did you mean",
                                                   "llama-3.1-8b"]


def _case_unknown_hardware_preset(tmp_path):
    return ["estimate", "--hardware", "h100"], ["command line", "--hardware", "'h100'", "did you mean", "h100-sxm"]


def _case_heads_not_divisible(tmp_path):
    path = model_yaml(tmp_path, num_key_value_heads=3)
    return ["estimate", "--model", path], [str(path), "num_key_value_heads", "3", "divisor",
                                           "num_attention_heads"]


def _case_tp_not_dividing_heads(tmp_path):
    return (["estimate", "--model", "mistral-7b", "-tp", "3"],
            ["command line", "--tensor-parallel-size", "3", "divisor", "32"])


def _case_yaml_syntax(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  name: broken\n   layers: 4\n  hidden_size: 512\n", encoding="utf-8")
    return ["estimate", "--model", path], [f"{path}:3:", "YAML"]


def _case_yaml_unclosed_bracket(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  name: broken\n  layers: [4\n  hidden_size: 512\n", encoding="utf-8")
    return ["estimate", "--model", path], [str(path), "YAML"]


def _case_unknown_key(tmp_path):
    path = model_yaml(tmp_path, rename={"hidden_size": "hiden_size"})
    return ["estimate", "--model", path], [f"{path}:{line_of(path, 'hiden_size')}:", "hiden_size", "unknown key",
                                           "did you mean hidden_size"]


def _case_batch_size_zero(tmp_path):
    return ["estimate", "--batch-size", "0"], ["command line", "--batch-size", "0", "an integer in [1, "]


def _case_gpu_memory_utilization(tmp_path):
    return (["estimate", "--gpu-memory-utilization", "1.5"],
            ["command line", "--gpu-memory-utilization", "1.5", "(0, 1]"])


def _case_kv_cache_dtype(tmp_path):
    return ["estimate", "--kv-cache-dtype", "fp13"], ["command line", "--kv-cache-dtype", "fp13", "one of"]


def _case_dtype_flag(tmp_path):
    return ["estimate", "--dtype", "fp13"], ["command line", "--dtype", "fp13", "one of"]


def _case_max_model_len(tmp_path):
    return (["estimate", "--max-model-len", "999999"],
            ["command line", "--max-model-len", "999999", "131072"])


def _case_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    return ["estimate", "--model", path], [str(path), "empty"]


def _case_invalid_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n "num_hidden_layers": 2,,}\n', encoding="utf-8")
    return ["estimate", "--model", path], [f"{path}:2:", "JSON"]


def _case_hardware_missing_key(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("hardware:\n  gpu: x\n  fp16_tflops: 10\n  memory_bandwidth_gbps: 100\n", encoding="utf-8")
    return ["estimate", "--hardware", path], [str(path), "memory_size_gb", "missing"]


def _case_hardware_zero_bandwidth(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("hardware:\n  gpu: x\n  fp16_tflops: 10\n  memory_bandwidth_gbps: 0\n  memory_size_gb: 40\n",
                    encoding="utf-8")
    return ["estimate", "--hardware", path], [f"{path}:4:", "memory_bandwidth_gbps", "0", "> 0"]


def _case_kv_max_cache_size_zero(tmp_path):
    path = model_yaml(tmp_path)
    path.write_text(path.read_text() + "  kv_cache:\n    max_cache_size: 0\n", encoding="utf-8")
    return ["estimate", "--model", path], [str(path), "max_cache_size", "0", ">= 1"]


def _case_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    return ["estimate", "--model", path], ["command line", "--model", str(path), "existing file"]


ERROR_CASES = {
    "missing_key": _case_missing_key,
    "zero_size": _case_zero_size,
    "negative_size": _case_negative_size,
    "negative_hidden": _case_negative_hidden,
    "non_numeric": _case_non_numeric,
    "unknown_dtype": _case_unknown_dtype,
    "unknown_preset": _case_unknown_preset,
    "unknown_hardware_preset": _case_unknown_hardware_preset,
    "heads_not_divisible_by_kv_heads": _case_heads_not_divisible,
    "tp_not_dividing_heads": _case_tp_not_dividing_heads,
    "yaml_syntax": _case_yaml_syntax,
    "yaml_unclosed_bracket": _case_yaml_unclosed_bracket,
    "unknown_key": _case_unknown_key,
    "batch_size_zero": _case_batch_size_zero,
    "gpu_memory_utilization_1.5": _case_gpu_memory_utilization,
    "kv_cache_dtype_flag": _case_kv_cache_dtype,
    "dtype_flag": _case_dtype_flag,
    "max_model_len_too_long": _case_max_model_len,
    "empty_file": _case_empty_file,
    "invalid_json": _case_invalid_json,
    "hardware_missing_key": _case_hardware_missing_key,
    "hardware_zero_bandwidth": _case_hardware_zero_bandwidth,
    "kv_max_cache_size_zero": _case_kv_max_cache_size_zero,
    "missing_file": _case_missing_file,
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_bad_input_subprocess(case, tmp_path):
    argv, needles = ERROR_CASES[case](tmp_path)
    proc = run_cli(*argv)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, *needles)


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_bad_input_in_process(case, tmp_path, capsys):
    argv, needles = ERROR_CASES[case](tmp_path)
    rc, out, err = run_main(argv, capsys)
    assert_one_line_error(rc, out, err, *needles)


def test_unknown_preset_suggests_nearest_first(capsys):
    rc, out, err = run_main(["estimate", "--model", "lama-3.1-8b"], capsys)
    line = assert_one_line_error(rc, out, err)
    suggestion = line.split("did you mean", 1)[1].split("?", 1)[0]
    assert suggestion.split(",")[0].strip() == "llama-3.1-8b"


def test_simulated_oom(capsys):
    proc = run_cli("estimate", "--model", "llama-3.1-70b", "--hardware", "rtx-4090")
    line = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "rtx-4090")
    message = line.split("error: ", 1)[1]
    assert message.startswith("simulated OOM"), line
    gb = re.findall(r"(\d+(?:\.\d+)?) GB", message)
    assert len(gb) >= 2, line
    # the 70B model's bf16 weights (~141 GB) and the 24 GiB card (~25.8 GB) are both given
    assert any(abs(float(x) - 141.1) < 0.5 for x in gb), line
    assert any(abs(float(x) - 25.8) < 0.1 for x in gb), line
    assert "--tensor-parallel-size" in message

    rc, out, err = run_main(["estimate", "--model", "llama-3.1-70b", "--hardware", "rtx-4090"], capsys)
    line2 = assert_one_line_error(rc, out, err)
    assert line2 == line


def test_no_command_exits_2():
    proc = run_cli()
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_given_twice_is_error(capsys):
    rc, out, err = run_main(["estimate", "configs/model.yaml", "--model", "llama-3.1-8b"], capsys)
    assert_one_line_error(rc, out, err, "command line", "--model", "given twice")


# ---------------------------------------------------------------- good input


def test_estimate_defaults_table():
    proc = run_cli("estimate", check=0)
    assert "decode lower bound" in proc.stdout
    assert "Llama-3.1-8B" in proc.stdout and "H100" in proc.stdout
    assert "Prefill step" in proc.stdout and "Decode step" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_estimate_defaults_in_process(capsys):
    rc, out, err = run_main(["estimate"], capsys)
    assert rc == 0, err
    assert "decode lower bound" in out


def test_estimate_json():
    proc = run_cli("estimate", "--format", "json", check=0)
    data = json.loads(proc.stdout)
    summary = data["summary"]
    for key in ("decode_lower_bound_ms", "ideal_ttft_ms", "ideal_tpot_ms", "kv_cache_bytes_per_token"):
        assert isinstance(summary[key], (int, float)) and summary[key] > 0, key
    assert isinstance(data["memory"], dict) and data["memory"]["weight_bytes"] > 0
    for phase in ("prefill", "decode"):
        ops = data[phase]["operators"]
        assert isinstance(ops, list) and ops
        assert {"name", "flops", "bytes", "time_ms", "bound"} <= set(ops[0])
    # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert summary["kv_cache_bytes_per_token"] == 131072
    # the lower bound is the streamed weights over the bandwidth
    bound = summary["weights_streamed_per_step_bytes"] / (data["hardware"]["memory_bandwidth_gbps"] * 1e9) * 1e3
    assert summary["decode_lower_bound_ms"] == pytest.approx(bound)


def test_estimate_json_in_process(capsys):
    rc, out, err = run_main(["estimate", "--model", "qwen2.5-0.5b", "--hardware", "l40s", "--format", "json"],
                            capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["model"]["parameters"] == 494_032_768
    assert data["summary"]["ideal_tpot_ms"] > 0


def test_estimate_prints_the_capacity_simllm_capacity_gives(capsys):
    """The capacity row and JSON key are simllm.capacity of the same engine at the estimate's lengths."""
    argv = ["estimate", "--model", "qwen2.5-0.5b", "--hardware", "l40s", "--input-len", "256", "--output-len", "64",
            "--max-num-seqs", "32", "--max-model-len", "2048"]
    rc, out, err = run_main(argv + ["--format", "json"], capsys)
    assert rc == 0, err
    want = simllm.capacity(simllm.load_model("qwen2.5-0.5b"), simllm.load_hardware("l40s"),
                           simllm.ServingConfig(max_num_seqs=32, max_model_len=2048),
                           simllm.Workload(input_len=LengthDist("fixed", 256), output_len=LengthDist("fixed", 64)))
    assert json.loads(out)["capacity"] == pytest.approx(want.to_dict())
    rc, out, err = run_main(argv, capsys)
    assert rc == 0, err
    assert f"{want.request_throughput_rps:,.3g} req/s" in out and "limited by max_num_seqs" in out
    rc, out, err = run_main(argv + ["--no-capacity", "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["capacity"] is None


def test_estimate_seed_positional():
    proc = run_cli("estimate", "configs/model.yaml", "configs/hardware.yaml", check=0)
    out = proc.stdout
    assert "Jalapeño" in out
    assert "decode lower bound" in out
    assert "Warnings" in out
    assert "num_attention_heads x head_dim" in out and "hidden_size" in out
    assert "intermediate_size is not given" in out


def test_estimate_seed_positional_json_warnings():
    proc = run_cli("estimate", "configs/model.yaml", "configs/hardware.yaml", "--format", "json", check=0)
    data = json.loads(proc.stdout)
    assert data["hardware"]["memory_bytes"] == 40e9
    assert any("head_dim" in w for w in data["warnings"])
    assert "simllm: warning:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_estimate_hf_config_and_directory(tmp_path):
    proc = run_cli("estimate", "--model", DATA / "mixtral-8x7b.config.json", "--hardware", "h200-sxm", check=0)
    assert "decode lower bound" in proc.stdout
    shutil.copy(DATA / "qwen2.5-0.5b.config.json", tmp_path / "config.json")
    proc = run_cli("estimate", tmp_path, "l40s", check=0)
    assert "decode lower bound" in proc.stdout


def test_estimate_tensor_parallel(capsys):
    rc, out, err = run_main(["estimate", "--model", "llama-3.1-70b", "-tp", "4", "--format", "json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["serving"]["tensor_parallel_size"] == 4


def test_estimate_names_expert_parallelism_imbalance_and_lockstep(capsys):
    """With attention DP and EP the serving line says how the experts are spread, the imbalance
    the run assumes and that the ranks step together (the estimate prices one rank's step)."""
    rc, out, err = run_main(["estimate", "deepseek-v3", "h200-sxm", "-dp", "8", "-ep", "8",
                             "--expert-load-imbalance", "1.3"], capsys)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("serving"))
    assert "EP=8 (each expert over 1 GPU; random routing (the busiest GPU at this decode batch: " in line
    assert "; expert-load imbalance 1.3; the DP ranks step in lockstep" in line
    rc, out, err = run_main(["estimate", "deepseek-v3", "h200-sxm", "-dp", "8", "-ep", "8", "--num-redundant-experts",
                             "32", "--format", "json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["serving"]["num_redundant_experts"] == 32
    rc, out, err = run_main(["estimate", "deepseek-v3", "h200-sxm", "-tp", "8", "--num-redundant-experts", "8"], capsys)
    assert rc == 2 and "--num-redundant-experts" in err and "\n" not in err.strip()
    rc, out, err = run_main(["estimate", "deepseek-v3", "h200-sxm", "-tp", "8", "-ep", "8"], capsys)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("serving"))
    assert "EP=8 (each expert over 1 GPU; random routing (the busiest GPU at this decode batch: 2.5" in line
    assert "imbalance" not in line and "lockstep" not in line
    assert "moe_all_to_all" in out


def test_preset_name_spelling_on_command_line():
    proc = run_cli("estimate", "--model", "Llama_3.1-8B", "--hardware", "H100_SXM", check=0)
    assert "Llama-3.1-8B" in proc.stdout


def test_presets_lists_models_and_hardware():
    proc = run_cli("presets", "--names", check=0)
    lines = {line.split(":", 1)[0]: line for line in proc.stdout.splitlines() if ":" in line}
    assert "llama-3.1-8b" in lines["models"] and "mixtral-8x7b" in lines["models"]
    assert "h100-sxm" in lines["hardware"] and "rtx-4090" in lines["hardware"]
    assert "mi355x" in lines["hardware"] and "vllm" in lines["frameworks"]


def test_presets_kind(capsys):
    rc, out, err = run_main(["presets", "hardware"], capsys)
    assert rc == 0
    assert out.startswith("hardware (") and "h100-sxm: NVIDIA H100 SXM5 80GB" in out
    assert "llama" not in out


def test_presets_give_each_figure_its_source(capsys):
    """One preset: its figures beside the comment that sources each, then the references cited."""
    rc, out, err = run_main(["presets", "hardware", "h100-sxm"], capsys)
    assert rc == 0, err
    assert re.search(r"^  memory_bandwidth_gbps +3,350  \[2\] 3\.35 TB/s$", out, re.M), out
    assert re.search(r"^  fp8_tflops +1978\.9  dense \[1\]$", out, re.M), out
    assert re.search(r"^  \[2\] NVIDIA H100 Tensor Core GPU datasheet, https://", out, re.M), out
    rc, out, err = run_main(["presets", "models", "llama-3.1-8b", "--format", "json"], capsys)
    entry = json.loads(out)["models"][0]
    assert entry["name"] == "llama-3.1-8b"
    assert {"key": "declared_parameters", "value": 8030261248, "source": "Parameter count"} in entry["figures"]
    assert entry["references"][0] == {"label": "Source", "text": entry["references"][0]["text"]}


def test_presets_unknown_name_is_one_line(capsys):
    rc, out, err = run_main(["presets", "hardware", "h100"], capsys)
    assert_one_line_error(rc, out, err, "NAME", "did you mean h100-sxm")


def test_console_script_on_path():
    bindir = Path(sys.executable).parent
    exe = shutil.which("simllm", path=str(bindir))
    assert exe, f"no simllm console script in {bindir}"
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(["simllm", "presets", "models"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "llama-3.1-8b" in proc.stdout


def test_collector_tuned_for_the_console_script_only(capsys):
    """The console script (``main()`` reading ``sys.argv``) freezes what the imports built and raises
    the collector's threshold for its own process; ``main(argv)`` in a caller's process leaves the
    collector as it found it."""
    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    rc, out, _ = run_main(["presets", "hardware"], capsys)
    assert rc == 0 and "h100-sxm" in out
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
    probe = ("import gc, sys; from simllm.cli import main; sys.argv = ['simllm', 'presets', 'hardware']; "
             "rc = main(); print(gc.get_threshold()[0], gc.get_freeze_count() > 0, gc.isenabled(), rc)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split()[-4:] == [str(GC_THRESHOLD_ALLOCATIONS), "True", "True", "0"], proc.stderr[-2000:]


def test_help_exits_0():
    proc = run_cli("estimate", "--help", check=0)
    assert "--tensor-parallel-size" in proc.stdout


@pytest.mark.heavy
@pytest.mark.slow
def test_no_writable_numba_cache_is_one_line_and_the_run_still_works():
    """Where numba finds no folder to write its cache in (simulated: its only cache locator is
    IPython's, which takes no plain file), importing the kernels would fail; instead they compile
    uncached and the command line says so in one line, then runs: the default run, as a user
    starts it (auto kernel mode: with nothing cached it starts over interpreted, and the process
    it starts over in does not say it again; it once did)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMLLM_KERNELS")}
    env.update(NUMBA_CACHE_LOCATOR_CLASSES="IPythonCacheLocator", SIMLLM_WARMUP="0")
    proc = run_cli("run", "-q", "--num-prompts", "50", check=0, env=env)
    lines = stderr_lines(proc.stderr)
    assert "50/50 ok" in proc.stdout, proc.stdout
    assert len(lines) == 1 and "no writable cache folder" in lines[0] and "NUMBA_CACHE_DIR" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
