"""The kernel variants of the heavy tier (``python -m pytest -m heavy``), compiled ahead of its
tests by the xdist controller (tests/conftest.py), two processes at a time.

Each variant of the event loop (speculation, pipeline stages, lockstep ranks, the disaggregated
loop with and without speculation) is a whole compile of its own, two to five minutes on the
project's 2-core VM. Left to the tests, the two workers each compiled the disaggregated loop at the
same time (two tests of it landed on both), and one worker compiled three variants while the other
ran quick tests. Here each variant is compiled once into numba's cache, the longest first on
whichever process is free, and the workers then load them. Each is reached by a tiny run that takes
the same argument types as the tests' runs (a run that differs only recompiles that variant).

As a script, run from the repository's root (from tests/ the tests' own ``tests/simcore`` folder
would shadow the package)::

    python -c "import runpy; runpy.run_path('tests/variants.py', run_name='__main__')" --all

compiles them all, two processes at a time (:func:`compile_all`: what the controller runs, and
what CI runs in the background, at low priority, while its earlier steps leave a core idle);
names instead of ``--all`` compile those in this process."""
import os
import subprocess
import sys
import tempfile
import time

import simllm
from simllm.config.disagg import DisaggConfig
from simllm.config.workload import Workload, fixed

EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "synthetic_acceptance_rates": [0.73, 0.521, 0.355]}


def _small():
    return Workload(num_prompts=8, max_concurrency=4, input_len=fixed(64), output_len=fixed(8))


def _llama():
    return simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")


def disagg_speculative():
    simllm.simulate_disagg(*_llama(), simllm.ServingConfig(speculative_config=EAGLE3), _small(), DisaggConfig(),
                           keep_requests=False)


def disagg():
    simllm.simulate_disagg(*_llama(), simllm.ServingConfig(), _small(), DisaggConfig(), keep_requests=False)


def pipeline():
    simllm.simulate(*_llama(), simllm.ServingConfig(pipeline_parallel_size=2), _small(), keep_requests=False)


def lockstep():
    simllm.simulate(simllm.load_model("mixtral-8x7b"), simllm.load_hardware("h100-sxm"),
                    simllm.ServingConfig(data_parallel_size=2, expert_parallel_size=2), _small(), keep_requests=False)


def pipeline_and_lockstep():
    """Pipeline stages and lockstep ranks share one variant (simcore.engine.lockstep_plan): one
    process compiles it, the second run finds it compiled."""
    pipeline()
    lockstep()


def speculative():
    simllm.simulate(*_llama(), simllm.ServingConfig(speculative_config=EAGLE3), _small(), keep_requests=False)


#: The variants, longest compile first (one process after another on the 2-core VM, 2026-12-07:
#: 3.0, 3.5 with the cost kernels the default also compiles, 2.6, 1.7 minutes; all four on two
#: processes 5.5 minutes, 11 CPU-minutes. Before the disaggregated loop stopped handing numba literal
#: arguments, which compiled its pool step twice, the first two took 4.7 and 3.7 minutes).
VARIANTS = {f.__name__: f for f in (disagg_speculative, disagg, pipeline_and_lockstep, speculative)}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_all(names=None, processes=2):
    """Compile ``names`` (default all, longest first) into numba's cache, each in a process of its
    own, ``processes`` at a time, the next on whichever is free. Returns one line per variant that
    failed (its name and its last line of stderr); killed when interrupted."""
    script = os.path.join(ROOT, "tests", "variants.py")
    code = f"import runpy, sys; sys.argv[0] = {script!r}; runpy.run_path({script!r}, run_name='__main__')"
    names = list(VARIANTS if names is None else names)
    running, failed = {}, []
    try:
        while names or running:
            while names and len(running) < processes:
                name = names.pop(0)
                err = tempfile.TemporaryFile("w+")  # not a pipe: nothing blocks on a full one
                running[name] = (subprocess.Popen([sys.executable, "-c", code, name], cwd=ROOT,
                                                  stdout=subprocess.DEVNULL, stderr=err), err)
            time.sleep(0.5)
            for name, (proc, err) in list(running.items()):
                if proc.poll() is not None:
                    if proc.returncode:
                        err.seek(0)
                        last = (err.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
                        failed.append(f"{name}: {last[:200]}")
                    err.close()
                    del running[name]
    finally:  # interrupted: no compile left behind
        for proc, err in running.values():
            proc.kill()
            err.close()
    return failed


if __name__ == "__main__":
    if sys.argv[1:] == ["--all"]:
        lines = compile_all()
        for line in lines:
            print(f"tests/variants.py could not compile {line}", file=sys.stderr)
        sys.exit(1 if lines else 0)
    for name in sys.argv[1:]:
        VARIANTS[name]()
