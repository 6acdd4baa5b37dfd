"""The efficiency array's memo (``simllm.sim.efficiency.efficiency_array``): the same array as a
fresh build for the same inputs, another for any input that differs, and bounded."""
import numpy as np

import simllm
from helpers import build
from simllm.sim import efficiency
from simllm.sim.efficiency import build_efficiency_array, efficiency_array


def test_the_memo_returns_the_built_array_and_tells_inputs_apart():
    hw = simllm.load_hardware("h100-sxm")
    tables = hw.tables_for("vllm")
    p1 = build("llama-3.1-8b", "h100-sxm")[4]._replace(eff=np.zeros(0))
    p2 = build("llama-3.1-8b", "h100-sxm", tensor_parallel_size=2)[4]._replace(eff=np.zeros(0))
    a = efficiency_array(tables, p1, "bf16")
    assert efficiency_array(tables, p1, "bf16") is a  # a hit: the same read-only array
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, build_efficiency_array(tables, p1, "bf16"))
    b = efficiency_array(tables, p2, "bf16")
    assert b is not a and not np.array_equal(a, b)
    np.testing.assert_array_equal(b, build_efficiency_array(tables, p2, "bf16"))
    c = efficiency_array(tables, p1, "fp8")
    np.testing.assert_array_equal(c, build_efficiency_array(tables, p1, "fp8"))
    for i in range(efficiency._MEMO_SIZE + 5):  # distinct keys: the oldest leave
        efficiency_array(tables, p1._replace(hidden=p1.hidden + i + 1), "bf16")
    assert len(efficiency._memo) == efficiency._MEMO_SIZE
