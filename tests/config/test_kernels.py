"""Kernel tables (simllm.config.kernels): every shipped set loads with its provenance, a bad file is
a one-line ConfigError naming file, key, value and what is allowed, hardware YAMLs name a shipped
set or a folder, and a framework without tables falls back to the scalar roofline."""
import json
import re

import numpy as np
import pytest
import yaml

import simllm
from helpers import ROOT, build
from simcore import codes
from simcore.cost import interp2_nb, link_seconds_nb
from simllm.config import kernels as kt
from simllm.config.serving import FRAMEWORKS

KERNELS = ROOT / "configs" / "kernels"
SHIPPED = sorted(p.name for p in KERNELS.iterdir() if p.is_dir())
TABLE_FILES = sorted(f"{gpu}/{fw}" for gpu in SHIPPED for fw in FRAMEWORKS)
HW_WITH_TABLES = sorted(p.stem for p in (ROOT / "configs" / "hardware").glob("*.yaml")
                        if "kernel_tables" in yaml.safe_load(p.read_text(encoding="utf-8"))["hardware"])
FIT_KEYS = {"rows", "held_out_rows", "held_out_median_abs_error", "clipped_above_roofline"}
MINIMAL_HW = "hardware:\n  fp16_tflops: 100\n  memory_bandwidth_gbps: 1000\n  memory_size_gb: 24\n"


def shipped_json(name="h100-sxm/vllm"):
    return json.loads((KERNELS / f"{name}.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- shipped sets
def test_every_gpu_with_tables_ships_all_three_frameworks():
    assert len(SHIPPED) >= 9 and {"h100-sxm", "h200-sxm", "l40s", "a100-sxm-80gb"} <= set(SHIPPED)
    for gpu in SHIPPED:
        assert sorted(p.stem for p in (KERNELS / gpu).glob("*.json")) == sorted(FRAMEWORKS), gpu
    # Every shipped set is named by its hardware preset, and every preset naming one gets all three.
    assert HW_WITH_TABLES == SHIPPED
    for gpu in HW_WITH_TABLES:
        hw = simllm.load_hardware(gpu)
        assert [name for name, _ in hw.kernel_tables] == list(FRAMEWORKS), gpu


@pytest.mark.parametrize("name", TABLE_FILES)
def test_shipped_table_loads_with_its_provenance(name):
    gpu, framework = name.split("/")
    t = kt.load_tables(KERNELS / f"{name}.json")
    assert (t.gpu, t.framework) == (gpu, framework) and t.framework_version
    assert t.source.endswith(f"{name}.json")
    dtypes = dict(t.gemm)
    assert "bf16" in dtypes and all(a.shape == kt.GEMM_SHAPE for a in dtypes.values())
    assert t.attention_prefill.shape == kt.PREFILL_SHAPE and t.attention_decode.shape == kt.DECODE_SHAPE
    assert [n for n, _ in t.allreduce] == sorted(n for n, _ in t.allreduce) and t.allreduce[0][0] == 2
    moe = dict(t.moe)
    assert all(a.shape == kt.MOE_SHAPE for a in moe.values())
    for arr in [*dtypes.values(), t.attention_prefill, t.attention_decode, *(c for _, c in t.allreduce), *moe.values()]:
        assert not arr.flags.writeable
        assert np.all(arr >= codes.EFF_FLOOR) and np.all(arr <= 1.0)
    prov = json.loads(t.provenance)
    assert re.fullmatch(r"aiconfigurator-core \d+\.\d+\.\d+ \(Apache-2\.0\), system \w+", prov["source"])  # package version
    measured = {"gemm_perf.parquet", "context_attention_perf.parquet", "generation_attention_perf.parquet",
                "custom_allreduce_perf.parquet"}
    mla = {"context_mla_perf.parquet", "generation_mla_perf.parquet"}
    a2a = {"moe_a2a_perf.parquet", "wideep_deepep_ll_perf.parquet", "wideep_deepep_normal_perf.parquet"}
    assert set(prov["files"]) - measured <= {"moe_perf.parquet"} | mla | a2a and measured <= set(prov["files"])
    assert (t.alltoall is None) == ("alltoall" in prov.get("omitted", {})) == (not a2a & set(prov["files"]))
    if t.alltoall is not None:
        assert t.alltoall.shape == kt.LINK_SHAPE and not t.alltoall.flags.writeable
        assert np.all(t.alltoall >= codes.EFF_FLOOR) and np.all(t.alltoall <= 1.0)
        assert set(prov["alltoall_lines"]) and all(v["latency_us"] > 0 and v["bandwidth_gbps"] > 0
                                                   for v in prov["alltoall_lines"].values())
    assert bool(moe) == ("moe" not in prov.get("omitted", {}))  # a set without MoE says why
    assert bool(t.mla) == ("mla" not in prov.get("omitted", {})) == (mla <= set(prov["files"]))
    for kv, heads, pre, dec in t.mla:
        assert kv in kt.MLA_KV_DTYPES and pre.shape == kt.PREFILL_SHAPE and dec.shape == kt.DECODE_SHAPE
        assert not pre.flags.writeable and not dec.flags.writeable
        assert np.all(np.concatenate([pre.ravel(), dec.ravel()]) >= codes.EFF_FLOOR) and pre.max() <= 1 and dec.max() <= 1
    assert prov["roofline"]["hardware"] == gpu
    fits = {"attention_prefill", "attention_decode", "allreduce"} | {f"gemm_{d}" for d in dtypes}
    fits |= {f"moe_{d}" for d in moe} | {f"moe_shapes_{d}" for d in moe}
    fits |= {f"mla_{side}_{kv}" for kv, *_ in t.mla for side in ("prefill", "decode")}
    fits |= {"alltoall"} if t.alltoall is not None else set()
    assert {d for d, *_ in t.moe_shapes} == set(moe)  # each measured dtype keeps its shapes' own curves
    assert all(c.shape == kt.MOE_CURVE_SHAPE and not c.flags.writeable for *_, c in t.moe_shapes)
    assert set(prov["fit"]) == fits
    for table, fit in prov["fit"].items():
        assert set(fit) == FIT_KEYS, table
        assert fit["rows"] > 0 and fit["held_out_rows"] > 0 and fit["clipped_above_roofline"] >= 0, table  # rows used
        assert 0 <= fit["held_out_median_abs_error"] < 0.5, table  # fit error


def test_fp8_table_only_where_the_gpu_has_fp8_tensor_cores():
    for gpu in SHIPPED:
        hw = simllm.load_hardware(gpu)
        for fw in FRAMEWORKS:
            assert ("fp8" in dict(hw.tables_for(fw).gemm)) == (hw.fp8_tflops > 0), (gpu, fw)
    a100 = simllm.load_hardware("a100-sxm-80gb").tables_for("vllm")
    assert a100.gemm_table("fp8") is a100.gemm_table("bf16")  # weight-only FP8 runs the BF16 kernels


def test_int8_gemms_take_the_measured_fp8_fraction_where_the_gpu_has_fp8():
    """The tables measure no int8 GEMM: int8 takes fp8's measured fraction of peak (an 8-bit
    tensor-core GEMM on operands of the same byte) where the GPU has it, applied to int8's own
    peak, so on an H100 (both peaks 1,979 T/s) int8 weights cost what fp8 weights cost; priced at
    bf16's fraction they were ten points of TTFT faster. Without fp8 (A100) int8 keeps bf16's."""
    for gpu in SHIPPED:
        hw = simllm.load_hardware(gpu)
        for fw in FRAMEWORKS:
            t = hw.tables_for(fw)
            want = "fp8" if "fp8" in dict(t.gemm) else "bf16"
            assert t.gemm_table("int8") is dict(t.gemm)[want], (gpu, fw)
    fp8, int8 = (simllm.estimate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"),
                                 simllm.ServingConfig(dtype=d), batch_size=64)
                 for d in ("fp8", "int8"))
    assert int8.prefill.seconds == fp8.prefill.seconds and int8.decode.seconds == fp8.decode.seconds


def test_fp4_table_only_on_gpus_with_fp4_tensor_cores():
    """NVFP4 GEMMs were measured on Blackwell only; every Blackwell preset has its FP4 peak."""
    for gpu in SHIPPED:
        hw = simllm.load_hardware(gpu)
        for fw in FRAMEWORKS:
            assert "fp4" not in dict(hw.tables_for(fw).gemm) or hw.fp4_tflops > 0, (gpu, fw)
        if gpu in ("b200", "b300", "gb200", "gb300", "rtx-pro-6000"):
            assert hw.fp4_tflops >= 2 * hw.fp8_tflops * 0.99 and "fp4" in dict(hw.tables_for("vllm").gemm), gpu
        else:
            assert hw.fp4_tflops == 0, gpu
    h100 = simllm.load_hardware("h100-sxm").tables_for("vllm")
    assert h100.gemm_table("fp4") is h100.gemm_table("bf16")  # FP4 weights on Hopper: weight-only
    h100 = simllm.load_hardware("h100-sxm").tables_for("vllm")
    assert h100.gemm_table("fp8") is dict(h100.gemm)["fp8"] and h100.gemm_table("int4") is h100.gemm_table("bf16")


def test_all_reduce_curve_is_the_nearest_gpu_count_at_or_below():
    gb200 = simllm.load_hardware("gb200").tables_for("vllm")
    curves = dict(gb200.allreduce)
    assert sorted(curves) == [2, 4]
    assert gb200.allreduce_curve(1) is curves[2]  # below all: the smallest measured
    assert gb200.allreduce_curve(2) is curves[2]
    assert gb200.allreduce_curve(3) is curves[2]
    assert gb200.allreduce_curve(8) is curves[4]


# --------------------------------------------------------------------------- bad files
def _set(path, value):
    def mutate(d):
        *head, last = path
        for k in head:
            d = d[k]
        d[last] = value
    return mutate


def _drop(key):
    return lambda d: d.pop(key)


BAD = [  # (mutation, what the one-line message must name: key, value, allowed range)
    (_set(["format"], "simllm-kernel-tables/2"), ["format", "simllm-kernel-tables/1", "simllm-kernel-tables/2"]),
    (_set(["gemm", "bf16", 3, 2, 1], -0.25), ["gemm.bf16[3, 2, 1]", "-0.25", "[0.0001, 1]"]),
    (_set(["attention_decode", 5, 7], float("nan")), ["attention_decode[5, 7]", "nan", "[0.0001, 1]"]),
    (_set(["attention_prefill", 0, 0], 1.5), ["attention_prefill[0, 0]", "1.5", "[0.0001, 1]"]),
    (_set(["allreduce", "2", 4], 0.0), ["allreduce.2[4]", "0.0", "[0.0001, 1]"]),
    (_set(["allreduce", "2", 4], "fast"), ["allreduce.2", "numeric", "fast"]),
    (_drop("attention_prefill"), ["attention_prefill", "missing"]),
    (_drop("framework_version"), ["framework_version", "missing"]),
    # The grids are implicit (one point per octave from a fixed start): a table with a point too few
    # or too many is the wrong shape.
    (lambda d: d["attention_decode"].pop(), ["attention_decode", "(24, 18)", "(23, 18)"]),
    (lambda d: d["allreduce"]["4"].append(0.5), ["allreduce.4", "(24,)", "(25,)"]),
    (_set(["allreduce", "1"], [0.5] * 24), ["allreduce", "2 .. 1024", "'1'"]),
    (_set(["gemm"], {"fp8": [[[0.5]]]}), ["gemm", "bf16 required"]),
    (_set(["gemm", "int4"], [[[0.5]]]), ["gemm", "bf16, fp8"]),
    (_set(["moe", "bf16", 2, 3], 2.0), ["moe.bf16[2, 3]", "2.0", "[0.0001, 1]"]),
    (_set(["moe_shapes", "bf16", 0, "topk"], -8), ["moe_shapes.bf16[0].topk", "-8", "positive"]),
    (lambda d: d["moe_shapes"]["fp8"][1].pop("eff"), ["moe_shapes.fp8[1]", "hidden, inter, experts, topk and eff"]),
    (lambda d: d["moe_shapes"]["fp8"][0]["eff"].pop(), ["moe_shapes.fp8[0].eff", "(15,)", "(14,)"]),
    (lambda d: d.update(alltoall=[0.5] * 23), ["alltoall", "(24,)", "(23,)"]),
    (lambda d: d.update(alltoall=[0.0] * 24), ["alltoall[0]", "0.0", "[0.0001, 1]"]),
    (lambda d: d.update(mla={"fp4": {}}), ["mla", "bf16, fp8", "fp4"]),
    (lambda d: d.update(mla={"bf16": {"0": {}}}), ["mla.bf16", "1 .. 1024", "'0'"]),
    (lambda d: d.update(mla={"bf16": {"16": {"prefill": d["attention_prefill"]}}}), ["mla.bf16.16", "prefill and decode"]),
    (lambda d: d.update(mla={"fp8": {"128": {"prefill": d["attention_prefill"], "decode": [[2.0] * 18] * 24}}}),
     ["mla.fp8.128.decode[0, 0]", "2.0", "[0.0001, 1]"]),
]


@pytest.mark.parametrize("mutate, names", BAD, ids=[
    "format", "negative", "nan", "above-1", "zero", "not-numeric", "missing-table", "missing-version",
    "grid-point-short", "grid-point-extra", "gpu-count", "no-bf16", "unknown-dtype", "moe-above-1",
    "moe-shape-negative", "moe-shape-no-curve", "moe-curve-short", "a2a-short", "a2a-zero", "mla-kv-dtype", "mla-heads", "mla-no-decode",
    "mla-above-1"])
def test_bad_table_file_is_a_one_line_error_naming_file_key_value_and_range(tmp_path, mutate, names):
    data = shipped_json()
    mutate(data)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(simllm.ConfigError) as err:
        kt.load_tables(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and len(msg) < 400, msg
    for name in names:
        assert name in msg, (name, msg)


def test_unreadable_or_invalid_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text('{"format": "simllm-kernel-tables/1",\n  "gpu": }\n', encoding="utf-8")
    with pytest.raises(simllm.ConfigError, match=r"vllm\.json: line 2: valid JSON") as err:
        kt.load_tables(path)
    assert "\n" not in str(err.value)
    with pytest.raises(simllm.ConfigError, match="readable kernel-table JSON"):
        kt.load_tables(tmp_path / "missing.json")
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(simllm.ConfigError, match="format: 'simllm-kernel-tables/1', got 'list'"):
        kt.load_tables(path)


# --------------------------------------------------------------------------- hardware YAMLs
def _hw_yaml(tmp_path, tables):
    path = tmp_path / "mine.yaml"
    path.write_text(MINIMAL_HW + f"  kernel_tables: {tables}\n", encoding="utf-8")
    return path


def test_kernel_tables_by_shipped_name_or_folder_path(tmp_path):
    by_name = simllm.load_hardware(_hw_yaml(tmp_path, "l40s"))
    assert by_name.tables_for("vllm").gpu == "l40s"
    own = tmp_path / "my-tables"
    own.mkdir()
    data = shipped_json("h200-sxm/sglang")
    data["gpu"] = "my-gpu"
    (own / "sglang.json").write_text(json.dumps(data), encoding="utf-8")
    for spelling in ("my-tables", "./my-tables", str(own)):  # relative to the YAML, or absolute
        hw = simllm.load_hardware(_hw_yaml(tmp_path, spelling))
        assert [n for n, _ in hw.kernel_tables] == ["sglang"], spelling
        assert hw.tables_for("sglang").gpu == "my-gpu"
        assert hw.tables_for("vllm") is None  # no vllm.json there: vLLM runs on the scalar roofline
    assert simllm.load_hardware(_hw_yaml(tmp_path, "my-tables"), with_tables=False).kernel_tables == ()


def test_bad_kernel_tables_entry_is_one_line_with_file_line_and_key(tmp_path):
    for value, expected in (("h100-sxmm", "an existing folder of <framework>.json tables"),
                            ("empty", "a folder holding <framework>.json tables (vllm, sglang, trtllm)")):
        (tmp_path / "empty").mkdir(exist_ok=True)
        path = _hw_yaml(tmp_path, value)
        with pytest.raises(simllm.ConfigError) as err:
            simllm.load_hardware(path)
        msg = str(err.value)
        assert "\n" not in msg and f"{path}:5:" in msg and f"hardware.kernel_tables = '{value}'" in msg, msg
        assert expected in msg, msg
    # A bad table inside the folder: the YAML's line and the table file's key and value.
    (tmp_path / "bad").mkdir()
    data = shipped_json()
    data["attention_decode"][0][0] = -1.0
    (tmp_path / "bad" / "vllm.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(simllm.ConfigError) as err:
        simllm.load_hardware(_hw_yaml(tmp_path, "bad"))
    msg = str(err.value)
    assert "\n" not in msg and ":5:" in msg and "vllm.json" in msg and "attention_decode[0, 0]" in msg and "-1.0" in msg


def test_unknown_shipped_table_set_names_the_shipped_ones(tmp_path):
    with pytest.raises(simllm.ConfigError) as err:
        simllm.load_hardware(_hw_yaml(tmp_path, "h100-sxmm"))
    assert "h100-sxm," in str(err.value) or "h100-sxm)" in str(err.value)


# --------------------------------------------------------------------------- frameworks
def test_tables_for_each_framework_and_the_scalar_fallback(tmp_path):
    hw = simllm.load_hardware("h100-sxm")
    for fw in FRAMEWORKS:
        t = hw.tables_for(fw)
        assert t.framework == fw and t.gpu == "h100-sxm"
        assert build("llama-3.1-8b", hw, framework=fw)[4].eff.shape == (codes.EFF_SIZE,)
    assert hw.tables_for("vllm") is not hw.tables_for("sglang")
    # A framework without a table (an unknown name, or a profile YAML of one's own): None, and the
    # packed params carry no tables, i.e. the scalar roofline.
    assert hw.tables_for("tgi") is None
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"framework": {"name": "mine", "version": "1", "frontend_latency_ms": 1.0,
                                                  "iteration_overhead_us": 100.0, "launch_overhead_us": 1.0}}),
                    encoding="utf-8")
    p = build("llama-3.1-8b", hw, framework=str(mine))[4]
    assert p.eff.shape == (0,)
    assert build("llama-3.1-8b", "rtx-4090")[4].eff.shape == (0,)  # a preset without tables


# --------------------------------------------------------------------------- interpolation
def test_numpy_interpolators_match_the_kernels_point_for_point():
    t = simllm.load_hardware("h100-sxm").tables_for("vllm")
    rng = np.random.default_rng(7)
    link_bw = 450e9
    packed = np.zeros(codes.EFF_SIZE)
    packed[codes.EFF_LINK:codes.EFF_LINK + codes.EFF_LINK_POINTS] = kt.link_seconds_curve(t.allreduce_curve(2), link_bw)
    for log2_bytes in np.concatenate([rng.uniform(0, 34, 200), np.arange(0.0, 34.0)]):
        x = 2.0**log2_bytes
        assert kt.link_seconds(t.allreduce_curve(2), x, link_bw) == pytest.approx(link_seconds_nb(packed, x), rel=1e-12)
    for table in (t.attention_prefill, t.attention_decode):
        flat = np.ascontiguousarray(table).reshape(-1)
        n1, n2 = table.shape
        for x1, x2 in zip(rng.uniform(-2, n1 + 2, 200), rng.uniform(-2, n2 + 2, 200)):
            assert kt.interp2(table, x1, x2) == interp2_nb(flat, 0, n1, n2, x1, x2)
        assert kt.interp2(table, 0, 0) == table[0, 0] and kt.interp2(table, n1 + 5, n2 + 5) == table[-1, -1]
    # On the grid a GEMM efficiency is the table's value.
    g = t.gemm_table("bf16")
    assert kt.gemm_efficiency(g, 2**5, 2**9, 2**12) == pytest.approx(g[5, 2, 5], rel=1e-12)
    assert kt.gemm_efficiency(g, 0.5, 1.0, 2**20) == pytest.approx(g[0, 0, -1], rel=1e-12)  # clamped
    assert np.allclose(kt.log2_grid(7, 3), [128.0, 256.0, 512.0])
    assert kt.bus_bytes(1000.0, 4) == pytest.approx(1500.0)
