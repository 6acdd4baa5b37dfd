"""Measured-result import and ``simllm validate``: formats, name mapping, skipped points, error
statistics, bad input. Fixtures are written here in the public formats (the shared measured data
is read from ../shared/data only, and skipped when absent)."""
import json
import math

import numpy as np
import pytest

import simllm
import simllm.cli
from helpers import SHARED_DATA
from simllm.calibration import validate as accuracy
from simllm.formats.common import WorkerPool
from simllm.formats.measurements import load_measurements

SHARED = SHARED_DATA / "silicon_sample.csv"
HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
          "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
          "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
          "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
          "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms")


def row(model, system, precision, mode, isl, osl, conc, tp, ttft, tpot, ep="", backend="vllm", **columns):
    n = HEADER.count(",") + 1
    cells = [""] * n
    names = HEADER.split(",")
    values = {"id": "x", "backend": backend, "model_path": model, "system": system, "precision": precision,
              "mode": mode, "isl": isl, "osl": osl, "batch_size": conc, "tp_size": tp, "pp_size": 1 if tp else "",
              "attention_dp_size": 1 if tp else "", "moe_ep_size": ep, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot,
              **columns}
    for k, v in values.items():
        cells[names.index(k)] = str(v)
    return ",".join(cells)


@pytest.fixture
def silicon(tmp_path):
    path = tmp_path / "measured.csv"
    path.write_text("\n".join([
        HEADER,
        row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "", "agg", 1024, 128, 4, 1, 40.0, 7.0),
        row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "", "agg", 2048, 256, 16, 2, 120.0, 6.0),
        row("moonshotai/Kimi-K2.5", "gb200", "fp4", "disagg", 1024, 1024, "", "", 300.0, 20.0),
        row("Qwen/Qwen3-32B", "h200_sxm", "fp6", "agg", 1024, 128, 8, 1, 90.0, 12.0),
    ]) + "\n", encoding="utf-8")
    return path


def test_silicon_csv_rows_are_read(silicon):
    rows = load_measurements([silicon])
    assert len(rows) == 4
    m = rows[1]
    assert (m.model, m.hardware, m.tp, m.input_len, m.output_len, m.concurrency) == (
        "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 2, 2048, 256, 16)
    assert (m.ttft_ms, m.tpot_ms, m.line) == (120.0, 6.0, 3)
    assert rows[2].mode == "disagg" and rows[2].tp == 0


def test_validate_predicts_what_simulate_does_and_skips_what_it_cannot(silicon):
    points = accuracy.validate(load_measurements([silicon]))
    done = [p for p in points if p.predicted]
    assert [p.model for p in done] == ["llama-3.1-8b", "llama-3.1-8b"]
    assert all(p.hardware == "h100-sxm" for p in done)
    reasons = [p.reason for p in points if not p.predicted]
    # Kimi-K2.5 runs on kimi-k2, but its disaggregated row does not say how many workers it had
    assert any(r.startswith("disaggregated row without its worker counts") for r in reasons)
    assert any("precision 'fp6'" in r for r in reasons)
    # The prediction is the simulation of the same closed loop: a CSV row's client drew lengths
    # uniformly from 80-100% of the stated ones (InferenceMAX's), 10 requests per client; the
    # overhead the importer declares for the row's benchmark client is added to its TTFT.
    m = done[0].measurement
    w = simllm.Workload(num_prompts=40, max_concurrency=4, input_len=simllm.config.workload.LengthDist("uniform", low=819, high=1025),
                        output_len=simllm.config.workload.LengthDist("uniform", low=102, high=129))
    s = simllm.simulate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"),
                        simllm.ServingConfig(max_model_len=1152), w).summary
    assert m.client_overhead_ms > 0
    assert done[0].predicted["ttft"] == pytest.approx(s["mean_ttft_ms"] + m.client_overhead_ms)
    assert done[0].error("tpot") == pytest.approx(s["mean_tpot_ms"] / m.tpot_ms - 1)
    summary = accuracy.error_summary(points)
    errs = np.abs([p.error("ttft") for p in done])
    assert summary["ttft"]["points"] == 2
    assert summary["ttft"]["median_abs_pct_error"] == pytest.approx(np.median(errs) * 100)
    assert summary["ttft"]["within_20pct"] == pytest.approx(np.mean(errs <= 0.2))


def test_vllm_result_json_needs_the_hardware_from_the_caller(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({
        "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 200,
        "request_rate": "inf", "max_concurrency": 32, "completed": 200, "total_input_tokens": 200 * 512,
        "total_output_tokens": 200 * 128, "mean_ttft_ms": 80.0, "mean_tpot_ms": 9.0, "mean_itl_ms": 9.0,
        "mean_e2el_ms": 1300.0, "output_throughput": 3000.0}), encoding="utf-8")
    (m,) = load_measurements([path], hardware="h100_sxm")
    assert (m.input_len, m.output_len, m.concurrency, m.num_prompts, math.isinf(m.request_rate)) == (
        512, 128, 32, 200, True)
    (p,) = accuracy.validate([m])
    assert p.predicted and set(p.predicted) == {*accuracy.METRICS, "peak_memory_gb"}  # and each GPU's peak memory
    (q,) = accuracy.validate(load_measurements([path]))
    assert "no hardware preset" in q.reason


def test_maps_override_names(silicon):
    points = accuracy.validate(load_measurements([silicon])[:1], model_map={
        "meta-llama/Llama-3.1-8B-Instruct": "mistral-7b"}, hardware_map={"h100_sxm": "h200-sxm"})
    assert (points[0].model, points[0].hardware) == ("mistral-7b", "h200-sxm")


def test_validate_cli_table_and_json(silicon, capsys):
    assert simllm.cli.main(["validate", str(silicon)]) == 0
    out = capsys.readouterr().out
    assert "median |error|" in out and "Skipped 2 point(s), by reason" in out
    assert "      1  precision 'fp6'  (" in out  # each reason once, with its count and first point
    assert simllm.cli.main(["validate", str(silicon), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["tpot"]["points"] == 2 and len(data["points"]) == 4


@pytest.mark.parametrize("content, expect", [
    ("model_path,system\nx,y\n", "missing backend, precision, mode, isl"),
    (HEADER + "\n" + row("m", "h100_sxm", "", "agg", "abc", 128, 4, 1, 1, 1) + "\n", "isl = 'abc'"),
])
def test_bad_measurement_files_name_file_line_and_field(tmp_path, capsys, content, expect):
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    assert simllm.cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and expect in err


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/data/silicon_sample.csv is absent")
def test_shared_silicon_data_validates(capsys):
    """The measured data loads whole; the dense aggregated Llama-3.1-8B H100 points all get a
    finite prediction. (The accuracy figures are in test_accuracy.py.)"""
    rows = load_measurements([SHARED])
    assert len(rows) > 5000
    subset = [m for m in rows if "Llama-3.1-8B" in m.model and m.hardware == "h100_sxm"][:20]
    points = accuracy.validate(subset, num_prompts=64)
    assert points and all(p.predicted for p in points), [p.reason for p in points if not p.predicted]
    summary = accuracy.error_summary(points)
    assert all(math.isfinite(v["median_abs_pct_error"]) for v in summary.values())
    print("Llama-3.1-8B on H100, first 20 rows:", {k: round(v["median_abs_pct_error"], 1) for k, v in summary.items()})


def test_moe_rows_read_their_expert_parallelism(tmp_path):
    """A MoE row's moe_ep_size is simulated as expert parallelism (over the row's tensor x data
    parallel GPUs); a dense model's row may fill the column in without meaning anything; a row over
    more GPUs than one node (NVLink domain) holds runs with its all-to-all partly on the network;
    DeepSeek-R1 is DeepSeek-V3's
    architecture, and a system's form factor (b200_sxm) finds the GPU's preset."""
    path = tmp_path / "moe.csv"
    path.write_text("\n".join([
        HEADER,
        row("deepseek-ai/DeepSeek-R1", "h200_sxm", "fp8", "agg", 1024, 128, 8, 8, 300.0, 15.0, ep=8),
        row("deepseek-ai/DeepSeek-R1", "h200_sxm", "fp8", "agg", 1024, 128, 8, 16, 300.0, 15.0, ep=8),
        row("meta-llama/Llama-3.1-8B-Instruct", "b200_sxm", "", "agg", 1024, 128, 4, 2, 40.0, 7.0, ep=2),
    ]) + "\n", encoding="utf-8")
    rows = load_measurements([path])
    assert [m.ep for m in rows] == [8, 8, 2]
    ep8, two_nodes, dense = accuracy.resolve(rows)
    assert ep8.model == two_nodes.model == "deepseek-v3"
    assert ep8.reason == "" and two_nodes.reason == ""
    assert (dense.model, dense.hardware, dense.reason) == ("llama-3.1-8b", "b200", "")
    (p,) = accuracy.predict_points([ep8], num_prompts=16)
    assert p.predicted and p.predicted["tpot"] > 0


def _pools(prefill_workers=2, decode_workers=1, decode_batch=16):
    """The prefill_* / decode_* columns of a disaggregated row: prefill workers of attention DP 4 with
    EP 4, a decode worker of attention DP 8 with every expert tensor-parallel over its 8 GPUs."""
    return dict(prefill_batch_size=1, prefill_num_workers=prefill_workers, prefill_tp_size=1, prefill_pp_size=1,
                prefill_attention_dp_size=4, prefill_moe_tp_size=1, prefill_moe_ep_size=4,
                decode_batch_size=decode_batch, decode_num_workers=decode_workers, decode_tp_size=1, decode_pp_size=1,
                decode_attention_dp_size=8, decode_moe_tp_size=8, decode_moe_ep_size=1)


def test_disaggregated_rows_read_their_pools(tmp_path):
    """A disaggregated row's prefill_* / decode_* columns are its pools; its clients are the
    silicon_concurrency its source states, else the decode pool's slots (batch x workers x
    attention DP); a row without worker counts is skipped, saying why. Its DisaggConfig: the
    workers as instances, each pool's parallelism and the prefill batch as overrides, the first
    token where the backend samples it."""
    path = tmp_path / "disagg.csv"
    src = "db-dump; config_id=1; silicon_concurrency=96; image=x"
    blank = dict(_pools(), prefill_num_workers="", decode_num_workers="", decode_batch_size="")
    path.write_text("\n".join([
        HEADER,
        row("deepseek-ai/DeepSeek-R1", "gb200", "fp4", "disagg", 1024, 1024, "", "", 300.0, 20.0, backend="trtllm",
            silicon_data_source=src, **_pools()),
        row("deepseek-ai/DeepSeek-R1", "gb200", "fp4", "disagg", 1024, 1024, "", "", 300.0, 20.0, backend="vllm",
            **_pools()),
        row("deepseek-ai/DeepSeek-R1", "gb200", "fp4", "disagg", 1024, 1024, "", "", 300.0, 20.0, **blank),
    ]) + "\n", encoding="utf-8")
    stated, slots, unrecorded = load_measurements([path])
    assert stated.prefill == WorkerPool(workers=2, tp=1, dp=4, ep=4, moe_tp=1, pp=1, batch_size=1)
    assert stated.decode == WorkerPool(workers=1, tp=1, dp=8, ep=1, moe_tp=8, pp=1, batch_size=16)
    assert (stated.concurrency, slots.concurrency) == (96, 16 * 1 * 8)
    assert unrecorded.decode.workers == 0 and unrecorded.concurrency == 0
    a, b, c = accuracy.resolve([stated, slots, unrecorded])
    assert (a.reason, b.reason) == ("", "") and "worker counts" in c.reason
    model = simllm.load_model("deepseek-v3")
    d = accuracy.disagg_config(stated, model)
    assert (d.prefill_instances, d.decode_instances, d.first_token) == (2, 1, "prefill")
    route = {"router": "least_outstanding"}  # a load-aware router (Dynamo's, TensorRT-LLM's disaggregated server's)
    assert dict(d.prefill) == {"tensor_parallel_size": 1, "data_parallel_size": 4, "expert_parallel_size": 4,
                               "moe_tensor_parallel_size": 0, "max_num_seqs": 1, **route}
    assert dict(d.decode) == {"tensor_parallel_size": 1, "data_parallel_size": 8, "expert_parallel_size": 1,
                              "moe_tensor_parallel_size": 8, "max_num_seqs": 16, **route}
    assert accuracy.disagg_config(slots, model).first_token == "decode"  # vLLM's proxy


@pytest.mark.heavy
def test_disaggregated_row_predicts_what_simulate_disagg_does(tmp_path):
    """A disaggregated row's prediction is simllm.simulate_disagg of its pools over the same
    closed loop, plus its client's overhead on TTFT; a vLLM row's first token comes from the
    decode pool (one more step than SGLang's, whose prefill's token is streamed)."""
    path = tmp_path / "disagg.csv"
    pools = dict(prefill_batch_size=1, prefill_num_workers=2, prefill_tp_size=2, prefill_attention_dp_size=1,
                 decode_batch_size=4, decode_num_workers=1, decode_tp_size=2, decode_attention_dp_size=1)
    path.write_text("\n".join([HEADER] + [
        row("Qwen/Qwen3-32B", "h100_sxm", "", "disagg", 512, 64, "", "", 300.0, 20.0, backend=backend, **pools)
        for backend in ("vllm", "sglang")]) + "\n", encoding="utf-8")
    points = accuracy.predict_points(accuracy.resolve(load_measurements([path])), num_prompts=16)
    model, hw = simllm.load_model("qwen3-32b"), simllm.load_hardware("h100-sxm")
    for p, first in zip(points, ("decode", "prefill")):
        m = p.measurement
        assert p.predicted, p.reason
        shape = accuracy.BenchmarkShape()
        w = simllm.Workload(num_prompts=16, max_concurrency=4, input_len=shape.lengths(512, m),
                            output_len=shape.lengths(64, m))
        overrides = {"data_parallel_size": 1, "expert_parallel_size": 1, "moe_tensor_parallel_size": 0,
                     "tensor_parallel_size": 2, "router": "least_outstanding"}
        disagg = simllm.DisaggConfig(prefill_instances=2, decode_instances=1, first_token=first,
                                     prefill=tuple(sorted(dict(overrides, max_num_seqs=1).items())),
                                     decode=tuple(sorted(dict(overrides, max_num_seqs=4).items())))
        serving = simllm.ServingConfig(max_model_len=576, framework=m.backend,
                                       enable_chunked_prefill=m.backend != "sglang")
        s = simllm.simulate_disagg(model, hw, serving, w, disagg, keep_requests=False).summary
        assert p.predicted["ttft"] == pytest.approx(s["mean_ttft_ms"] + m.client_overhead_ms, rel=1e-12)
        assert p.predicted["tpot"] == pytest.approx(s["mean_tpot_ms"], rel=1e-12)
        assert s["prefill_pool"]["instances"] == 2 and s["num_gpus"] == 6


@pytest.mark.heavy
def test_validate_cli_errors_by_mode(tmp_path, capsys):
    """An aggregated and a disaggregated row: validate's table and JSON give the errors per mode
    beside those per backend, and each JSON point its mode."""
    path = tmp_path / "both.csv"
    pools = dict(prefill_batch_size=1, prefill_num_workers=1, prefill_tp_size=1, decode_batch_size=4,
                 decode_num_workers=1, decode_tp_size=1)
    path.write_text("\n".join([
        HEADER,
        row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "", "agg", 1024, 64, 4, 1, 60.0, 7.0),
        row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "", "disagg", 1024, 64, "", "", 90.0, 7.0, **pools),
    ]) + "\n", encoding="utf-8")
    assert simllm.cli.main(["validate", str(path), "--num-prompts", "16"]) == 0
    out = capsys.readouterr().out
    assert "By mode (median |error|, points):" in out and "\nagg " in out and "\ndisagg " in out
    assert simllm.cli.main(["validate", str(path), "--num-prompts", "16", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [pt["mode"] for pt in data["points"]] == ["agg", "disagg"]
    assert set(data["by_mode"]) == {"agg", "disagg"} and data["by_mode"]["disagg"]["tpot"]["points"] == 1


@pytest.mark.parametrize("name, preset", [
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),
    ("nvidia/DeepSeek-R1-NVFP4", "deepseek-v3"), ("moonshotai/Kimi-K2.5", "kimi-k2"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("MiniMaxAI/MiniMax-M2.5", "minimax-m2.5"),
    ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
])
def test_checkpoints_of_a_presets_architecture_find_it(name, preset):
    assert accuracy.resolve_name("models", name, {}) == preset


@pytest.mark.heavy
def test_pipeline_parallel_rows_are_simulated_pipelined(tmp_path):
    """An aggregated row with pp_size 2 runs with --pipeline-parallel-size 2 (its GPUs tp x pp)."""
    path = tmp_path / "pp.csv"
    path.write_text("\n".join([HEADER, row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "", "agg", 1024, 128, 4, 1,
                                           50.0, 8.0, pp_size=2)]) + "\n", encoding="utf-8")
    (m,) = load_measurements([path])
    (p,) = accuracy.validate([m])
    assert m.pp == 2 and p.predicted, p.reason
    w = simllm.Workload(num_prompts=40, max_concurrency=4,
                        input_len=simllm.config.workload.LengthDist("uniform", low=819, high=1025),
                        output_len=simllm.config.workload.LengthDist("uniform", low=102, high=129))
    s = simllm.simulate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"),
                        simllm.ServingConfig(max_model_len=1152, pipeline_parallel_size=2), w).summary
    assert p.predicted["tpot"] == pytest.approx(s["mean_tpot_ms"])


def _nim_point(conc, throughput, tp=1, below=False):
    """A simulated NIM row of ``conc`` clients that measured ``throughput`` output tokens/s."""
    from simllm.formats.common import Measurement

    m = Measurement(source="/data/nim_genai_perf.csv", line=conc, model="llama-3.1-8b", hardware="h100-sxm",
                    backend="trtllm", precision="", mode="agg", tp=tp, pp=1, dp=1, input_len=200, output_len=200,
                    concurrency=conc, request_rate=math.inf, num_prompts=0, ttft_ms=100.0, tpot_ms=10.0, itl_ms=10.0,
                    output_throughput=throughput, fixed_lengths=True, client_jitter_ms=0.0)
    bound = {"ttft": 1e9 if below else 1.0, "tpot": 1.0, "itl": 1.0, "e2el": 1.0}
    return accuracy.Point(m, "llama-3.1-8b", "h100-sxm", {"ttft": 1.0, "tpot": 1.0, "itl": 1.0, "e2el": 1.0},
                          "", bound)


def test_capacity_is_checked_on_each_deployments_largest_load():
    """The measured maxima are each deployment's largest load (at least MAXIMUM_MIN_LOAD, within the
    peak bound); its capacity is simllm.capacity of the row as validate poses it."""
    top = _nim_point(250, 9000.0)
    pts = [_nim_point(1, 100.0), _nim_point(100, 8000.0), top, _nim_point(250, 20000.0, tp=2, below=True),
           _nim_point(32, 4000.0, tp=4)]  # TP 4's largest load is too small to be a maximum
    assert accuracy.measured_maxima(pts) == [top]
    ((point, predicted, error),) = accuracy.capacity_points(pts, workers=1)
    posed = accuracy.pose(top.measurement, "llama-3.1-8b", "h100-sxm")
    want = simllm.capacity(posed.model, posed.hardware, posed.serving, posed.workload, framework=posed.framework)
    assert point is top and predicted == want.output_throughput_tok_s
    assert error == pytest.approx(predicted / 9000.0 - 1.0)
    assert posed.serving.max_num_seqs == 256 and want.clients == 512  # NIM rows run TensorRT-LLM's 256 slots
