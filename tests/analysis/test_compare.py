"""``simllm.compare``: one workload on several GPUs and models side by side, ratios to the first
column, failed columns kept as errors, and the JSON/CSV forms."""
import csv
import io
import json

import pytest

import simllm
from simllm.analysis import compare as cmp
from simllm.errors import ConfigError

WORKLOAD = simllm.Workload(num_prompts=200, max_concurrency=32)


@pytest.fixture(scope="module")
def gpus():
    """llama-3.1-8b on an H100 and an A100 80 GB."""
    return cmp.compare("llama-3.1-8b", ["h100-sxm", "a100-sxm-80gb"], simllm.ServingConfig(), WORKLOAD)


@pytest.fixture(scope="module")
def with_oom():
    """Two models on two GPUs; llama-3.1-70b in bf16 does not fit one 80 GB GPU."""
    return cmp.compare(["llama-3.1-8b", "llama-3.1-70b"], ["h100-sxm", "a100-sxm-80gb"], simllm.ServingConfig(),
                       WORKLOAD)


def test_columns_and_rows(gpus):
    assert gpus.labels == ("llama-3.1-8b @ h100-sxm", "llama-3.1-8b @ a100-sxm-80gb")
    assert [r.metric.key for r in gpus.rows] == list(cmp.DEFAULT_METRICS)
    assert gpus.baseline == 0
    assert all(c.ok and c.summary["completed"] == 200 for c in gpus.columns)
    for row in gpus.rows:
        assert len(row.values) == len(row.ratios) == 2


def test_first_column_ratios_are_one(gpus):
    for row in gpus.rows:
        if row.values[0]:
            assert row.ratios[0] == 1.0, row.metric.key
            assert row.ratios[1] == pytest.approx(row.values[1] / row.values[0])
        else:  # a zero baseline (no errors) has no ratio
            assert row.ratios == (None, None)


def test_h100_is_faster(gpus):
    h100, a100 = gpus.row("output_throughput").values
    assert h100 > a100 > 0
    assert gpus.row("output_throughput").ratios[1] < 1.0
    assert gpus.row("request_throughput").values[0] > gpus.row("request_throughput").values[1]
    assert gpus.row("mean_tpot_ms").ratios[1] > 1.0


def test_values_are_the_summaries(gpus):
    for i, column in enumerate(gpus.columns):
        s = column.summary
        assert gpus.row("mean_ttft_ms").values[i] == s["mean_ttft_ms"]
        assert gpus.row("p99_e2el_ms").values[i] == s["p99_e2el_ms"]
        assert gpus.row("compute_utilization").values[i] == s["compute_utilization"]
        assert gpus.row("output_throughput_per_gpu").values[i] == s["output_throughput"]  # TP = DP = 1


def test_per_gpu_divides_by_tp_and_dp():
    c = cmp.compare("llama-3.1-8b", "h100-sxm", simllm.ServingConfig(tensor_parallel_size=2, data_parallel_size=2),
                    simllm.Workload(num_prompts=64, max_concurrency=16), metrics=("output_throughput",
                                                                                  "output_throughput_per_gpu"))
    total, per_gpu = (r.values[0] for r in c.rows)
    assert per_gpu == pytest.approx(total / 4)


def test_hardware_major_order_and_oom_column(with_oom):
    assert with_oom.labels == ("llama-3.1-8b @ h100-sxm", "llama-3.1-70b @ h100-sxm",
                               "llama-3.1-8b @ a100-sxm-80gb", "llama-3.1-70b @ a100-sxm-80gb")
    ok = [c.ok for c in with_oom.columns]
    assert ok == [True, False, True, False]
    oom = with_oom.columns[1]
    assert oom.oom and oom.summary is None and "does not fit" in oom.error
    for row in with_oom.rows:
        assert row.values[1] is None and row.ratios[1] is None


def test_table(gpus, with_oom):
    text = cmp.format_comparison(gpus)
    lines = text.splitlines()
    assert lines[0].split()[0] == "metric" and "llama-3.1-8b @ a100-sxm-80gb" in lines[0]
    ttft = next(line for line in lines if line.startswith("TTFT mean (ms)"))
    assert "(x" in ttft and ttft.count("(x") == 1  # the first column shows values only
    assert any(line.startswith("output per GPU (tok/s)") for line in lines)
    assert any(line.startswith("MFU") and "%" in line for line in lines)
    assert "relative to llama-3.1-8b @ h100-sxm" in text

    text = cmp.format_comparison(with_oom)
    ttft = next(line for line in text.splitlines() if line.startswith("TTFT mean"))
    assert ttft.split().count("OOM") == 2
    assert "llama-3.1-70b @ h100-sxm: simulated OOM" in text


def test_json_round_trip(with_oom, tmp_path):
    data = cmp.comparison_to_dict(with_oom)
    text = json.dumps(data, allow_nan=False)
    back = cmp.comparison_from_dict(json.loads(text))
    assert back.labels == with_oom.labels and back.baseline == with_oom.baseline
    assert [(r.metric, r.values, r.ratios) for r in back.rows] == [(r.metric, r.values, r.ratios)
                                                                  for r in with_oom.rows]
    assert [c.error for c in back.columns] == [c.error for c in with_oom.columns]
    assert back.columns[0].summary["mean_ttft_ms"] == with_oom.columns[0].summary["mean_ttft_ms"]
    assert data["baseline"] == "llama-3.1-8b @ h100-sxm"

    path = cmp.save_comparison(with_oom, tmp_path / "cmp.json")
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(text)


def test_csv_round_trip(with_oom, tmp_path):
    path = cmp.save_comparison(with_oom, tmp_path / "cmp.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == cmp.CSV_COLUMNS
    assert len(rows) == len(with_oom.columns) * len(with_oom.rows)
    for line in rows:
        i = with_oom.labels.index(line["column"])
        row = with_oom.row(line["metric"])
        expected_value, expected_ratio = row.values[i], row.ratios[i]
        assert (float(line["value"]) if line["value"] else None) == expected_value
        assert (float(line["ratio"]) if line["ratio"] else None) == expected_ratio
        assert line["error"] == (with_oom.columns[i].error or "")
    assert cmp.comparison_to_csv(with_oom) == path.read_text(encoding="utf-8")
    assert list(csv.reader(io.StringIO(cmp.comparison_to_csv(with_oom))))[0] == list(cmp.CSV_COLUMNS)


def test_save_text_and_bad_suffix(gpus, tmp_path):
    assert cmp.save_comparison(gpus, tmp_path / "cmp.txt").read_text(encoding="utf-8").startswith("metric")
    with pytest.raises(ConfigError, match=r"\.json, \.csv or \.txt"):
        cmp.save_comparison(gpus, tmp_path / "cmp.xlsx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.txt"]


def test_metrics_by_name_and_unknown():
    c = cmp.build_comparison([cmp.Column("a", "m", "h", {"num_preemptions": 4, "mean_ttft_ms": 10.0}),
                              cmp.Column("b", "m", "h2", {"num_preemptions": 2, "mean_ttft_ms": 30.0})],
                             metrics=("mean_ttft_ms", "num_preemptions"))
    assert c.row("num_preemptions").ratios == (1.0, 0.5)
    assert c.row("mean_ttft_ms").ratios == (1.0, 3.0)
    with pytest.raises(ConfigError, match="no_such_metric"):
        cmp.build_comparison([cmp.Column("a", "m", "h", {"mean_ttft_ms": 1.0})], metrics=("no_such_metric",))


def test_failed_first_column_uses_the_next_as_baseline():
    c = cmp.build_comparison([cmp.Column("x", "m", "h", None, "boom"),
                              cmp.Column("a", "m", "h", {"mean_ttft_ms": 10.0}),
                              cmp.Column("b", "m", "h", {"mean_ttft_ms": 20.0})], metrics=("mean_ttft_ms",))
    assert c.baseline == 1
    assert c.rows[0].ratios == (None, 1.0, 2.0)
    text = cmp.format_comparison(c)
    assert "x: boom" in text and "relative to a" in text


def test_unknown_preset_is_an_error():
    with pytest.raises(ConfigError):
        cmp.compare("no-such-model", "h100-sxm", workload=WORKLOAD)


def test_compare_cli_table_json_and_bad_output_name(tmp_path, capsys):
    import json

    import simllm.cli

    args = ["compare", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "a100-sxm-80gb", "--num-prompts", "50",
            "--format", "json"]
    assert simllm.cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data and "h100-sxm" in json.dumps(data) and "a100-sxm-80gb" in json.dumps(data)
    assert simllm.cli.main(args[:-2]) == 0
    assert "x" in capsys.readouterr().out  # ratio cells
    assert simllm.cli.main(args[:-2] + ["--output", str(tmp_path / "c.xlsx")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "c.xlsx" in err


@pytest.mark.heavy
def test_disaggregated_columns_follow_each_aggregated_one():
    """With ``disagg``, every model x hardware pair gets a P/D column right after its aggregated
    one, equal to simulate_disagg on that hardware; per-GPU rows count both pools; the JSON round
    trip keeps which columns are disaggregated."""
    w = simllm.Workload(num_prompts=64, max_concurrency=16, input_len=simllm.config.workload.fixed(2000),
                        output_len=simllm.config.workload.fixed(64))
    d = simllm.DisaggConfig(prefill_instances=2)
    c = cmp.compare("llama-3.1-8b", ["h100-sxm", "h200-sxm"], simllm.ServingConfig(), w,
                    metrics=("mean_ttft_ms", "output_throughput", "output_throughput_per_gpu"), disagg=d)
    assert list(c.labels) == ["llama-3.1-8b @ h100-sxm", "llama-3.1-8b @ h100-sxm P/D 2P1D",
                        "llama-3.1-8b @ h200-sxm", "llama-3.1-8b @ h200-sxm P/D 2P1D"]
    assert [col.disaggregated for col in c.columns] == [False, True, False, True]
    m = simllm.load_model("llama-3.1-8b")
    for i, hw in ((1, "h100-sxm"), (3, "h200-sxm")):
        direct = simllm.simulate_disagg(m, simllm.load_hardware(hw), simllm.ServingConfig(), w, d,
                                        keep_requests=False).summary
        ttft, total, per_gpu = (r.values[i] for r in c.rows)
        assert ttft == direct["mean_ttft_ms"] and total == direct["output_throughput"]
        assert per_gpu == pytest.approx(total / 3)
    back = cmp.comparison_from_dict(json.loads(json.dumps(cmp.comparison_to_dict(c))))
    assert [col.disaggregated for col in back.columns] == [False, True, False, True]
