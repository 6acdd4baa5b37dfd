"""The accuracy tables (simllm.report.accuracy) and the README's and docs' copies of them
(docs/accuracy_tables.py): closed-form cells on made-up points, and that the committed tables are
what the shared data gives today."""
import importlib.util
import math

import pytest

from helpers import ROOT, SHARED_DATA, silicon_points
from simllm.calibration.validate import Point, capacity_points
from simllm.formats.common import Measurement
from simllm.report import accuracy as tables
from simllm.text import markdown_table


def script():
    """docs/accuracy_tables.py as a module."""
    spec = importlib.util.spec_from_file_location("accuracy_tables", ROOT / "docs" / "accuracy_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def point(source, model, hardware, ttft, tpot, mode="agg", below=False):
    """A predicted point of ``source`` whose TTFT and TPOT are off by ``ttft`` and ``tpot`` (fractions)."""
    m = Measurement(source=f"/data/{source}", line=2, model=model, hardware=hardware, backend="trtllm",
                    precision="", mode=mode, tp=1, pp=1, dp=1, input_len=100, output_len=10, concurrency=1,
                    request_rate=math.inf, num_prompts=0, ttft_ms=100.0, tpot_ms=10.0, itl_ms=10.0)
    bound = {"ttft": 200.0 if below else 1.0, "tpot": 1.0, "itl": 1.0, "e2el": 1.0}
    return Point(m, model, hardware, {"ttft": 100.0 * (1 + ttft), "tpot": 10.0 * (1 + tpot), "itl": 10.0,
                                      "e2el": 1.0}, "", bound)


def test_cells_are_median_abs_and_signed_errors_within_the_bound():
    pts = [point("nim_genai_perf.csv", "llama-3.1-8b", "h100-sxm", e, -e) for e in (0.1, -0.2, 0.3)]
    pts += [point("nim_genai_perf.csv", "llama-3.1-70b", "h100-sxm", 0.5, 0.5),
            point("nim_genai_perf.csv", "llama-3.1-70b", "h100-sxm", 9.0, 9.0, below=True)]  # left out
    text = tables.dataset_tables(pts)
    assert "| Hopper | trtllm | in | 3 | 0 | 20.0% (+10.0%) | 20.0% (-10.0%) |" in text
    assert "| Hopper | trtllm | out | 2 | 1 | 50.0% (+50.0%) | 50.0% (+50.0%) |" in text
    assert "| TTFT | ITL |" in text.splitlines()[2]  # the NIM table's names
    summary = tables.summary_table(pts)
    assert summary.splitlines()[2] == "| nim_genai_perf.csv | in | 3 | 0 | 20.0% (+10.0%) | 20.0% (-10.0%) |"


def test_families_samples_and_markdown():
    assert [tables.gpu_family(n) for n in ("h100-sxm", "gb200", "a100-sxm-80gb", "l40s", "my-gpu")] == [
        "Hopper", "Blackwell", "Ampere", "Ada", "my-gpu"]
    assert markdown_table(["a", "b|c"], [[1, "x|y"]]) == "| a | b\\|c |\n| --- | --- |\n| 1 | x\\|y |"
    fitted = point("silicon_sample.csv", "llama-3.1-70b", "h200-sxm", 0, 0)
    from simllm.calibration.validate import in_sample
    assert in_sample(fitted) and not in_sample(point("silicon_sample.csv", "deepseek-v3", "h200-sxm", 0, 0))
    assert not in_sample(point("silicon_sample.csv", "llama-3.1-70b", "h200-sxm", 0, 0, mode="disagg"))
    assert not in_sample(point("trtllm_static_batch.csv", "llama-3.1-8b", "h100-sxm", 0, 0))


def test_band_coverage_of_rows_the_record_does_not_hold():
    """A record whose six points ran 0.8-1.4x their measured values gives an 80% band of
    [v / 1.325, v / 0.85] (its 10% and 90% quantiles of log(predicted / measured), linear between
    points) around a prediction v: a NIM row predicted exactly is in it, one predicted at twice the
    measured value is not; TPOT likewise. The table says so per dataset."""
    from simllm.calibration.record import model_family, record_from_dict

    def rec_point(ratio):
        return {"model": "llama-3.1-8b", "family": model_family("llama-3.1-8b"), "gpu": "h100-sxm",
                "framework": "trtllm", "precision": "native", "tp": 1, "dp": 1, "isl": 100, "osl": 10,
                "concurrency": 1, "closed_loop": True, "below_bound": False, "measured_ttft_ms": 100.0,
                "predicted_ttft_ms": 100.0 * ratio, "measured_tpot_ms": 10.0, "predicted_tpot_ms": 10.0 * ratio,
                "measured_output_throughput": 5.0, "predicted_output_throughput": 5.0 * ratio}

    rec = record_from_dict({"provenance": {"sources": [{"file": "silicon_sample.csv"}]},
                            "points": [rec_point(r) for r in (0.8, 0.9, 1.0, 1.1, 1.25, 1.4)]})
    exact = point("nim_genai_perf.csv", "llama-3.1-8b", "h100-sxm", 0.0, 0.0)
    twice = point("nim_genai_perf.csv", "llama-3.1-8b", "h100-sxm", 1.0, 1.0)
    assert tables._covered(exact, "ttft", rec) and not tables._covered(twice, "ttft", rec)
    assert tables._covered(exact, "tpot", rec) and not tables._covered(twice, "tpot", rec)
    text = tables.band_table([exact, twice], rec)
    assert text.splitlines()[2] == "| nim_genai_perf.csv | 2 | not in the record | 50% | 50% |"


def test_the_readme_block_is_replaced_whole():
    s = script()
    text = f"a\n{s.BEGIN}\nold\n{s.END}\nb\n"
    assert s.with_block(text, f"{s.BEGIN}\nnew\n{s.END}") == f"a\n{s.BEGIN}\nnew\n{s.END}\nb\n"


@pytest.mark.heavy  # every row of the three datasets, simulated
@pytest.mark.slow
@pytest.mark.skipif(not all((SHARED_DATA / n).is_file() for n in ("silicon_sample.csv", "trtllm_static_batch.csv",
                                                                  "nim_genai_perf.csv")),
                    reason="the shared data is absent")
def test_the_committed_tables_are_what_the_data_gives(tmp_path_factory):
    """README's Accuracy table and docs/accuracy-tables.md are what docs/accuracy_tables.py
    computes today (the silicon points shared with the accuracy tests): a change that moves a
    prediction must regenerate them."""
    s = script()
    _, silicon = silicon_points(tmp_path_factory)
    points = silicon + s.predict(SHARED_DATA / "trtllm_static_batch.csv") + s.predict(SHARED_DATA / "nim_genai_perf.csv")
    stale = [str(path) for path, _ in s.stale(points, capacity_points(points))]
    assert not stale, f"stale: {stale}; regenerate with python docs/accuracy_tables.py"


def test_capacity_cells_are_median_errors_and_the_share_within_8_percent():
    results = [(point("nim_genai_perf.csv", "llama-3.1-8b", "h100-sxm", 0, 0), 0.0, e) for e in (0.05, -0.1, 0.2)]
    results.append((point("trtllm_static_batch.csv", "llama-3.1-8b", "a100-sxm-80gb", 0, 0, mode="static"), 0.0, 0.02))
    lines = tables.capacity_table(results).splitlines()
    assert lines[2] == "| nim_genai_perf.csv | Hopper | trtllm | 3 | 10.0% (+5.0%) | 33% |"
    assert lines[3] == "| trtllm_static_batch.csv | Ampere | trtllm | 1 | 2.0% (+2.0%) | 100% |"
