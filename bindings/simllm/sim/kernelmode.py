"""Compiled or interpreted kernels: what a process runs simcore's functions as, and when the
command line switches.

numba compiles the engine's event loop in about three minutes on a 2-core machine (every variant:
speculative decoding, pipeline stages, lockstep ranks), once per machine and simcore version; its
on-disk cache then loads it in half a second. The same functions run as Python (simcore's
``SIMLLM_KERNELS=interpreted``, :mod:`simcore._jit`) give the same numbers at 700 to 10,000
requests a second: the default run (1,000 requests) simulates in 0.1 s. So the ``simllm``
command, in *auto* mode (``SIMLLM_KERNELS`` unset or ``auto``):

- starts **interpreted** while the kernel cache holds nothing compiled (:func:`cache_has_code`),
  else **compiled**;
- interpreted, when the command's simulations take more than :data:`INTERPRETED_SECONDS_LIMIT`,
  asks to start over compiled: before a simulation whose work (:func:`charge`, at the rate
  measured so far, else the fastest path's) would pass it, or when a running one passes it
  (:func:`deadline_s`). It raises :class:`KernelModeSwitch`, which the command line turns into a
  new process of the same command (nothing was written yet);
- compiled, when numba starts compiling (a kernel or variant the cache lacks) while the command's
  work would take less than that interpreted (:func:`cold_compile_guard`), asks to start over
  interpreted;
- after an interpreted command, compiles what it ran in a background process at low priority
  (:func:`start_warmup`, :mod:`simllm.sim.warmup`), so the next command finds it in the cache.
  ``SIMLLM_WARMUP=0`` turns that off.

``SIMLLM_KERNELS=compiled`` or ``interpreted`` forces one mode and never switches; a program that
imports simllm gets compiled kernels unless it sets the variable before importing simcore.

May import: :mod:`simcore` and the foundation modules.
"""
import contextlib
import math
import os
import pickle
import subprocess
import sys
import tempfile

import numba
from numba.core import event

from simcore.userdirs import kernel_cache_dir
from simllm.errors import ConfigError

#: simcore's variable (:data:`simcore._jit.KERNELS_ENV`): ``compiled``, ``interpreted`` or ``auto``.
KERNELS_ENV = "SIMLLM_KERNELS"
#: Set to ``1`` by the command line in auto mode: this process (and its workers) may switch.
AUTO_ENV = "SIMLLM_KERNELS_AUTO"
#: ``0`` keeps an interpreted command from compiling its kernels in the background afterwards.
WARMUP_ENV = "SIMLLM_WARMUP"
COMPILED, INTERPRETED = "compiled", "interpreted"
MODES = (COMPILED, INTERPRETED, "auto")

#: Seconds of interpreted simulation a command may spend before it switches to compiled kernels:
#: under half of one variant's cold compile (140-185 s on the project's 2-core VM), so that a
#: command switches only where compiling is surely quicker, and loses at most this much when an
#: estimate was wrong. (A sweep of 36 closed-loop runs of 2,000 requests, configs/sweeps/
#: concurrency.yaml, takes 43 s interpreted on one core against 157 s compiling first.)
INTERPRETED_SECONDS_LIMIT = 60.0
#: Work (:func:`work_of`) a simulation must have for its time to set the interpreted rate: a
#: tiny run (a sweep's probe of 4 requests) is mostly fixed costs and would overstate it.
RATE_MIN_WORK = 20_000
#: Seconds per unit of work (:func:`work_of`) of interpreted kernels before a command has measured
#: its own: the fastest path measured, so that only work that is surely too much switches before
#: it starts (what turns out slower switches at the deadline, :func:`deadline_s`). Rates on the
#: project's 2-core VM, 5,000 requests of 1,024 + 128 tokens: 10,000 requests/s (the default, all
#: sent at once: 1.3 million units a second), 6,000 (20 requests/s), 1,250 (speculative), 810
#: (DeepSeek-V3 DP 8 EP 8), 735 (pipeline 2 x TP 2), 690 (no fast-forward: 88,000 units a second).
PRIOR_SECONDS_PER_WORK = 1 / 1_300_000
#: Prompt tokens per unit of work: a prompt costs the engine an iteration per chunk, not per token.
PROMPT_TOKENS_PER_WORK = 512

# This process's simulations: [work charged, work simulated interpreted, seconds that took, and the
# work and seconds of those large enough to set the rate (RATE_MIN_WORK)].
_tally = [0.0, 0.0, 0.0, 0.0, 0.0]


class KernelModeSwitch(Exception):
    """The command should start over with ``mode`` kernels (``compiled`` or ``interpreted``);
    ``reason`` says why in a few words."""

    def __init__(self, mode, reason):
        super().__init__(f"{mode} kernels: {reason}")
        self.mode, self.reason = mode, reason

    def __reduce__(self):  # raised in a worker process, re-raised in the command's
        return type(self), (self.mode, self.reason)


def mode(environ=None):
    """The kernels this process runs: ``interpreted`` when simcore was (or will be) imported
    with ``SIMLLM_KERNELS=interpreted``, else ``compiled``."""
    env = os.environ if environ is None else environ
    return INTERPRETED if env.get(KERNELS_ENV, "").strip().lower() == INTERPRETED else COMPILED


def switching(environ=None):
    """Whether this process was started in auto mode and may ask to switch."""
    env = os.environ if environ is None else environ
    return env.get(AUTO_ENV) == "1"


def cache_dir():
    """The folder numba caches simcore's kernels in (:func:`simcore.userdirs.kernel_cache_dir`;
    :data:`simcore._jit.CACHE_DIR`, which this module cannot import before the mode is settled)."""
    return kernel_cache_dir(numba.__version__)


def cache_has_code(folder=None):
    """Whether numba's cache folder of this simcore holds any compiled function (an index file,
    ``*.nbi``, at any depth: numba nests them under ``NUMBA_CACHE_DIR``)."""
    folder = cache_dir() if folder is None else folder
    for _, _, files in os.walk(folder):
        if any(name.endswith(".nbi") for name in files):
            return True
    return False


def choose(environ=None, folder=None):
    """Settle auto mode in ``environ`` (default ``os.environ``) before simcore is imported:
    ``SIMLLM_KERNELS`` unset or ``auto`` becomes ``compiled`` where the kernel cache holds code,
    else ``interpreted``, with ``SIMLLM_KERNELS_AUTO=1``; a given mode is left as it is, with
    ``SIMLLM_KERNELS_AUTO`` as it is (set only in a command started over interpreted by
    :func:`switched_environ`, which may still go on compiled). Returns
    the mode. A value other than the three is an error (``ConfigError``)."""
    env = os.environ if environ is None else environ
    value = env.get(KERNELS_ENV, "").strip().lower()
    if value not in ("", *MODES):
        raise ConfigError(f"one of {', '.join(MODES)}", source="environment", key=KERNELS_ENV,
                          value=env[KERNELS_ENV])
    if value in (COMPILED, INTERPRETED):  # forced, or a command started over (which keeps AUTO_ENV)
        return value
    chosen = COMPILED if cache_has_code(folder) else INTERPRETED
    env[KERNELS_ENV] = chosen
    env[AUTO_ENV] = "1"
    return chosen


def switched_environ(target, environ=None):
    """The environment of the process that starts the command over with ``target`` kernels:
    compiled is forced (it never switches back); interpreted stays in auto mode, so that work that
    turns out too much still goes on compiled. So a command starts over at most twice."""
    env = dict(os.environ if environ is None else environ)
    env[KERNELS_ENV] = target
    if target == COMPILED:
        env.pop(AUTO_ENV, None)
    return env


def work_of(input_tokens, output_tokens):
    """A simulation's work, the measure of :func:`charge`: its output tokens (one
    iteration each, shared by the batch) plus its prompt tokens over
    :data:`PROMPT_TOKENS_PER_WORK`."""
    return float(output_tokens) + float(input_tokens) / PROMPT_TOKENS_PER_WORK


def spent():
    """The work this process has charged so far (:func:`charge`)."""
    return _tally[0]


def estimate_s(work):
    """Seconds that ``work`` would take interpreted: at the rate this process's interpreted
    simulations of :data:`RATE_MIN_WORK` or more ran (:func:`measured`), else at
    :data:`PRIOR_SECONDS_PER_WORK`."""
    rate_work, rate_s = _tally[3], _tally[4]
    rate = rate_s / rate_work if rate_work > 0 and rate_s > 0 else PRIOR_SECONDS_PER_WORK
    return work * rate


def charge(work):
    """Count ``work`` (:func:`work_of`) about to be simulated in this process. Interpreted and in
    auto mode, raise :class:`KernelModeSwitch` to compiled when the seconds spent interpreted plus
    the estimate (:func:`estimate_s`) of the work charged and not yet run, this one's included,
    pass :data:`INTERPRETED_SECONDS_LIMIT`."""
    work = work if math.isfinite(work) else 1e18
    _tally[0] += work
    if switching() and mode() == INTERPRETED:
        charged, done, seconds = _tally[:3]
        total_s = seconds + estimate_s(charged - done)  # spent, and what is charged but not yet run
        if total_s > INTERPRETED_SECONDS_LIMIT:
            raise KernelModeSwitch(COMPILED, f"about {total_s:,.0f} s of simulation interpreted "
                                             f"(more than {INTERPRETED_SECONDS_LIMIT:.0f} s)")


def deadline_s():
    """Interpreted and in auto mode, the seconds of interpreted simulation this command has left
    (:data:`INTERPRETED_SECONDS_LIMIT` less what it spent): a simulation still running then asks
    to start over compiled (:func:`out_of_time`). None elsewhere: no deadline."""
    if not switching() or mode() != INTERPRETED:
        return None
    return max(INTERPRETED_SECONDS_LIMIT - _tally[2], 0.0)


def out_of_time():
    """The :class:`KernelModeSwitch` of a simulation that ran past :func:`deadline_s`."""
    return KernelModeSwitch(COMPILED, f"the simulation took more than {INTERPRETED_SECONDS_LIMIT:.0f} s interpreted")


def measured(work, seconds):
    """Count a simulation of ``work`` that took ``seconds``: interpreted ones count toward the
    limit, and those of :data:`RATE_MIN_WORK` or more set the rate."""
    if mode() == INTERPRETED:
        _tally[1] += work
        _tally[2] += seconds
        if work >= RATE_MIN_WORK:
            _tally[3] += work
            _tally[4] += seconds


class _ColdCompile(event.Listener):
    """numba's compile-event listener of :func:`cold_compile_guard`."""

    def on_start(self, ev):
        if spent() * PRIOR_SECONDS_PER_WORK <= INTERPRETED_SECONDS_LIMIT:
            raise KernelModeSwitch(INTERPRETED, "the kernel cache lacks what this command runs")

    def on_end(self, ev):
        pass


def cold_compile_guard():
    """A context manager: compiled and in auto mode, numba starting to compile inside it while
    this process's work so far would take at most :data:`INTERPRETED_SECONDS_LIMIT` interpreted
    (at :data:`PRIOR_SECONDS_PER_WORK`) raises :class:`KernelModeSwitch` to interpreted (a cache
    load compiles nothing). Elsewhere it does nothing."""
    if not switching() or mode() != COMPILED:
        return contextlib.nullcontext()
    return event.install_listener("numba:compile", _ColdCompile())


def recorded_signatures():
    """``[(module, name, signature)]``: the argument types simcore's functions were called with
    from outside its kernels in this process (interpreted mode; empty when compiled)."""
    out = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "simcore" or module_name.startswith("simcore.")):
            continue
        for name, value in list(vars(module).items()):
            sigs = getattr(value, "signatures", None)
            if (isinstance(sigs, set) and getattr(value, "__module__", None) == module_name
                    and callable(value) and hasattr(value, "py_func")):
                out.extend((module_name, name, sig) for sig in sigs)
    return sorted(out, key=repr)


def start_warmup(signatures=None, environ=None, folder=None):
    """Compile ``signatures`` (default :func:`recorded_signatures`) into the kernel cache in a
    background process at low priority (:mod:`simllm.sim.warmup`) that outlives this one. Returns
    the process, or None when there is nothing to compile or ``SIMLLM_WARMUP=0``."""
    env = dict(os.environ if environ is None else environ)
    signatures = recorded_signatures() if signatures is None else signatures
    if not signatures or env.get(WARMUP_ENV, "1") == "0":
        return None
    folder = cache_dir() if folder is None else folder
    os.makedirs(folder, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="warmup-", suffix=".pickle", dir=folder)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(signatures, f)
    env[KERNELS_ENV] = COMPILED
    env.pop(AUTO_ENV, None)
    options = {}
    if os.name == "posix":
        options["start_new_session"] = True
    else:  # pragma: no cover - Windows
        options["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
    return subprocess.Popen([sys.executable, "-m", "simllm.sim.warmup", path], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, **options)
