"""The README's quick start as a new user runs it: its two commands verbatim, in a fresh venv made
from a fresh clone, then ``simllm --help`` and ``simllm run -q`` from another folder. A first run
of the installed copy once left ``site-packages/simcore/__pycache__`` behind (numba's cache),
which then imported as an empty namespace package in front of the editable install."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simllm.sim import warmup

ROOT = Path(__file__).resolve().parents[1]

#: The inner ``python -m pytest`` runs these quick tests only (not the suite, not this test).
INNER_TESTS = "tests/simcore/test_userdirs.py tests/test_architecture.py::test_at_most_8_top_level_modules"

#: Seconds each step may take: the first and the second command each compile the kernels cold.
STEP_TIMEOUT_S = 1800


def readme_commands(readme):
    """The lines of README.md's first ``bash`` code block."""
    match = re.search(r"^```bash\n(.*?)^```", readme, re.S | re.M)
    assert match, "README.md has no ```bash block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_readme_commands_are_the_install_lines():
    lines = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(lines) == 2 and lines[0].startswith("pip install .") and "pip install -e" in lines[1], lines


def _env(tmp):
    # As a user has it: simllm's kernel mode left to the command (auto: interpreted while the cache
    # is cold), except that no background compile outlives the test (SIMLLM_WARMUP=0).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "NUMBA_", "PYTHON", "SIMLLM_"))
           and k not in ("VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "config"), SIMLLM_WARMUP="0",
               PYTEST_ADDOPTS=f"-q -p no:cacheprovider -n 0 {INNER_TESTS}")  # -n 0: no kernels compiled
    return env


def _step(args, cwd, env, what):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.heavy
@pytest.mark.slow  # not for the NUMBA_DISABLE_JIT pass either: it installs and compiles for minutes
def test_readme_quick_start_in_a_fresh_venv(tmp_path):
    """``pip install . && simllm run`` then ``pip install -e ".[test]" && python -m pytest``, each
    verbatim from the README, in a fresh venv from a fresh clone (of what is committed); then
    ``simllm --help`` and ``simllm run -q`` from another folder exit 0 (the kernels interpreted);
    with the background compile on, it compiles them into the user's cache folder (not the
    sources), and the next run loads them and prints the same; nothing of simcore is left in
    site-packages."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    clone, venv, elsewhere = tmp_path / "clone", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(tmp_path)
    _step(["git", "clone", "--quiet", str(ROOT), str(clone)], tmp_path, env, "git clone")
    _step([sys.executable, "-m", "venv", str(venv)], tmp_path, env, "python -m venv")
    activate = venv / ("Scripts" if os.name == "nt" else "bin") / "activate"
    for line in readme_commands((clone / "README.md").read_text(encoding="utf-8")):
        _step(["bash", "-c", f'. "{activate}" && {line}'], clone, env, line)

    scripts = activate.parent
    simllm = str(scripts / "simllm")
    help_ = _step([simllm, "--help"], elsewhere, env, "simllm --help")
    assert "run" in help_.stdout
    run = _step([simllm, "run", "-q"], elsewhere, env, "simllm run -q")
    assert run.stdout.strip(), run.stderr
    # Nothing compiled so far: the commands ran the kernels as Python. Now as a user's first run
    # leaves it: the same command with the background compile on, which the next run loads.
    first = _step([simllm, "run", "-q"], elsewhere, dict(env, SIMLLM_WARMUP="1"), "simllm run -q, warm-up on")
    assert first.stdout == run.stdout
    folders = list((tmp_path / "cache" / "simllm" / "numba").iterdir())
    assert len(folders) == 1 and warmup.wait_for_warmups(folders[0]), folders
    assert not (folders[0] / warmup.LOG_NAME).read_text(), "the warm-up failed"
    again = _step([simllm, "run", "-q"], elsewhere, env, "simllm run -q, compiled")
    assert (again.stdout, again.stderr) == (run.stdout, "")
    loaded = json.loads(_step([simllm, "run", "--format", "json"], elsewhere, env, "simllm run --format json").stdout)
    assert loaded["compile_wall_s"] > 0, "the next run did not load the compiled kernels"  # interpreted: 0

    assert not list(venv.glob("lib*/python*/site-packages/simcore")), "site-packages/simcore left behind"
    assert not list(venv.glob("Lib/site-packages/simcore"))
    stray = [p for p in clone.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert not stray, stray[:5]
    cached = list((tmp_path / "cache" / "simllm" / "numba").rglob("*.nbi"))
    assert cached, "numba's cache is not in the user's cache folder"
