"""SIGKILL at points of a writer's run never leaves a truncated file under its final name
(issue 16): each writer writes a temporary file in the same folder and renames it. Per writer, one
run to completion times it, then runs killed at 45% and 90% of that time (the writes
come last) must leave the final name absent or whole. A sweep's journal (``*.partial.csv``) is
append-only by design: the resumed run truncates its torn last line, which the last check does."""
import csv
import signal
import subprocess
import sys
import time

import pytest
import yaml

from helpers import GOLDEN

# heavy: SIGKILL during writes (CI's second step)
pytestmark = [pytest.mark.heavy, pytest.mark.slow]
FRACTIONS = (0.45, 0.9)
MEASURED = [str(GOLDEN / f"vllm_run{i}.json") for i in range(4)]
PNG_END = b"IEND\xaeB`\x82"


def _start(argv, cwd):
    return subprocess.Popen([sys.executable, "-m", "simllm", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _timed_run(argv, cwd):
    start = time.perf_counter()
    proc = _start(argv, cwd)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    return time.perf_counter() - start


def _kill_at(argv, cwd, after_s):
    proc = _start(argv, cwd)
    try:
        proc.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def _csv_rows(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} ends mid-line"
    return list(csv.reader(text.splitlines()))


def _detail_whole(path):
    rows = _csv_rows(path)
    assert len(rows) == 1 + 60_000 and all(len(r) == len(rows[0]) for r in rows)


def _plots_whole(folder):
    for png in (p for p in folder.glob("*.png") if not p.name.startswith(".")):  # not the temporaries
        assert png.read_bytes().endswith(PNG_END), f"{png} is truncated"


def _sweep_whole(path):
    rows = _csv_rows(path)
    assert len(rows) == 1 + 8 and all(len(r) == len(rows[0]) for r in rows)


def _calibrated_whole(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and "hardware" in data


WRITERS = {
    "run --save-detailed": (["run", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--num-prompts", "60000",
                             "--request-rate", "50", "-q", "--save-detailed", "out/detail.csv"],
                            "out/detail.csv", _detail_whole),
    "run --plot": (["run", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--num-prompts", "2000", "-q",
                    "--plot", "plots"], "plots", _plots_whole),
    "sweep": (["sweep", str(GOLDEN / "sweep.yaml"), "--output", "out/results.csv", "--workers", "1", "-q"],
              "out/results.csv", _sweep_whole),
    "calibrate": (["calibrate", *MEASURED, "--hardware", "h100-sxm", "-o", "out/cal.yaml",
                   "--fit", "compute_utilization", "bandwidth_utilization"], "out/cal.yaml", _calibrated_whole),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_sigkill_never_leaves_a_truncated_file(writer, tmp_path):
    if writer == "run --plot":
        pytest.importorskip("matplotlib")
    argv, target, whole = WRITERS[writer]
    full = tmp_path / "full"
    full.mkdir()
    wall = _timed_run(argv, full)
    whole(full / target)  # the check holds for a finished run
    for i, fraction in enumerate(FRACTIONS):
        cwd = tmp_path / f"killed{i}"
        cwd.mkdir()
        _kill_at(argv, cwd, wall * fraction)
        path = cwd / target
        if path.exists():
            whole(path)
    if writer == "sweep":  # a killed sweep resumes from its journal to the same whole table
        cwd = tmp_path / f"killed{len(FRACTIONS) - 1}"
        _timed_run(argv, cwd)
        whole(cwd / target)
