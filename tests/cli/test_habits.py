"""What a vLLM user types: --version, "did you mean" for a mistyped flag or subcommand, help
texts whose stated defaults are the code's, and workload flags beside a trace applied or refused."""
import argparse
import json
import re
import subprocess
import sys
from importlib import metadata

import pytest

import simllm.cli
from helpers import ROOT, assert_one_line_error, run_main
from simllm.analysis.loadtest import DEFAULT_NUMBER_PER_CLIENT
from simllm.cli import common
from simllm.cli.app import COMMANDS, build_parser
from simllm.config.datasets import DATASETS, Dataset
from simllm.config.disagg import DisaggConfig


def test_version_from_package_metadata():
    proc = subprocess.run([sys.executable, "-m", "simllm", "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"simllm {metadata.version('simllm')}"
    assert re.fullmatch(r"simllm \d+\.\d+\.\d+\S*", proc.stdout.strip())


@pytest.mark.parametrize("argv, wrong, right", [
    (["run", "--num-promts", "20"], "--num-promts", "--num-prompts"),
    (["run", "--sed=3"], "--sed", "--seed"),
    (["estimate", "--tensor-paralel-size", "2"], "--tensor-paralel-size", "--tensor-parallel-size"),
    (["rn"], "'rn'", "run"),
    (["--verison"], "--verison", "--version"),
    (["run", "--expert-routing", "balancd"], "'balancd'", "balanced"),
])
def test_did_you_mean(argv, wrong, right, capsys):
    line = assert_one_line_error(*run_main(argv, capsys), wrong)
    assert line.endswith(f"(did you mean {right}?)"), line


def test_no_suggestion_for_nothing_close(capsys):
    line = assert_one_line_error(*run_main(["run", "--zzzzqqq"], capsys), "--zzzzqqq")
    assert "did you mean" not in line


def subparsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


#: Flags whose parsed default is None ("not given") and whose stated default is the one the code
#: then uses: the workload's (a workload file's value stands when the flag is not given), the target's.
def none_default(command, dest):
    if dest in ("model", "model_pos"):
        return common.DEFAULT_MODEL
    if dest in ("hardware", "hardware_pos"):
        return common.DEFAULT_HARDWARE
    if command == "loadtest" and dest == "number":
        return DEFAULT_NUMBER_PER_CLIENT
    if command == "loadtest" and dest == "request_rates":
        return common.WORKLOAD.num_prompts  # requests per point
    if dest in ("prefill_instances", "decode_instances"):
        return getattr(DisaggConfig, dest)
    if dest == "dataset_name":
        return DATASETS[0]  # random: the workload's own lengths
    if dest.startswith(("sonnet_", "custom_")):
        return getattr(Dataset, dest)
    field = {"timeout": "timeout_s"}.get(dest, dest)
    value = getattr(common.WORKLOAD, field)
    return getattr(value, "value", value)  # a fixed length's tokens


def same(stated, real):
    if isinstance(real, (list, tuple)) and len(real) == 1:
        real = real[0]
    if isinstance(real, bool):
        return stated == str(real)
    if isinstance(real, (int, float)):
        try:
            return float(stated) == float(real)
        except ValueError:
            return False
    return stated == str(real)


def test_help_defaults_are_the_code_defaults():
    """Every help text that states a default ("(default X", "; default X" or ", default X"; not
    the descriptive "default: ..." nor prose's "by default") states the action's real default: its parsed default, or for a flag parsed as None the
    config default the code falls back to."""
    checked = 0
    for command, parser in subparsers().items():
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                continue
            text = action.help % {**vars(action), "prog": parser.prog} if "%" in action.help else action.help
            for stated in (s.rstrip(",.") for s in re.findall(r"(?:\(|; |, )default ([^\s;:)]+)", text)):
                real = action.default if action.default is not None else none_default(command, action.dest)
                assert same(stated, real), f"simllm {command} {'/'.join(action.option_strings)}: help says " \
                                           f"default {stated}, the code uses {real!r}"
                checked += 1
    assert checked > 50


def test_expert_routing_help_says_random(capsys):
    with pytest.raises(SystemExit):
        simllm.cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "imbalance skews either (default random)" in out, out
    assert common.SERVING.expert_routing == "random"


def test_every_command_has_help(capsys):
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            simllm.cli.main([command, "--help"])
        assert exc.value.code == 0
        assert "usage: simllm " + command in capsys.readouterr().out


TRACE = "arrival_s,input_len,output_len\n0,100,5\n0.5,200,6\n2,300,7\n"


@pytest.mark.parametrize("flags, flag", [
    (["--input-len", "10"], "--input-len"),
    (["--random-output-len", "10"], "--output-len"),
    (["--random-range-ratio", "0.5"], "--random-range-ratio"),
    (["--burstiness", "2"], "--burstiness"),
    (["--arrival", "constant"], "--arrival"),
    (["--request-rate", "inf"], "--request-rate"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"], "--ramp-up-strategy"),
])
def test_trace_refuses_flags_it_makes_meaningless(tmp_path, capsys, flags, flag):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    assert_one_line_error(*run_main(["run", "--workload", path, *flags], capsys), f"command line: {flag} = ")


def test_trace_applies_rate_and_cap(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    parser = subparsers()["run"]
    args = parser.parse_args(["--workload", str(path), "--request-rate", "4", "--max-concurrency", "2",
                              "--num-prompts", "3", "--seed", "5", "--prefix-hit-ratio", "0.5"])
    w = common.workload(args)
    assert (w.request_rate, w.max_concurrency, w.num_prompts, w.seed, w.prefix_hit_ratio) == (4.0, 2, 3, 5, 0.5)
    assert w.describe() == "trace t.csv (3 requests, scaled to 4 req/s, at most 2 in flight)"


def sharegpt_file(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text('[{"conversations": [{"value": "a prompt of some length"}, {"value": "an answer of some length"}]}]')
    return path


@pytest.mark.parametrize("flags, needle", [
    (["--dataset-path", "{sg}"], "--dataset-path = '{sg}': expected --dataset-name sharegpt, sonnet or custom"),
    (["--dataset-name", "random", "--dataset-path", "{sg}"], "--dataset-path = '{sg}'"),
    (["--dataset-name", "sharegpt"], "--dataset-path: a --dataset-path for --dataset-name sharegpt"),
    (["--dataset-name", "sharegpt", "--dataset-path", "{sg}", "--sonnet-input-len", "300"],
     "--sonnet-input-len = 300: expected no --sonnet-input-len without --dataset-name sonnet"),
    (["--dataset-name", "sharegpt", "--dataset-path", "{sg}", "--input-len", "30"],
     "--input-len = 30: expected no --input-len with --dataset-name sharegpt"),
    (["--dataset-name", "custom", "--dataset-path", "{sg}", "--custom-output-len", "-2"],
     "--custom-output-len = -2: expected an integer in [1, 1073741824], or -1"),
    (["--dataset-name", "sonnet", "--dataset-path", "{tmp}/none.txt"], "--dataset-path = '{tmp}/none.txt'"),
    (["--workload", "{trace}", "--dataset-name", "sharegpt", "--dataset-path", "{sg}"],
     "--dataset-name = 'sharegpt': expected no dataset with a trace"),
    (["--dataset-name", "sharegpt", "--dataset-path", "{sg}", "--num-promts", "3"], "(did you mean --num-prompts?)"),
    (["--dataset-name", "sonnet", "--dataset-path", "{sg}", "--disable-shuffle"],
     "--disable-shuffle = True: expected no --disable-shuffle without --dataset-name sharegpt or custom"),
])
def test_dataset_flags_errors(tmp_path, capsys, flags, needle):
    sg = sharegpt_file(tmp_path)
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    fill = {"sg": sg, "tmp": tmp_path, "trace": trace}
    assert_one_line_error(*run_main(["run", *(f.format(**fill) for f in flags)], capsys), needle.format(**fill))


def test_dataset_flags_build_the_workload(tmp_path):
    sg = sharegpt_file(tmp_path)
    args = subparsers()["run"].parse_args(["--dataset-name", "sharegpt", "--dataset-path", str(sg),
                                           "--sharegpt-output-len", "7", "--num-prompts", "3", "--request-rate", "5"])
    w = common.workload(args)
    assert (w.dataset.name, w.dataset.sharegpt_output_len, w.num_prompts, w.request_rate) == ("sharegpt", 7, 3, 5.0)
    assert w.describe() == "3 requests, 5 req/s poisson, sharegpt dataset sg.json, seed 0"
    back = common.workload(subparsers()["run"].parse_args(["--dataset-name", "random", "--input-len", "9"]))
    assert back.dataset is None and back.input_len.value == 9


def test_run_serves_the_dataset_and_the_scaled_trace(tmp_path, capsys):
    """End to end: a ShareGPT run serves the pairs the dataset draws (token totals exact), and a
    trace at --request-rate 2 sends its last request (n - 1) / 2 s after its first."""
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([{"conversations": [{"value": "p" * (8 * i + 16)}, {"value": "a" * (4 * i + 16)}]}
                              for i in range(7)]))
    rc, out, err = run_main(["run", "--dataset-name", "sharegpt", "--dataset-path", sg, "--num-prompts", 20,
                             "--format", "json", "--no-error-band"], capsys)
    assert rc == 0, err
    inp, outp, _ = Dataset("sharegpt", str(sg)).requests(20, 0)
    s = json.loads(out)
    assert (s["completed"], s["total_input_tokens"], s["total_output_tokens"]) == (20, inp.sum(), outp.sum())
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n" + "".join(f"{t},100,4\n" for t in (0, 30, 31, 90)))
    rc, out, err = run_main(["run", "--workload", trace, "--request-rate", 2, "--format", "json", "--no-error-band",
                             "--save-detailed", tmp_path / "d.csv"], capsys)
    assert rc == 0, err
    sent = sorted(float(line.split(",")[header.index("arrival_s")]) for header in
                  [(tmp_path / "d.csv").read_text().splitlines()[0].split(",")]
                  for line in (tmp_path / "d.csv").read_text().splitlines()[1:])
    assert sent[-1] - sent[0] == pytest.approx(1.5) and sent[1] - sent[0] == pytest.approx(0.5)


def test_workload_file_dataset_with_flags(tmp_path):
    """A workload file's dataset stays as the file gave it; flags override its keys; the random
    dataset's lengths beside it stop."""
    sharegpt_file(tmp_path)
    spec = tmp_path / "w.yaml"
    spec.write_text("workload:\n  num_prompts: 4\n  dataset_name: sharegpt\n  dataset_path: sg.json\n")
    run = subparsers()["run"]
    w = common.workload(run.parse_args(["--workload", str(spec)]))
    assert w.dataset.source == str(spec) and w.dataset.sharegpt_output_len == 0
    w = common.workload(run.parse_args(["--workload", str(spec), "--sharegpt-output-len", "11", "--disable-shuffle"]))
    assert w.dataset.sharegpt_output_len == 11 and w.dataset.path == str(tmp_path / "sg.json")
    assert w.dataset.disable_shuffle
    with pytest.raises(simllm.ConfigError, match="--output-len = 5: expected no --output-len with --dataset-name"):
        common.workload(run.parse_args(["--workload", str(spec), "--output-len", "5"]))
