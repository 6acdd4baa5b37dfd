"""Golden outputs: every ``simllm`` command on a small case gives the same text and files as the
recorded run (tests/data/golden/*.out), wall-clock fields aside and numbers to 1e-6 relative.

A change that is meant to change an output regenerates the files and shows the diff in review::

    SIMLLM_REGEN_GOLDEN=1 python -m pytest tests/cli/test_golden.py
"""
import contextlib
import io
import math
import os
import re
import shutil

import pytest

import simllm.cli
from helpers import GOLDEN, ROOT, without_compile_notice

REGEN = os.environ.get("SIMLLM_REGEN_GOLDEN") == "1"
MEASURED = [f"vllm_run{i}.json" for i in range(4)]

MODEL = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
# name -> (argv, files the command writes, whether its numbers are timings of this machine)
CASES = {
    "run_text": (["run", *MODEL, "--num-prompts", "100", "--request-rate", "8", "--seed", "1"], [], False),
    "run_json": (["run", *MODEL, "--num-prompts", "50", "--max-concurrency", "4", "--format", "json"], [], False),
    "run_seed_form": (["run", str(ROOT / "configs/model.yaml"), str(ROOT / "configs/hardware.yaml"),
                       "--num-prompts", "40", "-q"], [], False),
    "run_output_vllm": (["run", *MODEL, "--num-prompts", "30", "--max-concurrency", "4", "-q",
                         "--output", "result.json", "--save-detailed", "detail.csv"], ["result.json", "detail.csv"], False),
    "run_output_guidellm": (["run", *MODEL, "--num-prompts", "30", "--max-concurrency", "4", "-q",
                             "--output", "benchmarks.json", "--export-format", "guidellm"], ["benchmarks.json"], False),
    "run_output_requests": (["run", *MODEL, "--num-prompts", "20", "--request-rate", "4", "-q",
                             "--output", "requests.csv", "--export-format", "requests"], ["requests.csv"], False),
    "estimate_text": (["estimate", "--model", "mistral-7b", "--hardware", "rtx-4090", "--max-model-len", "4096"],
                      [], False),
    "estimate_json": (["estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "-tp", "4", "--dtype", "fp8",
                       "--batch-size", "64", "--format", "json"], [], False),
    "presets": (["presets"], [], False),
    "loadtest": (["loadtest", *MODEL, "--parallel", "1", "8", "--number", "8", "32"], [], False),
    "loadtest_csv": (["loadtest", "--model", "qwen2.5-7b", "--hardware", "l40s", "--concurrency-range", "1:8:x2",
                      "--number", "16", "--slo-p99-latency-ms", "8000", "--format", "csv"], [], False),
    "diagnose": (["diagnose", *MODEL, "--input-len", "8192", "--output-len", "16", "--max-concurrency", "8",
                  "--num-prompts", "32"], [], False),
    "compare": (["compare", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "h200-sxm", "--max-concurrency", "8",
                 "--num-prompts", "32"], [], False),
    "sweep": (["sweep", str(GOLDEN / "sweep.yaml"), "--output", "results.csv", "--workers", "1"], ["results.csv"],
              False),
    "frontier": (["frontier", "results.csv"], [], False),
    "optimize": (["optimize", *MODEL, "--slo", "ttft_p99<=2000,tpot_p99<=50", "--over", "tp=1,2",
                  "max_num_seqs=16,64", "--num-prompts", "60", "--request-rate", "6"], [], False),
    "validate": (["validate", *MEASURED, "--hardware", "h100-sxm"], [], False),
    "validate_json": (["validate", *MEASURED, "--hardware", "h100-sxm", "--format", "json"], [], False),
    "calibrate": (["calibrate", *MEASURED, "--hardware", "h100-sxm", "-o", "cal.yaml", "--format", "json",
                   "--fit", "compute_utilization", "bandwidth_utilization"],
                  ["cal.yaml"], False),
    "profile": (["profile", "--hardware", "h100-sxm", "--device", "cpu", "--size", "tiny", "-o", "prof.yaml"],
                ["prof.yaml"], True),
}
NEEDS = {"profile": "torch"}
AFTER = {"frontier": "sweep"}  # frontier reads the sweep's table

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|\binf\b|\bNaN\b|\bInfinity\b")
# Lines (text) and keys (JSON/YAML/CSV headers) that hold wall-clock time or today's date.
# (the profile's first line names the machine's processor)
VOLATILE = re.compile(r"wall|date|_per_s\"|elapsed|configs/s|requests/s|took|run in [0-9.]+ s|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|^simllm profile: "
                      r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-", re.I)


def _mask(text, tmp):
    text = text.replace(str(tmp), "<TMP>").replace(str(ROOT), "<ROOT>")
    return "\n".join("<volatile>" if VOLATILE.search(line) else line for line in text.splitlines())


def _run(name, tmp):
    argv, files, _ = CASES[name]
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = simllm.cli.main(list(argv))
    finally:
        os.chdir(cwd)
    parts = [f"$ simllm {' '.join(argv)}", f"exit {rc}", "--- stdout", out.getvalue(), "--- stderr",
             without_compile_notice(err.getvalue())]
    for f in files:
        parts += [f"--- file {f}", (tmp / f).read_text(encoding="utf-8")]
    return _mask("\n".join(parts), tmp)


def _same(got, want, timings):
    """Equal text outside numbers; numbers equal to 1e-6 relative (or all masked for timings)."""
    g_lines, w_lines = got.splitlines(), want.splitlines()
    assert len(g_lines) == len(w_lines), f"{len(g_lines)} lines, golden has {len(w_lines)}"
    for i, (g, w) in enumerate(zip(g_lines, w_lines), 1):
        skeleton = (lambda s: " ".join(NUMBER.sub("#", s).split())) if timings else (lambda s: NUMBER.sub("#", s))
        assert skeleton(g) == skeleton(w), f"line {i}:\n  got:    {g}\n  golden: {w}"
        if timings:
            continue
        for a, b in zip(NUMBER.findall(g), NUMBER.findall(w)):
            fa, fb = float(a.replace("Infinity", "inf")), float(b.replace("Infinity", "inf"))
            if math.isnan(fa) and math.isnan(fb):
                continue
            assert fa == pytest.approx(fb, rel=1e-6, abs=1e-9), f"line {i}:\n  got:    {g}\n  golden: {w}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("golden")
    for f in MEASURED:
        shutil.copy(GOLDEN / f, tmp / f)
    return tmp


#: Cases that compile kernel variants of their own (diagnose's default what-ifs include speculative
#: decoding and P/D): CI's heavy tier.
HEAVY_CASES = ("diagnose",)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy) if n in HEAVY_CASES else n for n in CASES])
def test_command_output_matches_golden(name, workdir):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    if name in AFTER and not (workdir / CASES[AFTER[name]][1][0]).exists():
        _run(AFTER[name], workdir)
    got = _run(name, workdir)
    path = GOLDEN / f"{name}.out"
    if REGEN:
        path.write_text(got + "\n", encoding="utf-8")
        return
    _same(got, path.read_text(encoding="utf-8").rstrip("\n"), CASES[name][2])
