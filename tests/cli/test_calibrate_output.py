"""``simllm calibrate`` writes only where it is told: a file named on the command line, else the
user's own profile in the per-user config folder, which ``--framework NAME`` then finds before the
shipped one; never into simllm's package or the shipped presets (a calibration once rewrote
configs/frameworks/vllm.yaml, its sourced comments included)."""
import shutil
import subprocess

import pytest
import yaml

import simllm
import simllm.cli
from helpers import GOLDEN, ROOT, stderr_lines
from simllm.config import presets
from simllm.sim.pack import framework_for

SHIPPED_VLLM = presets.configs_dir() / "frameworks" / "vllm.yaml"
MEASURED = [str(GOLDEN / f"vllm_run{i}.json") for i in range(4)]


def _git_status_configs():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    proc = subprocess.run(["git", "status", "--porcelain", "--", "configs/"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None


@pytest.fixture
def user_config(tmp_path, monkeypatch):
    folder = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    return folder / "simllm"


@pytest.mark.slow
def test_calibrate_writes_the_users_profile_and_leaves_the_shipped_one(user_config, capsys):
    shipped, status = SHIPPED_VLLM.read_bytes(), _git_status_configs()
    argv = ["calibrate", *MEASURED, "--hardware", "h100-sxm", "--fit", "frontend_latency_ms", "--max-iterations", "2"]
    assert simllm.cli.main(argv) == 0
    out = capsys.readouterr().out
    mine = user_config / "frameworks" / "vllm.yaml"
    assert f"wrote {mine}" in out and "--framework vllm now uses it before the shipped profile" in out
    assert SHIPPED_VLLM.read_bytes() == shipped
    assert _git_status_configs() == status and status in (None, "")  # the checkout's configs/ stays clean
    text = mine.read_text(encoding="utf-8")
    assert "fitted by simllm calibrate" in text and "[1] vllm-project/vllm PR #19970" in text  # a copy, edited

    # --framework vllm (the default) now reads it, in a simulation too; without it, the shipped one
    fitted = yaml.safe_load(text)["framework"]["frontend_latency_ms"]
    assert simllm.load_framework("vllm").source == str(mine)
    assert framework_for(simllm.load_hardware("h100-sxm"), simllm.ServingConfig()).frontend_latency_ms == fitted
    mine.unlink()
    assert simllm.load_framework("vllm").source == str(SHIPPED_VLLM)


def test_a_profile_in_the_user_folder_comes_before_the_shipped_one(user_config):
    folder = user_config / "frameworks"
    folder.mkdir(parents=True)
    (folder / "sglang.yaml").write_text("framework:\n  name: sglang\n  frontend_latency_ms: 7.5\n", encoding="utf-8")
    assert simllm.load_framework("sglang").frontend_latency_ms == 7.5
    assert simllm.load_framework("vllm").source == str(SHIPPED_VLLM)  # others stay shipped
    assert presets.user_preset_path("frameworks", "SGLang") == folder / "sglang.yaml"
    models = user_config / "models"  # only framework profiles are looked up there
    models.mkdir()
    (models / "llama-3.1-8b.yaml").write_text("not: a model\n", encoding="utf-8")
    assert simllm.load_model("llama-3.1-8b").name


@pytest.mark.parametrize("flag, target", [
    ("--framework-output", lambda tmp: SHIPPED_VLLM),
    ("--framework-output", lambda tmp: presets.configs_dir() / "frameworks" / "vllm-new.yaml"),
    ("-o", lambda tmp: presets.PACKAGE_DIR / "cal.yaml"),
    ("-o", lambda tmp: presets.configs_dir() / "hardware" / "h100-sxm.yaml"),
    ("-o", lambda tmp: tmp / "link" / "hardware" / "mine.yaml"),  # a link into the presets
])
def test_calibrate_refuses_to_write_into_the_package_or_the_presets(flag, target, tmp_path, user_config, capsys):
    (tmp_path / "link").symlink_to(presets.configs_dir(), target_is_directory=True)
    path = target(tmp_path)
    before = path.read_bytes() if path.exists() else None
    rc = simllm.cli.main(["calibrate", *MEASURED, "--hardware", "h100-sxm", flag, str(path)])
    err = capsys.readouterr().err
    lines = stderr_lines(err)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert flag in lines[0] and "outside simllm's package and shipped presets" in lines[0]
    assert (path.read_bytes() if path.exists() else None) == before
    assert not (user_config / "frameworks").exists()
