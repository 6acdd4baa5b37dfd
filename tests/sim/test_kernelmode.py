"""Compiled or interpreted kernels (simllm.sim.kernelmode, simcore._jit's interpreted mode, the
background warm-up): the choice, the switches both ways, the same numbers either way, and a
warm-up that compiles what an interpreted process ran."""
import json
import os
import pickle
import subprocess
import sys
import threading
import time

import numba
import numpy as np
import pytest

import simcore.engine
import simcore.layout
from helpers import JIT_DISABLED, ROOT
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.workload import Workload
from simllm.errors import ConfigError
from simllm.sim import kernelmode, warmup
from simllm.sim.simulate import run_reporting, simulate

try:
    import fcntl
except ImportError:  # Windows: the warm-up takes no lock
    fcntl = None

AUTO = {kernelmode.KERNELS_ENV: "", kernelmode.AUTO_ENV: "", kernelmode.WARMUP_ENV: "0"}
SMALL = dict(num_prompts=300, request_rate=40.0, seed=3)


def _env(tmp_path, **extra):
    """A subprocess's environment: an empty kernel cache of its own, auto mode, no warm-up."""
    env = {k: v for k, v in os.environ.items() if k not in AUTO}
    env.update({"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "SIMLLM_WARMUP": "0", **extra})
    return env


def _python(code, env, timeout=300):
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_choose_follows_the_cache(tmp_path):
    env = {}
    assert kernelmode.choose(env, folder=tmp_path) == "interpreted"
    assert env == {"SIMLLM_KERNELS": "interpreted", "SIMLLM_KERNELS_AUTO": "1"}
    (tmp_path / "simcore_x").mkdir()
    (tmp_path / "simcore_x" / "engine.run_events_nb-12.py311.nbi").write_bytes(b"")
    env = {"SIMLLM_KERNELS": "auto"}
    assert kernelmode.choose(env, folder=tmp_path) == "compiled"
    assert kernelmode.switching(env) and kernelmode.mode(env) == "compiled"


@pytest.mark.parametrize("forced", ["compiled", "interpreted"])
def test_a_forced_mode_never_switches(tmp_path, forced):
    env = {"SIMLLM_KERNELS": forced}
    assert kernelmode.choose(env, folder=tmp_path) == forced
    assert env == {"SIMLLM_KERNELS": forced} and not kernelmode.switching(env)


def test_a_command_started_over_switches_at_most_once_more(tmp_path):
    """compiled (auto) -> interpreted, still auto -> compiled, forced: at most two starts over."""
    env = kernelmode.switched_environ("interpreted", {"SIMLLM_KERNELS": "compiled", "SIMLLM_KERNELS_AUTO": "1"})
    assert kernelmode.choose(env, folder=tmp_path) == "interpreted" and kernelmode.switching(env)
    env = kernelmode.switched_environ("compiled", env)
    assert kernelmode.choose(env, folder=tmp_path) == "compiled" and not kernelmode.switching(env)


def test_a_bad_mode_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="SIMLLM_KERNELS.*jit.*one of compiled, interpreted, auto"):
        kernelmode.choose({"SIMLLM_KERNELS": "jit"}, folder=tmp_path)


def test_work_is_output_tokens_plus_prompt_chunks():
    assert kernelmode.work_of(1_024_000, 128_000) == 128_000 + 2_000
    assert kernelmode.work_of(0, 5) == 5.0


def test_interpreted_seconds_past_the_limit_ask_for_compiled(monkeypatch):
    monkeypatch.setattr(kernelmode, "_tally", [0.0] * 5)
    monkeypatch.setenv("SIMLLM_KERNELS", "interpreted")
    monkeypatch.setenv("SIMLLM_KERNELS_AUTO", "1")
    limit_s, prior = kernelmode.INTERPRETED_SECONDS_LIMIT, kernelmode.PRIOR_SECONDS_PER_WORK
    first = 0.9 * limit_s / prior
    kernelmode.charge(first)  # no rate measured yet: the prior's, within the limit
    kernelmode.measured(first, 2.0)  # it ran in 2 s
    rate = 2.0 / first
    assert kernelmode.estimate_s(500.0) == pytest.approx(500 * rate)
    kernelmode.charge(10.0)
    kernelmode.measured(10.0, 0.5)  # a tiny run (fixed costs): its time counts, its rate does not
    assert kernelmode.estimate_s(500.0) == pytest.approx(500 * rate)
    kernelmode.charge(0.99 * (limit_s - 2.5) / rate)  # what is left, at that rate: stays
    with pytest.raises(kernelmode.KernelModeSwitch) as switch:
        kernelmode.charge(0.02 * (limit_s - 2.5) / rate)  # charged before the last one ran: past
    assert switch.value.mode == "compiled" and f"{limit_s:.0f} s" in switch.value.reason
    again = pickle.loads(pickle.dumps(switch.value))  # from a worker process
    assert (again.mode, again.reason, str(again)) == (switch.value.mode, switch.value.reason, str(switch.value))
    monkeypatch.delenv("SIMLLM_KERNELS_AUTO")
    kernelmode.charge(1e9)  # forced interpreted: the user's choice stands
    monkeypatch.setenv("SIMLLM_KERNELS_AUTO", "1")
    monkeypatch.setenv("SIMLLM_KERNELS", "compiled")
    kernelmode.charge(1e9)  # compiled already
    kernelmode.measured(1e9, 1.0)  # a compiled run sets no interpreted rate
    assert kernelmode.estimate_s(500.0) == pytest.approx(500 * rate) and kernelmode.spent() > 2e9


def test_switched_environ_forces_the_target():
    env = kernelmode.switched_environ("compiled", {"SIMLLM_KERNELS": "interpreted", "SIMLLM_KERNELS_AUTO": "1",
                                                  "HOME": "/h"})
    assert env == {"SIMLLM_KERNELS": "compiled", "HOME": "/h"}


def _summary_probe(extra=""):
    return ("import json, sys\n"
            "from simllm.config.hardware import load_hardware\n"
            "from simllm.config.model import load_model\n"
            "from simllm.config.workload import Workload\n"
            "from simllm.sim.simulate import simulate\n"
            f"r = simulate(load_model('llama-3.1-8b'), load_hardware('h100-sxm'), workload=Workload(**{SMALL!r}))\n"
            "print(json.dumps(r.summary))\n" + extra)


@pytest.mark.skipif(JIT_DISABLED, reason="compares against the compiled kernels")
def test_interpreted_kernels_give_the_compiled_numbers_and_note_their_signatures(tmp_path):
    record = ("from simllm.sim import kernelmode\n"
              "print(repr(sorted(repr(s) for m, n, s in kernelmode.recorded_signatures() if n == 'run_events_nb')))\n")
    proc = _python(_summary_probe(record), _env(tmp_path, SIMLLM_KERNELS="interpreted"))
    summary_line, signatures_line = proc.stdout.strip().splitlines()
    interpreted = json.loads(summary_line)
    compiled = simulate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), workload=Workload(**SMALL)).summary
    walls = {"simulation_wall_s", "compile_wall_s", "simulated_requests_per_s"}
    assert {k: v for k, v in interpreted.items() if k not in walls} == \
        {k: v for k, v in json.loads(json.dumps(compiled)).items() if k not in walls}
    assert not (tmp_path / "cache").exists() or not kernelmode.cache_has_code(tmp_path / "cache")
    # What the interpreted run noted is what this (compiled) process compiled the event loop for.
    noted = eval(signatures_line)  # noqa: S307 - our own repr of a list of strings
    assert noted and set(noted) <= {repr(tuple(s)) for s in simcore.engine.run_events_nb.signatures}


@pytest.mark.skipif(JIT_DISABLED or fcntl is None, reason="compiles into a cache; POSIX lock")
def test_the_warm_up_compiles_what_was_noted(tmp_path):
    folder = tmp_path / "cache"
    sig = (numba.int64, numba.int64)
    assert simcore.layout.ring_nb.py_func.__code__.co_argcount == len(sig)
    env = _env(tmp_path, SIMLLM_WARMUP="1")
    proc = kernelmode.start_warmup([("simcore.layout", "ring_nb", sig)], environ=env, folder=folder)
    while list(folder.glob("warmup-*.pickle")) and proc.poll() is None:  # until it holds the lock and has read
        time.sleep(0.002)
    if proc.poll() is None:  # compiling: the lock is held (a second warm-up would wait for it)
        with open(folder / warmup.LOCK_NAME, "a") as handle, pytest.raises(BlockingIOError):
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert warmup.wait_for_warmups(folder, timeout_s=300)
    assert proc.poll() is not None or proc.wait(timeout=5) == 0
    assert proc.wait(timeout=300) == 0
    assert kernelmode.cache_has_code(folder) and not list(folder.glob("warmup-*.pickle"))
    assert not (folder / "warmup.log").read_text()
    assert kernelmode.start_warmup([], environ=env, folder=folder) is None
    assert kernelmode.start_warmup([("m", "f", sig)], environ=dict(env, SIMLLM_WARMUP="0"), folder=folder) is None


def test_a_warm_up_skips_what_fails_and_logs_it(tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        assert warmup.compile_signatures([("simcore.layout", "no_such_kernel_nb", (numba.int64,))], f) == 0
    assert "no_such_kernel_nb" in log.read_text()


CONSOLE = "import sys; from simllm.cli import main; sys.argv = ['simllm', *sys.argv[1:]]; raise SystemExit(main())"


def _console(args, env, timeout=300):
    return subprocess.run([sys.executable, "-c", CONSOLE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(JIT_DISABLED, reason="compares against the compiled kernels")
def test_a_cold_console_script_runs_interpreted_with_the_same_line(tmp_path):
    argv = ["run", "-q", "--num-prompts", "200", "--request-rate", "20"]
    proc = _console(argv, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not kernelmode.cache_has_code(tmp_path / "cache")  # nothing compiled
    assert proc.stderr == ""
    compiled = subprocess.run([sys.executable, "-m", "simllm", *argv], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, SIMLLM_KERNELS="compiled"), timeout=600)
    assert proc.stdout == compiled.stdout


@pytest.mark.skipif(JIT_DISABLED, reason="needs numba's compile events")
def test_a_cold_variant_in_a_warm_cache_switches_to_interpreted(tmp_path):
    folder = tmp_path / "cache" / "simcore_x"
    folder.mkdir(parents=True)
    (folder / "other.f-1.py311.nbi").write_bytes(b"")  # the cache holds code, not this command's
    proc = _console(["run", "-q", "--num-prompts", "50"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("Llama-3.1-8B on h100-sxm: 50/50 ok") and proc.stderr == ""
    assert [p.name for p in folder.parent.rglob("*.nbi")] == ["other.f-1.py311.nbi"]  # compiled nothing


def test_too_much_interpreted_work_starts_over_compiled(tmp_path):
    """The switch to compiled kernels execs the same command with ``SIMLLM_KERNELS=compiled``;
    here ``os.execve`` prints what it was given instead."""
    probe = ("import json, os, sys\n"
             "os.execve = lambda exe, argv, env: (print(json.dumps([argv[1:], env.get('SIMLLM_KERNELS'), "
             "env.get('SIMLLM_KERNELS_AUTO')])), sys.exit(7))\n"
             + CONSOLE)
    argv = ["run", "--num-prompts", "1000000"]  # 130 million units of work: 100 s at the fastest rate
    proc = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 7, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [["-m", "simllm", *argv], "compiled", None]
    assert proc.stderr.startswith("simllm: about 100 s of simulation interpreted") and "compiling the simulation kernels (first run only)" in proc.stderr


def test_signatures_pickle_for_the_warm_up():
    sig = (numba.typeof(np.zeros((2, 3))), numba.types.Omitted(True), numba.types.none)
    assert pickle.loads(pickle.dumps(sig)) == sig


def test_a_run_past_its_deadline_asks_for_compiled():
    release = threading.Event()
    seen = []
    with pytest.raises(kernelmode.KernelModeSwitch) as switch:
        run_reporting(lambda: release.wait(10), np.zeros(8, dtype=np.int64), 5, None, interval_s=0.01,
                      deadline_s=0.05)
    release.set()
    assert switch.value.mode == "compiled" and "s interpreted" in str(switch.value)
    run_reporting(lambda: None, np.zeros(8, dtype=np.int64), 5, lambda d, t: seen.append((d, t)), deadline_s=5.0)
    assert seen[-1] == (5, 5)
