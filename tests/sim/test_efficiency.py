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


def test_a_memory_bound_quantised_gemm_reads_its_bytes_at_the_bf16_tables_efficiency_at_least():
    """Llama-3.1-8B's FFN up-projection at M = 1 in FP8 on H100 with TensorRT-LLM's tables: the FP8
    table's efficiency there (about 0.5) is below the BF16 table's (about 0.8), so with a share of 1
    (trtllm.yaml's quantized_gemm_bf16_share) the curve holds the bytes over the bandwidth at the
    BF16 efficiency, with a share of 0 at the FP8 table's; at M = 2**14, compute-bound, the FP8
    table's own; the activations' GEMMs (LM head) keep the BF16 table."""
    from simcore import codes
    from simcore.cost import op_cost_nb
    from simllm.config import kernels as kt

    hw = simllm.load_hardware("h100-sxm")
    tables = hw.tables_for("trtllm")
    p = build("llama-3.1-8b", "h100-sxm", dtype="fp8", framework="trtllm")[4]._replace(eff=np.zeros(0))
    eff = build_efficiency_array(tables, p, "fp8", quantised_share=1.0)
    alone = build_efficiency_array(tables, p, "fp8")
    n, k, _ = efficiency._gemm_shapes(p)[codes.OP_FFN_UP]
    curve = eff[codes.EFF_GEMM_S + codes.OP_FFN_UP * codes.EFF_M_POINTS:][:codes.EFF_M_POINTS]
    e8 = float(kt.gemm_efficiency(tables.gemm_table("fp8"), 1.0, n, k))
    e16 = float(kt.gemm_efficiency(tables.gemm_table("bf16"), 1.0, n, k))
    assert e8 < 0.8 * e16  # the rule binds here
    flops, nbytes, _ = op_cost_nb(p, codes.OP_FFN_UP, 1.0, 1.0, 1.0, 1.0)
    assert flops / p.gemm_flops < nbytes / p.mem_bw
    assert curve[0] == nbytes / p.mem_bw / e16
    assert alone[codes.EFF_GEMM_S + codes.OP_FFN_UP * codes.EFF_M_POINTS] == nbytes / p.mem_bw / e8
    m = 2.0**14
    flops, nbytes, _ = op_cost_nb(p, codes.OP_FFN_UP, m, m, m, m)
    assert flops / p.gemm_flops > nbytes / p.mem_bw  # compute-bound: the FP8 table's own efficiency
    e8_big = float(kt.gemm_efficiency(tables.gemm_table("fp8"), m, n, k))
    assert curve[14] == max(curve[13], flops / p.gemm_flops / max(e8_big, codes.EFF_FLOOR))
    bf16 = build_efficiency_array(tables, p, "bf16")
    lm = slice(codes.EFF_GEMM_S + codes.OP_LM_HEAD * codes.EFF_M_POINTS,
               codes.EFF_GEMM_S + (codes.OP_LM_HEAD + 1) * codes.EFF_M_POINTS)
    np.testing.assert_array_equal(eff[lm], bf16[lm])
