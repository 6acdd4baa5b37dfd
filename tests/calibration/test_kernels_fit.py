"""Held-out accuracy of the shipped kernel tables (the fit errors their provenance records), the
packing reproducing the tables at their grid points, and the importer's fits on synthetic
latencies (numpy only); reading aiconfigurator-core's Parquet needs pyarrow and is skipped
without it."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

import simllm
from helpers import ROOT, build
from simcore import codes, iteration_costs_nb, new_cost_arrays, op_cost_nb, op_seconds_nb
from simllm.calibration import kernels as ck
from simllm.config import kernels as kt
from simllm.sim.efficiency import efficiency_array

KERNELS = ROOT / "configs" / "kernels"
SYSTEMS = sorted(p.name for p in KERNELS.iterdir() if p.is_dir())
LIMIT = 0.10  # median |predicted / measured - 1| of the held-out kernel latencies
# The one documented exception (docs/guide/kernel-tables.md): L40S decode attention misses by 11.6%.
# Its many small decode shapes run faster than the GDDR6 roofline because the 96 MB L2 holds their
# KV cache; those rows are clipped at efficiency 1, which is what the memory-side table then misses.
EXCEPTIONS = {("l40s", "attention_decode"): 0.12}
# Grouped-MoE tables: the 15% target of the MoE issue (their grid has no axis for the expert's own
# GEMM shape); H200 FP8 misses it by 0.2 points (docs/guide/kernel-tables.md).
MOE_LIMIT = 0.15
EXCEPTIONS[("h200-sxm", "moe_fp8")] = 0.16


def fit(system, framework="vllm"):
    return json.loads((KERNELS / system / f"{framework}.json").read_text(encoding="utf-8"))["provenance"]["fit"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_shipped_vllm_tables_predict_held_out_latencies_within_10_percent(system):
    errors = {table: rep["held_out_median_abs_error"] for table, rep in fit(system).items()}
    assert {"gemm_bf16", "attention_prefill", "attention_decode", "allreduce"} <= set(errors)
    for table, err in errors.items():
        limit = EXCEPTIONS.get((system, table), MOE_LIMIT if table.startswith(("moe_", "alltoall")) else LIMIT)
        if table == "alltoall":
            limit = A2A_EXCEPTIONS.get(f"{system}/vllm", MOE_LIMIT)
        assert err <= limit, (system, table, err)
        assert fit(system)[table]["held_out_rows"] >= 20, (system, table)


def test_the_documented_exception_is_still_needed():
    """If L40S decode attention ever fits within 10%, the exception above should go."""
    assert fit("l40s")["attention_decode"]["held_out_median_abs_error"] > LIMIT


def test_docs_table_quotes_the_provenance():
    text = (ROOT / "docs" / "guide" / "kernel-tables.md").read_text(encoding="utf-8")
    columns = ("gemm_bf16", "gemm_fp8", "gemm_fp4", "attention_prefill", "attention_decode", "allreduce", "moe_bf16",
               "moe_fp8")
    for system in SYSTEMS:
        row = re.search(rf"^\| {re.escape(system)} \|(.*)\|$", text, re.M)
        assert row, system
        cells = [c.strip() for c in row.group(1).split("|")]
        errors = fit(system)
        for cell, table in zip(cells, columns):
            if cell == "-":
                assert table not in errors, (system, table)
            else:
                assert float(cell.rstrip("%")) == pytest.approx(100 * errors[table]["held_out_median_abs_error"], abs=0.051)


# --------------------------------------------------------------------------- packing
@pytest.mark.parametrize("system, framework, dtype", [("h100-sxm", "vllm", "auto"), ("h200-sxm", "sglang", "fp8"),
                                                      ("l40s", "trtllm", "auto"), ("a100-sxm-80gb", "vllm", "fp8")])
def test_packed_gemm_seconds_are_the_tables_at_their_grid_points(system, framework, dtype):
    """llama-3.1-8b's O projection is a 4096 x 4096 GEMM, on the grid in N and K: efficiency.py's
    seconds at M = 2**i are the importer's roofline over the table's value there (made
    non-decreasing), for every M the table measures; an FP8 GEMM where it is memory-bound at no
    less than the framework's share of the BF16 table's value (quantized_gemm_bf16_share)."""
    model, hw, s, r, p = build("llama-3.1-8b", system, framework=framework, dtype=dtype)
    tables = hw.tables_for(framework)
    fp8 = r.weight_dtype == "fp8" and hw.fp8_tflops > 0
    table = tables.gemm_table("fp8" if fp8 else "bf16")
    n = k = 4096
    j = l = 12 - kt.GEMM_LOG2_NK[0]
    m = 2.0 ** np.arange(len(kt.GEMM_LOG2_M))
    eff = table[:, j, l]
    if fp8:
        share = simllm.load_framework(framework).quantized_gemm_bf16_share
        costs = [op_cost_nb(p, codes.OP_O_PROJ, t, t, t, t) for t in m]  # as the kernels count them
        memory_bound = np.array([f / p.proj_flops < b / p.mem_bw for f, b, _ in costs])
        eff = np.where(memory_bound, np.maximum(eff, share * tables.gemm_table("bf16")[:, j, l]), eff)
        assert share > 0 and memory_bound[0] and (eff[:1] > table[:1, j, l]).all()  # the rule binds at M = 1
    expected = np.maximum.accumulate(ck.gemm_roofline_s(m, n, k, p.gemm_flops, p.mem_bw, p.w_bytes) / eff)
    start = codes.EFF_GEMM_S + codes.OP_O_PROJ * codes.EFF_M_POINTS
    got = p.eff[start:start + len(m)]
    np.testing.assert_allclose(got, expected, rtol=1e-9)


@pytest.mark.parametrize("system", ["h100-sxm", "gb200", "l40s"])
def test_packed_all_reduce_is_the_measured_curve_at_its_grid_points(system):
    """TP 2 all-reduce of 2**i tokens of llama-3.1-8b (8 KiB each in BF16): its bus bytes sit on the
    grid, and its time is bus bytes / link bandwidth / the table's efficiency there, the latency the
    importer turned into that efficiency (or a smaller message's, where that measured slower)."""
    model, hw, s, r, p = build("llama-3.1-8b", system, tensor_parallel_size=2)
    curve = hw.tables_for("vllm").allreduce_curve(2)
    for i in range(0, 15):
        tokens = 2.0**i
        bus = kt.bus_bytes(tokens * 4096 * 2, 2)
        x = np.log2(bus) - codes.EFF_LINK_LOG2_MIN
        assert x == int(x)
        flops, nbytes, seconds, bound = new_cost_arrays()
        iteration_costs_nb(p, tokens, tokens, tokens, 0.0, flops, nbytes, seconds, bound)
        one = seconds[codes.OP_ALLREDUCE_ATTN] / model.layers
        # The measured point, unless a smaller message measured slower (the curve is made
        # non-decreasing): then that smaller message's time.
        measured = bus / p.link_bw / curve[int(x)]
        assert one == pytest.approx(kt.link_seconds_curve(curve, p.link_bw)[int(x)], rel=1e-9), i
        assert one >= measured * (1 - 1e-12)


# --------------------------------------------------------------------------- the importer's fits
def test_fit_gemm_recovers_a_known_efficiency_and_holds_out_odd_shapes():
    peak, bw = 1e15, 3e12
    grid_m = 2.0 ** np.arange(16)
    eff_of_m = np.clip(0.01 * np.sqrt(grid_m), 1e-3, 0.9)  # the same for every N and K
    rows = []
    for n in (128, 1024, 4096, 3000):  # 3000: not a power of two, held out
        for k in (256, 8192, 5000):
            for mi, e in zip(grid_m, eff_of_m):
                rows.append((mi, n, k, ck.gemm_roofline_s(mi, n, k, peak, bw, 2.0) / e))
    m, n, k, lat = (np.array(c, dtype=np.float64) for c in zip(*rows))
    table, rep = ck.fit_gemm(m, n, k, lat, peak, bw, 2.0)
    assert table.shape == kt.GEMM_SHAPE
    assert rep["rows"] == 3 * 2 * 16 and rep["held_out_rows"] == (4 * 3 - 3 * 2) * 16
    assert rep["held_out_median_abs_error"] < 1e-9 and rep["clipped_above_roofline"] == 0
    for j in range(kt.GEMM_SHAPE[1]):  # unmeasured N, K take the nearest measured pair's curve
        for l in range(kt.GEMM_SHAPE[2]):
            np.testing.assert_allclose(table[:, j, l], eff_of_m, rtol=1e-9)
    lat[0] = ck.gemm_roofline_s(1, 128, 256, peak, bw, 2.0) / 2.0  # twice the roofline's speed: clipped, counted
    assert ck.fit_gemm(m, n, k, lat, peak, bw, 2.0)[1]["clipped_above_roofline"] == 1


def test_fit_allreduce_recovers_the_curve_and_holds_out_odd_sizes():
    link = 450e9
    sizes = 2.0 ** np.arange(6, 28)  # BF16 elements
    counts = np.repeat([2, 4], len(sizes))
    elems = np.tile(sizes, 2)
    bus = kt.bus_bytes(elems * 2.0, counts.astype(np.float64))
    latency = 8e-6 + bus / link  # a fixed latency plus the bandwidth term
    curves, rep = ck.fit_allreduce(counts, elems, latency, link)
    assert sorted(curves) == [2, 4] and all(c.shape == kt.LINK_SHAPE for c in curves.values())
    assert rep["held_out_rows"] == len(sizes) and rep["held_out_median_abs_error"] < 0.05
    t = kt.tables_from_dict({**json.loads((KERNELS / "h100-sxm" / "vllm.json").read_text(encoding="utf-8")),
                             "allreduce": {str(n): c.tolist() for n, c in curves.items()}})
    x = 2.0**20
    assert kt.link_seconds(t.allreduce_curve(2), x, link) == pytest.approx(8e-6 + x / link, rel=0.05)


def _synthetic_moe(efficiency):
    """Two expert shapes measured at token counts 1 .. 4096 (powers of two and between), latency =
    the roofline / ``efficiency(tokens)``."""
    rows = []
    for hidden, inter, experts, topk in ((4096, 1536, 128, 8), (2048, 768, 64, 4)):
        for t in (1, 2, 3, 4, 8, 12, 16, 32, 48, 64, 128, 192, 256, 512, 768, 1024, 2048, 3072, 4096):
            rows.append((t, hidden, inter, topk, experts))
    t, h, i, k, e = (np.array(c, dtype=np.float64) for c in zip(*rows))
    lat = ck.moe_roofline_s(t, h, i, k, e, 989.4e12, 3350e9, 2.0) / efficiency(t)
    return t, h, i, k, e, lat


def test_fit_moe_shapes_recovers_each_shapes_curve_and_the_grid_its_cells():
    """Latencies at an efficiency smooth in log2 tokens come back from the per-shape curves at the
    held-out token counts (between the powers of two), and from the shape-blind grid within its
    cell resolution."""
    def eff(t):
        return 0.2 + 0.6 * np.log2(t) / 12.0
    t, h, i, k, e, lat = _synthetic_moe(eff)
    shapes, report = ck.fit_moe_shapes(t, h, i, k, e, lat, 989.4e12, 3350e9, 2.0)
    assert len(shapes) == 2 and report["held_out_rows"] == 2 * 6  # 3, 12, 48, 192, 768, 3072 tokens
    assert report["held_out_median_abs_error"] < 0.01
    curve = np.array(shapes[0]["eff"])
    assert curve == pytest.approx(eff(2.0 ** np.arange(15.0)).clip(max=eff(4096.0)), rel=1e-3)  # clamped past 4096
    table, report = ck.fit_moe(t, h, i, k, e, lat, 989.4e12, 3350e9, 2.0)
    assert table.shape == kt.MOE_SHAPE and report["held_out_median_abs_error"] < 0.1


def test_fit_rejects_a_non_positive_latency():
    m = n = k = np.array([1.0, 2.0, 4.0]) * 128
    with pytest.raises(simllm.ConfigError, match="latency"):
        ck.fit_gemm(m, n, k, np.array([1e-5, -1e-5, 1e-5]), 1e15, 1e12, 2.0)


# --------------------------------------------------------------------------- the optional dependency
def test_package_root_without_aiconfigurator_core_is_a_one_line_error_with_the_install():
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        with pytest.raises(simllm.ConfigError, match=r'not installed: pip install "simllm\[kernels\]"') as err:
            ck.package_root()
        assert "\n" not in str(err.value)
    else:
        pytest.skip("aiconfigurator-core is installed")


def test_import_from_a_parquet_tree_writes_tables_that_load(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    hw = simllm.load_hardware("h100-sxm", with_tables=False)
    data = tmp_path / "systems" / "data" / "h100_sxm"

    def write(op, name, columns, version="0.1.0"):
        folder = data / op / "vllm" / version
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), folder / name)

    gm, gn, gk, glat = [], [], [], []
    for m in (1, 16, 256, 4096):
        for nk in (1024, 4096, 3000):
            gm.append(m), gn.append(nk), gk.append(nk)
            glat.append(float(ck.gemm_roofline_s(m, nk, nk, 989.4e12, 3350e9, 2.0)) / 0.5 * 1e3)  # ms at 50%
    write("gemm", "gemm_perf.parquet", {"gemm_dtype": ["bfloat16"] * len(gm), "m": gm, "n": gn, "k": gk,
                                        "latency": glat})
    att = {"batch_size": [1, 8, 4, 2], "isl": [512, 1024, 256, 2048], "num_heads": [32, 32, 24, 32],
           "num_key_value_heads": [8, 8, 8, 8], "head_dim": [128] * 4, "kv_cache_dtype": ["bfloat16"] * 4,
           "window_size": [0] * 4, "latency": [0.05, 0.4, 0.03, 0.3]}
    write("attention", "context_attention_perf.parquet", att)
    write("attention", "generation_attention_perf.parquet", {**att, "step": [1, 1, 1, 1],
                                                             "latency": [0.01, 0.02, 0.015, 0.03]})
    write("comm", "custom_allreduce_perf.parquet", {"num_gpus": [2] * 6, "message_size": [2**i for i in range(10, 22, 2)],
                                                    "latency": [0.008, 0.009, 0.012, 0.03, 0.1, 0.35]})
    out = ck.import_tables("h100_sxm", "vllm", hw, root=tmp_path, package_version="0.0-test")
    assert out["framework_version"] == "0.1.0" and "0.0-test" in out["provenance"]["source"]
    path = ck.write_tables(out, tmp_path / "out")
    t = kt.load_tables(path)
    assert t.gpu == "h100-sxm" and t.framework == "vllm"
    assert dict(t.gemm)["bf16"][4, 3, 3] == pytest.approx(0.5, rel=1e-3)  # M = 16, N = K = 1024
    assert out["provenance"]["fit"]["gemm_bf16"]["held_out_rows"] == 4


def test_reimporting_the_installed_package_reproduces_the_shipped_tables():
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    hw = simllm.load_hardware("h100-sxm", with_tables=False)
    version = json.loads((KERNELS / "h100-sxm" / "vllm.json").read_text(encoding="utf-8"))["provenance"]["source"]
    out = ck.import_tables("h100_sxm", "vllm", hw)
    if out["provenance"]["source"] != version:
        pytest.skip(f"installed {out['provenance']['source']}, shipped from {version}")
    shipped = kt.load_tables(KERNELS / "h100-sxm" / "vllm.json")
    fresh = kt.tables_from_dict(out)
    np.testing.assert_allclose(dict(fresh.gemm)["bf16"], dict(shipped.gemm)["bf16"], rtol=1e-3)
    np.testing.assert_allclose(fresh.attention_decode, shipped.attention_decode, rtol=1e-3)
    assert json.loads(fresh.provenance)["fit"] == json.loads(shipped.provenance)["fit"]


@pytest.mark.parametrize("framework", ["vllm", "sglang", "trtllm"])
def test_packed_moe_layer_matches_measured_deepseek_layers(framework):
    """DeepSeek-V3's routed experts (256 of width 2048, top 8, FP8 block-scaled) on H200 at TP 1-8,
    as the cost kernel prices them (gate/up + activation + down, the shared expert left out as the
    measured kernel has none), against aiconfigurator-core's measured moe_perf latencies at the
    token counts the table was not built from: a median within 15%."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    root, _ = ck.package_root()
    shipped = json.loads((KERNELS / "h200-sxm" / f"{framework}.json").read_text(encoding="utf-8"))
    paths = [Path(root) / p for p in shipped["provenance"]["files"]["moe_perf.parquet"]]
    cols = ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size", "distribution", "latency")
    parts = [ck.read_columns(p, cols) for p in paths]
    r = {c: np.concatenate([part[c] for part in parts]) for c in cols}
    model = simllm.load_model("deepseek-v3").with_overrides(num_shared_experts=0, shared_expert_intermediate_size=0)
    errors = []
    for tp in (1, 2, 4, 8):
        p = build(model, "h200-sxm", framework=framework, tensor_parallel_size=tp, dtype="fp8")[4]
        sel = ((r["num_experts"] == 256) & (r["hidden_size"] == 7168) & (r["inter_size"] == 2048) & (r["topk"] == 8)
               & (r["moe_tp_size"] == tp) & (r["moe_ep_size"] == 1) & (r["distribution"].astype(str) == "balanced")
               & np.isin(r["moe_dtype"].astype(str), ("fp8", "fp8_block")) & ~ck._is_pow2(r["num_tokens"]))
        measured = {}
        for t, lat in zip(r["num_tokens"][sel], r["latency"][sel]):
            measured[int(t)] = min(measured.get(int(t), np.inf), float(lat) * 1e-3)  # the faster FP8 kernel
        assert measured, tp
        for t, lat in measured.items():
            flops, nbytes, seconds, bound = new_cost_arrays()
            iteration_costs_nb(p, float(t), float(t), float(t), 0.0, flops, nbytes, seconds, bound)
            layer = sum(seconds[op] for op in (codes.OP_MOE_UP, codes.OP_MOE_ACT, codes.OP_MOE_DOWN)) / p.n_moe_layers
            errors.append(layer / lat - 1.0)
    assert np.median(np.abs(errors)) <= 0.15, np.median(np.abs(errors))


# MLA decode tables: the new sets measured contexts at powers of two only, so the held-out points
# (odd log2) lie two octaves from the fitted ones, where a launch-bound kernel's efficiency
# quadruples (docs/guide/kernel-tables.md); the older A100/L40S/RTX TensorRT-LLM sets measured contexts
# in between and meet the 15% target.
MLA_DECODE_TWO_OCTAVES = 0.40


@pytest.mark.parametrize("name", [f"{g}/{f}" for g in SYSTEMS for f in ("vllm", "sglang", "trtllm")])
def test_mla_tables_predict_held_out_latencies(name):
    """Prefill (prompts not a power of two) within the 15% target everywhere; decode within it
    where the set measured contexts between the powers of two, within the bound above elsewhere."""
    prov = json.loads((KERNELS / f"{name}.json").read_text(encoding="utf-8"))["provenance"]
    mla = {k: v for k, v in prov["fit"].items() if k.startswith("mla_")}
    if name.endswith("vllm") or "mla" in prov.get("omitted", {}):
        # vLLM's MLA rows time the whole module (projections included), not the attention alone
        assert not mla and "mla" in prov["omitted"]
        return
    assert mla, name
    for table, fit in mla.items():
        limit = MOE_LIMIT if "prefill" in table or fit["held_out_rows"] < fit["rows"] else MLA_DECODE_TWO_OCTAVES
        assert fit["held_out_median_abs_error"] <= limit, (table, fit)


@pytest.mark.parametrize("framework", ["sglang", "trtllm"])
@pytest.mark.parametrize("tp", [1, 8])
def test_packed_mla_attention_matches_measured_deepseek_layers(framework, tp):
    """DeepSeek-V3's attention on H200 (128 / 8 = 16 heads per GPU, BF16 KV), as the cost kernel
    prices an MLA layer with the shipped tables, against aiconfigurator-core's measured MLA kernels:
    decode at every measured batch and context (the grid's own points) within 5% (median), prefill
    at the prompts the tables were not built from within 15%. The GQA tables it used before miss
    128 heads' decode by a median of 40% and more (up to 8x at small batches)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    root, _ = ck.package_root()
    files = json.loads((KERNELS / "h200-sxm" / f"{framework}.json").read_text(encoding="utf-8"))["provenance"]["files"]
    gkv, gheads, gb, gc, glat = ck._mla_rows(Path(root) / files["generation_mla_perf.parquet"], True)
    ckv, cheads, cb, cs, clat = ck._mla_rows(Path(root) / files["context_mla_perf.parquet"], False)
    heads = 128 // tp
    errors = {"decode": [], "prefill": [], "gqa": []}
    for tables in ("mla", "gqa"):
        p = build("deepseek-v3", "h200-sxm", framework=framework, tensor_parallel_size=tp)[4]
        if tables == "gqa":
            hw = simllm.load_hardware("h200-sxm")
            p = p._replace(eff=efficiency_array(hw.tables_for(framework), p._replace(eff=np.zeros(0)), "bf16"))
        sel = (gkv == "bf16") & (gheads == heads)
        for b, c, lat in zip(gb[sel], gc[sel], glat[sel]):
            flops, nbytes, seconds, bound = new_cost_arrays()
            iteration_costs_nb(p, b, b * c, b * c, b, flops, nbytes, seconds, bound)
            errors["decode" if tables == "mla" else "gqa"].append(seconds[codes.OP_ATTENTION] / p.n_layers / lat - 1.0)
        if tables == "mla":
            sel = (ckv == "bf16") & (cheads == heads) & ~ck._is_pow2(cs)
            for b, s, lat in zip(cb[sel], cs[sel], clat[sel]):
                flops, nbytes, seconds, bound = new_cost_arrays()
                iteration_costs_nb(p, b * s, b * s * (s + 1) / 2, b * s, b, flops, nbytes, seconds, bound)
                errors["prefill"].append(seconds[codes.OP_ATTENTION] / p.n_layers / lat - 1.0)
    assert np.median(np.abs(errors["decode"])) <= 0.05, np.median(np.abs(errors["decode"]))
    assert np.median(np.abs(errors["prefill"])) <= 0.15, np.median(np.abs(errors["prefill"]))
    if tp == 1:
        assert np.median(np.abs(errors["gqa"])) > 0.4, np.median(np.abs(errors["gqa"]))


@pytest.mark.parametrize("model, tp, kv, heads", [("deepseek-v3", 1, "auto", 128), ("deepseek-v3", 8, "fp8", 16),
                                                   ("kimi-k2", 4, "auto", 16), ("qwen3-30b-a3b", 1, "auto", 0)])
def test_an_mla_model_reads_the_mla_tables_of_its_heads_per_gpu(model, tp, kv, heads):
    """Packing puts the MLA tables of the model's query heads per GPU and KV dtype where the cost
    kernel reads attention's efficiency; a GQA model keeps the GQA tables."""
    hw = simllm.load_hardware("h200-sxm")
    tables = hw.tables_for("sglang")
    p = build(model, "h200-sxm", framework="sglang", tensor_parallel_size=tp, kv_cache_dtype=kv)[4]
    prefill = p.eff[codes.EFF_PREFILL:codes.EFF_DECODE].reshape(kt.PREFILL_SHAPE)
    decode = p.eff[codes.EFF_DECODE:codes.EFF_GEMM_SUM].reshape(kt.DECODE_SHAPE)
    if heads:
        want = {(d, n): (pre, dec) for d, n, pre, dec in tables.mla}[("fp8" if kv == "fp8" else "bf16", heads)]
    else:
        want = (tables.attention_prefill, tables.attention_decode)
    np.testing.assert_array_equal(prefill, want[0])
    np.testing.assert_array_equal(decode, want[1])


# The expert all-to-all: each DeepEP kernel family a line (latency + bytes / bandwidth). H100's vLLM
# set measured four families (low-latency, high-throughput and their v2 variants) whose lines
# scatter more.
A2A_EXCEPTIONS = {"h100-sxm/vllm": 0.17}


@pytest.mark.parametrize("name", [f"{g}/{f}" for g in SYSTEMS for f in ("vllm", "sglang", "trtllm")])
def test_alltoall_lines_predict_held_out_latencies(name):
    """Every shipped all-to-all table predicts its rows at token counts that are not powers of two
    within 15% (median), each against its own kernel family's line."""
    prov = json.loads((KERNELS / f"{name}.json").read_text(encoding="utf-8"))["provenance"]
    if "alltoall" in prov.get("omitted", {}):
        assert "alltoall" not in prov["fit"]
        return
    fit = prov["fit"]["alltoall"]
    assert fit["held_out_rows"] >= 20
    assert fit["held_out_median_abs_error"] <= A2A_EXCEPTIONS.get(name, MOE_LIMIT), fit


def test_alltoall_of_attention_dp_ranks_reads_the_measured_lines():
    """DeepSeek-V3 with attention DP 8 and EP 8 on H200 (TensorRT-LLM's set): one MoE layer's
    all-to-all takes the faster kernel family's ``latency + bytes / bandwidth`` (the affine lines
    the curve holds, to its 4 significant digits); with EP inside one TP group (no attention DP)
    it stays on the collectives' curve, as before."""
    lines = json.loads((KERNELS / "h200-sxm" / "trtllm.json").read_text(encoding="utf-8"))["provenance"]["alltoall_lines"]
    p = build("deepseek-v3", "h200-sxm", framework="trtllm", data_parallel_size=8, expert_parallel_size=8)[4]
    q = build("deepseek-v3", "h200-sxm", framework="trtllm", tensor_parallel_size=8, expert_parallel_size=8)[4]
    for t in (1.0, 64.0, 3000.0):
        f, nbytes, unit = op_cost_nb(p, codes.OP_MOE_ALLTOALL, t, t, t, t)
        assert nbytes == pytest.approx(2 * t * 8 * 7168 * 2 * 7 / 8)
        want = min(v["latency_us"] * 1e-6 + nbytes / (v["bandwidth_gbps"] * 1e9) for v in lines.values())
        got = op_seconds_nb(p, codes.OP_MOE_ALLTOALL, f, nbytes, unit, t, t, t, t)[0]
        assert got == pytest.approx(want, rel=2e-3)
        f, nbytes, unit = op_cost_nb(q, codes.OP_MOE_ALLTOALL, t, t, t, t)
        link = q.eff[codes.EFF_LINK:codes.EFF_LINK + codes.EFF_LINK_POINTS]
        np.testing.assert_array_equal(q.eff[codes.EFF_A2A:codes.EFF_A2A + codes.EFF_LINK_POINTS], link)
