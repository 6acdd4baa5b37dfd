"""What several test modules share: paths, the shared measured data, building packed kernel
inputs, and the lines shown at the end of a run (conftest.py keeps only pytest's hooks)."""
import os
from pathlib import Path

import simllm
from simllm.config import serving as serving_mod
from simllm.sim.pack import pack_cost_params

#: The repository's root, tests' own data, and the recorded golden outputs.
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden"
#: Measured serving data kept beside the checkout (tests that need it skip when it is absent).
SHARED_DATA = ROOT.parent / "shared" / "data"
JIT_DISABLED = os.environ.get("NUMBA_DISABLE_JIT") == "1"
#: Lines tests want shown at the end of the run whatever the capture mode (accuracy figures).
REPORT = []


def build(model, hardware, **serving_kwargs):
    """Validated configs and packed params: (model, hardware, serving, resolved, params)."""
    m = simllm.load_model(model) if isinstance(model, (str, Path)) else model
    h = simllm.load_hardware(hardware) if isinstance(hardware, (str, Path)) else hardware
    s = simllm.ServingConfig(**serving_kwargs)
    r = serving_mod.resolve(m, h, s)
    return m, h, s, r, pack_cost_params(m, h, s, r)
