"""Issue 16's bad inputs, one row per failure class: each exits 2 with one line on stderr that
names where the value came from and what was allowed, never a traceback, never a hang (every
subprocess runs under a timeout)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT
from helpers import assert_one_line_error, run_main
from test_cli import run_cli

MODEL = (ROOT / "configs" / "model.yaml").read_text(encoding="utf-8")
HARDWARE = (ROOT / "configs" / "hardware" / "custom-gpu.yaml").read_text(encoding="utf-8")
HF = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
      "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}

VLLM_RESULT = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 4, "request_rate": "inf",
               "max_concurrency": 1, "completed": 4, "total_input_tokens": 512, "total_output_tokens": 256,
               "mean_ttft_ms": 24.0, "mean_tpot_ms": 6.4}


def _write(tmp_path, name, text):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _folder(path):
    path.mkdir()
    return path


def _model(tmp_path, old, new, name="model.yaml"):
    assert old in MODEL
    return _write(tmp_path, name, MODEL.replace(old, new))


def _hardware(tmp_path, old, new):
    assert old in HARDWARE
    return _write(tmp_path, "gpu.yaml", HARDWARE.replace(old, new))


def _workload(tmp_path, body, name="workload.yaml"):
    return _write(tmp_path, name, "workload:\n  num_prompts: 10\n" + body)


def _run_model(path):
    return ["run", path, "configs/hardware.yaml", "-q", "--num-prompts", "5"]


CASES = {
    # a number that overflowed a float (OverflowError)
    "layers_401_digits": lambda t: (_run_model(_model(t, "layers: 32", "layers: 1" + "0" * 400)),
                                    ["model.yaml:", "model.layers", "1000", "magnitude at most 1e+15"]),
    # NaN downstream of a huge memory size
    "memory_1e300": lambda t: (["run", "configs/model.yaml", _hardware(t, "memory_size_gb: 40", "memory_size_gb: 1.0e300"),
                                "-q"], ["gpu.yaml:", "hardware.memory_size_gb", "1.0e300", "at most"]),
    "memory_1e7_gb": lambda t: (["run", "configs/model.yaml", _hardware(t, "memory_size_gb: 40", "memory_size_gb: 1.0e7"),
                                 "-q"], ["gpu.yaml:", "hardware.memory_size_gb", "<= 1000000"]),
    "tflops_1e-300": lambda t: (["run", "configs/model.yaml", _hardware(t, "fp16_tflops: 80", "fp16_tflops: 1.0e-300"),
                                 "-q"], ["gpu.yaml:", "hardware.fp16_tflops", "> 0 by at least 1e-12"]),
    # HF config.json with wrongly typed fields
    "hf_list_field": lambda t: (["run", "--model", _write(t, "config.json", json.dumps(dict(HF, hidden_size=[256]))),
                                 "-q"], ["config.json", "hidden_size", "[256]", "integer"]),
    "hf_string_field": lambda t: (["run", "--model", _write(t, "config.json", json.dumps(dict(HF, vocab_size="big"))),
                                   "-q"], ["config.json", "vocab_size", "'big'", "integer"]),
    "hf_context_2_40": lambda t: (["run", "--model", _write(t, "config.json", json.dumps(
        dict(HF, max_position_embeddings=2**40))), "-q"], ["config.json", "max_position_embeddings", "<= 1073741824"]),
    "hf_duplicate_key": lambda t: (["run", "--model", _write(t, "config.json", '{"hidden_size": 256, "hidden_size": 512}'),
                                    "-q"], ["config.json", "hidden_size", "duplicate key"]),
    # YAML: depth, duplicate keys, alias bombs
    "yaml_20000_deep": lambda t: (_run_model(_write(t, "deep.yaml", "model: " + "[" * 20000 + "]" * 20000 + "\n")),
                                  ["deep.yaml:1:", "nested more than 64 levels"]),
    "yaml_duplicate_key": lambda t: (_run_model(_model(t, "  layers: 32\n", "  layers: 32\n  layers: 16\n")),
                                     ["model.yaml:", "layers", "duplicate key (first at line"]),
    "yaml_alias_bomb": lambda t: (_run_model(_write(t, "bomb.yaml", "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "model: *i\n")),
                                  ["bomb.yaml", "model", "..."]),
    "yaml_many_aliases": lambda t: (_run_model(_write(t, "aliases.yaml", "a: &a 1\nb: [" + ", ".join(["*a"] * 1500)
                                                      + "]\n")), ["aliases.yaml:2:", "more than 1000 aliases"]),
    # files a workload names
    "empirical_binary": lambda t: (["run", "--workload", _workload(t, "  input_len: {distribution: empirical, file: "
                                                                   "lengths.dat}\n  output_len: 8\n"), "-q"],
                                   ["lengths.dat", "UTF-8"]) if _write(t, "lengths.dat", bytes(range(256))) else None,
    "empirical_outside": lambda t: (["run", "--workload", _workload(t, "  input_len: {distribution: empirical, file: "
                                                                    "/etc/passwd}\n  output_len: 8\n"), "-q"],
                                    ["workload.yaml:3:", "workload.input_len.file", "/etc/passwd", "inside",
                                     "--allow-outside-paths"]),
    "trace_outside": lambda t: (["run", "--workload", _workload(t, "  trace: ../../etc/passwd\n"), "-q"],
                                ["workload.yaml:3:", "workload.trace", "inside"]),
    "normal_mean_1e300": lambda t: (["run", "--workload", _workload(t, "  input_len: {distribution: normal, mean: 1.0e300, "
                                                                    "std: 1}\n"), "-q"],
                                    ["workload.yaml:3:", "workload.input_len.mean", "at most"]),
    # traces
    "trace_length_1e30": lambda t: (["run", "--workload", _write(t, "t.csv", "arrival_s,input_len,output_len\n0,100,1e30\n"),
                                     "-q"], ["t.csv:2:", "output_len", "'1e30'", "[0, 1073741824]"]),
    "trace_time_1e308": lambda t: (["run", "--workload", _write(t, "t.csv", "arrival_s,input_len,output_len\n-1e308,100,10\n"
                                                                "1e308,100,10\n"), "-q"],
                                   ["t.csv:2:", "arrival_s", "within 1e+12 s"]),
    # flags
    "num_prompts_1e30": lambda t: (["run", "--num-prompts", "1e30", "-q"], ["--num-prompts", "1e30", "[1, 2147483647]"]),
    "dp_1e30": lambda t: (["run", "-dp", "1e30", "-q"], ["--data-parallel-size", "1e30", "[1, 2147483647]"]),
    "dp_70000": lambda t: (["run", "-dp", "70000", "-q"], ["--data-parallel-size", "70000", "[1, 65536]"]),
    "parallel_1e30": lambda t: (["loadtest", "--parallel", "1e30", "-q"], ["--parallel", "1e30"]),
    "kv_compression_inf": lambda t: (["run", "--kv-compression-ratio", "inf", "-q"], ["--kv-compression-ratio", "inf",
                                                                                      "[1, 1e6]"]),
    "batch_max_1e30": lambda t: (["run", "--batch-max", "1e30", "--batching", "dynamic", "-q"],
                                 ["--batch-max", "1e30"]),
    "output_len_2_32": lambda t: (["run", "--output-len", "4294967301", "-q"], ["--output-len", "4294967301"]),
    "request_rate_1e-300": lambda t: (["run", "--request-rate", "1e-300", "--format", "json"],
                                      ["--request-rate", "1e-300", "[1e-06, 1e+09]"]),
    "goodput_negative": lambda t: (["run", "--num-prompts", "5", "-q", "--goodput", "ttft:-5"],
                                   ["--goodput", "ttft:-5", "(0, 1e12]"]),
    "goodput_nan": lambda t: (["run", "--num-prompts", "5", "-q", "--goodput", "ttft:nan"], ["--goodput", "ttft:nan"]),
    "save_detailed_onto_folder": lambda t: (["run", "--num-prompts", "5", "-q", "--save-detailed", t],
                                            ["--save-detailed", "not a folder"]),
    "save_detailed_onto_folder_named_csv": lambda t: (["run", "--num-prompts", "5", "-q", "--save-detailed",
                                                       _folder(t / "d.csv")], ["--save-detailed", "not a folder"]),
    "calibrate_output_under_a_file": lambda t: (["calibrate", str(ROOT / "tests/data/golden/vllm_run0.json"),
                                                 "--hardware", "h100-sxm", "-o", _write(t, "f", "x") / "cal.yaml"],
                                                ["-o", "a path under a folder"]),
    "sweep_output_under_a_file": lambda t: (["sweep", str(ROOT / "tests/data/golden/sweep.yaml"), "--output",
                                             _write(t, "f", "x") / "r.csv"], ["--output", "a path under a folder"]),
    "validate_isl_negative": lambda t: (["validate", _write(t, "m.json", json.dumps(dict(VLLM_RESULT, total_input_tokens=-40))),
                                         "--hardware", "h100-sxm"], ["m.json", "input_len", "-10", "[1, 1073741824]"]),
    "validate_prompts_1e30": lambda t: (["validate", _write(t, "m.json", json.dumps(dict(VLLM_RESULT, num_prompts=10**30))),
                                         "--hardware", "h100-sxm"], ["m.json", "num_prompts", "[0, 2147483647]"]),
    # sweeps
    "sweep_1e8_seeds": lambda t: (["sweep", _write(t, "s.yaml", "base: {workload: {num_prompts: 10}}\ngrid:\n"
                                                   "  workload.max_concurrency: [1]\nseeds: 100000000\n")],
                                  ["s.yaml:4:", "seeds", "100000000", "[1, 10000000]"]),
    "sweep_output_outside": lambda t: (["sweep", _write(t, "s.yaml", "base: {workload: {num_prompts: 10}}\ngrid:\n"
                                                        "  workload.max_concurrency: [1]\noutput: /tmp/elsewhere.csv\n")],
                                       ["s.yaml:4:", "output", "inside"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line(case, tmp_path, capsys):
    argv, needles = CASES[case](tmp_path)
    rc, out, err = run_main(argv, capsys)
    line = assert_one_line_error(rc, out, err, *needles)
    assert len(line) < 600  # the value is quoted cut short (a path or two and the range remain)


#: One case of each kind as a separate process: the console script's own exit status and stderr.
SUBPROCESS_CASES = ("yaml_alias_bomb", "layers_401_digits", "trace_length_1e30", "num_prompts_1e30",
                    "calibrate_output_under_a_file", "sweep_1e8_seeds")


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_subprocess(case, tmp_path):
    argv, needles = CASES[case](tmp_path)
    proc = run_cli(*argv)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, *needles)


@pytest.mark.slow  # seconds interpreted: the compiled pass covers it
def test_allow_outside_paths_reads_the_file(tmp_path):
    lengths = tmp_path / "elsewhere" / "lengths.txt"
    lengths.parent.mkdir()
    lengths.write_text("100\n200\n", encoding="utf-8")
    spec = _write(tmp_path, "w.yaml", f"workload:\n  num_prompts: 4\n  input_len: {{distribution: empirical, "
                                      f"file: {lengths}}}\n  output_len: 8\n")
    inside = run_cli("run", "--workload", spec, "-q")  # the file is in a subfolder of the spec's: allowed
    assert inside.returncode == 0, inside.stderr
    outside = _write(tmp_path / "elsewhere", "w.yaml", f"workload:\n  num_prompts: 4\n  input_len: {{distribution: "
                                                      f"empirical, file: {tmp_path / 'x.txt'}}}\n  output_len: 8\n")
    (tmp_path / "x.txt").write_text("50\n", encoding="utf-8")
    assert run_cli("run", "--workload", outside, "-q").returncode == 2
    allowed = run_cli("run", "--workload", outside, "-q", "--allow-outside-paths")
    assert allowed.returncode == 0, allowed.stderr
    env = dict(os.environ, SIMLLM_ALLOW_OUTSIDE_PATHS="1")
    assert run_cli("run", "--workload", outside, "-q", env=env).returncode == 0


@pytest.mark.heavy
def test_ctrl_c_prints_one_line_and_exits_130():
    # ~15 s of kernel (speculative steps take the explicit path) in ~300 MB of request arrays
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "synthetic_acceptance_length": 2.0}'
    proc = subprocess.Popen([sys.executable, "-m", "simllm", "run", "--workload", "bench-1m", "--num-prompts",
                             "3000000", "--speculative-config", spec, "-q"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8.0)  # past the imports (before main() Ctrl-C is Python's own): generation, then the kernel
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip().splitlines() == ["simllm: interrupted"], err


def test_allow_outside_paths_lasts_one_command(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SIMLLM_ALLOW_OUTSIDE_PATHS", raising=False)
    (tmp_path / "x.txt").write_text("50\n", encoding="utf-8")
    (tmp_path / "spec").mkdir()
    spec = _write(tmp_path / "spec", "w.yaml", f"workload:\n  num_prompts: 3\n  input_len: {{distribution: empirical, "
                                              f"file: {tmp_path / 'x.txt'}}}\n  output_len: 4\n")
    assert run_main(["run", "--workload", spec, "-q", "--allow-outside-paths"], capsys)[0] == 0
    assert "SIMLLM_ALLOW_OUTSIDE_PATHS" not in os.environ
    assert run_main(["run", "--workload", spec, "-q"], capsys)[0] == 2
