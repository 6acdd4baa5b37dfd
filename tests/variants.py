"""The kernel variants of the heavy tier (``python -m pytest -m heavy``), compiled ahead of its
tests by the xdist controller (tests/conftest.py), two processes at a time.

Each variant of the event loop (speculation, pipeline stages, lockstep ranks, the disaggregated
loop with and without speculation) is a whole compile of its own, two to five minutes on the
project's 2-core VM. Left to the tests, the two workers each compiled the disaggregated loop at the
same time (two tests of it landed on both), and one worker compiled three variants while the other
ran quick tests. Here each variant is compiled once into numba's cache, the longest first on
whichever process is free, and the workers then load them. Each is reached by a tiny run that takes
the same argument types as the tests' runs (a run that differs only recompiles that variant).

As a script (run from the repository's root with ``runpy``, as the controller does: from tests/ the
tests' own ``tests/simcore`` folder would shadow the package), it compiles the variants named on
its command line in one process."""
import sys

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


def speculative():
    simllm.simulate(*_llama(), simllm.ServingConfig(speculative_config=EAGLE3), _small(), keep_requests=False)


#: The variants, longest compile first (minutes on the 2-core VM, 2026-12-07: 4.7, 3.7, 3.1, 2.0, 1.8).
VARIANTS = {f.__name__: f for f in (disagg_speculative, disagg, pipeline, lockstep, speculative)}


if __name__ == "__main__":
    for name in sys.argv[1:]:
        VARIANTS[name]()
