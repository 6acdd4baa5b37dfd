"""``simllm.report.html`` without a browser: what each report holds (its tables and the figures'
data, read back from the page), escaping of names that could end the ``<script>`` or inject
markup, the queue series and histograms against closed forms, the one-line errors (no plotly, a
name that is not .html), and ``--report`` on the commands. The pages are opened in chromium by
test_html_browser.py."""
import dataclasses
import html as html_mod
import importlib.util
import json
import math
import re
import sys

import numpy as np
import pytest

import simllm
import simllm.cli
from simllm.analysis.compare import Column, build_comparison
from simllm.analysis.loadtest import LoadPoint, LoadTestResult, LoadTestRow, recommend
from simllm.calibration.bands import Band
from simllm.calibration.validate import Point, error_summary
from simllm.errors import ConfigError
from simllm.formats.measurements import Measurement
from simllm.report import html

#: The tests that render a page (plotly.js inlined) need the report extra; the others always run.
needs_plotly = pytest.mark.skipif(importlib.util.find_spec("plotly") is None,
                                  reason="the report extra (plotly) is not installed")

EVIL = '</script><script>alert("x")</script><!-- & \u2028'
FIGURES = re.compile(r'<script id="simllm-figures" type="application/json">(.*?)</script>', re.S)


def figures(page):
    """The figures of a page, as the page's script reads them."""
    return json.loads(FIGURES.search(page).group(1))


def table_rows(page, table_id):
    """The cells of the table ``table_id`` (text, unescaped), one list per body row, and which rows
    are highlighted."""
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = re.findall(r"<tr( class=\"hl\")?>(.*?)</tr>", body, re.S)
    return ([[html_mod.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for _, r in rows],
            [i for i, (hl, _) in enumerate(rows) if hl])


def test_script_json_cannot_end_the_script_and_reads_back_the_same():
    obj = {"name": EVIL, "values": [1.5, math.nan, math.inf]}
    text = html.script_json(obj)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": EVIL, "values": [1.5, None, None]}


@needs_plotly
def test_page_escapes_names_everywhere():
    """A configuration named to break out of the page appears only escaped: the page keeps its three
    script elements, the name's markup is never live, and the figure data gives the name back (as
    escaped hover text, which plotly shows as the original characters)."""
    rows = [{"config": EVIL, "mean_tpot_ms": 10.0, "output_throughput": 1000.0, "gpus": 1},
            {"config": "b", "mean_tpot_ms": 20.0, "output_throughput": 1500.0, "gpus": 1}]
    page = html.frontier_report(rows, subtitle=EVIL)
    assert page.count("</script>") == 3 and page.count("<script") == 3
    assert "<!--" not in page.split("<script")[0]
    assert '<script>alert("x")' not in page
    cells, _ = table_rows(page, "headline")
    assert EVIL in [c[2] for c in cells]
    hovers = [h for f in figures(page) for t in f["data"] for h in t.get("hovertext", [])]
    assert any(html_mod.escape(EVIL) in h for h in hovers)


@needs_plotly
def test_page_is_self_contained():
    """plotly.js is inlined (no src, no link, no import of anything) and the figures are drawn by
    the page's own script."""
    page = html.frontier_report([{"config": "a", "mean_tpot_ms": 10.0, "output_throughput": 1000.0, "gpus": 1}])
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page, re.I)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.min.js is a few MB
    import plotly

    js = plotly.offline.get_plotlyjs()
    assert js[:2000] in page and "Licensed under the MIT license" in page


@needs_plotly
def test_inlined_javascript_cannot_end_its_script(monkeypatch):
    """A ``</script`` or ``<!--`` in the library's text (in a string, say) is written with an
    escaped ``<`` that JavaScript reads back as the same text."""
    import plotly.offline

    monkeypatch.setattr(plotly.offline, "get_plotlyjs", lambda: 'var a = "</SCRIPT><!--", b = /<\\/script>/;')
    assert html.plotly_js() == 'var a = "\\x3C/SCRIPT>\\x3C!--", b = /<\\/script>/;'


def test_missing_plotly_is_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    with pytest.raises(ConfigError, match=r'pip install "simllm\[report\]"'):
        html.plotly_js()
    out = tmp_path / "r.html"
    assert simllm.cli.main(["run", "--num-prompts", "5", "--report", str(out)]) == 2  # before simulating
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--report" in err and 'simllm[report]' in err and not out.exists()


def test_report_name_must_be_html(tmp_path, capsys):
    assert simllm.cli.main(["frontier", str(tmp_path / "rows.csv"), "--report", str(tmp_path / "r.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--report" in err and ".html" in err


def test_queue_depth_is_the_time_average_of_waiting_requests():
    """A waits over [1, 3) s, B over [2, 2.5) s, C never waits: per 1-s window 0, 1, 1.5, 0; per
    0.5-s window from 0.75 s: A half of the first, then A whole, A and half of B twice, half of A, 0."""
    req = {"first_scheduled_s": np.array([3.0, 2.5, 0.5]), "queue_s": np.array([2.0, 0.5, 0.0])}
    assert html.queue_depth_series(req, np.arange(4.0), 1.0).tolist() == [0.0, 1.0, 1.5, 0.0]
    got = html.queue_depth_series(req, 0.75 + 0.5 * np.arange(6), 0.5)
    np.testing.assert_allclose(got, [0.5, 1.0, 1.5, 1.5, 0.5, 0.0])


def test_histogram_shares_and_bins():
    values = np.r_[np.full(30, 1.0), np.full(10, 100.0), np.nan]
    trace, log, counts = html.histogram_trace(values, "TTFT")
    assert log and counts.sum() == 40 and counts[0] == 30 and counts[-1] == 10
    assert math.isclose(sum(trace["y"][:-1]), 1.0) and trace["x"][0] == 1.0 and math.isclose(trace["x"][-1], 100.0)
    trace, log, counts = html.histogram_trace(np.linspace(10, 20, 101), "TPOT", bins=10)
    assert not log and counts.tolist() == np.histogram(np.linspace(10, 20, 101), np.linspace(10, 20, 11))[0].tolist()
    assert html.histogram_trace([math.nan], "x") == (None, False, None)


def loadtest_result():
    thr = {1: 150.0, 8: 1100.0, 32: 3900.0, 64: 4000.0}
    points = [LoadPoint(concurrency=c, num_prompts=10 * c) for c in thr]
    rows = [LoadTestRow(concurrency=c, num_prompts=10 * c, output_throughput_tok_s=t, mean_tpot_ms=5.0 + c / 4,
                        avg_latency_ms=500.0 + 10 * c, p99_latency_ms=800.0 + 20 * c, error_rate=0.0)
            for c, t in thr.items()]
    knee, reason = recommend(rows)
    return LoadTestResult(tuple(points), tuple(rows), knee, reason, title="llama on h100")


@needs_plotly
def test_loadtest_marks_the_knee():
    result = loadtest_result()
    assert result.recommended == 2  # 3,900 tok/s at 32 clients, 4,000 at 64: +3%
    bands = [({"mean_ttft_ms": band("ttft", 50.0, 40.0, 70.0)}, ()), ({}, ()), ({}, ()), ({}, ("far out",))]
    page = html.loadtest_report(result, bands)
    cells, _ = table_rows(page, "bands")
    assert cells == [["concurrency 1", "40.00–70.00", "-", "-", "-", "-"]]
    assert "concurrency 64: outside the calibrated domain, bands less reliable: far out" in page
    page = html.loadtest_report(result, [({"mean_ttft_ms": band("ttft", 50.0, 40.0, 70.0)}, ("far out",))] * 4)
    assert page.count("far out") == 1 and "all: outside the calibrated domain" in page  # said once for all
    cells, highlighted = table_rows(page, "headline")
    assert highlighted == [2] and cells[2][0] == "concurrency 32"
    assert "recommended: " in page
    figs = figures(page)
    assert len(figs) == 3
    knees = [t for f in figs for t in f["data"] if t["name"] == "knee (recommended)"]
    assert [(k["x"][0], k["y"][0]) for k in knees] == [(32.0, 3900.0), (32.0, 1440.0), (1000 / 13.0, 3900.0)]
    assert figs[0]["layout"]["xaxis"]["type"] == "log"  # 1..64 clients


def test_frontier_hover_shows_each_points_configuration():
    rows = [{"serving.max_num_seqs": n, "tp": tp, "mean_tpot_ms": tpot, "output_throughput": thr, "gpus": tp,
             "meets_slo": ok}
            for n, tp, tpot, thr, ok in ((64, 1, 8.0, 2000.0, True), (256, 1, 15.0, 4000.0, True),
                                         (128, 2, 12.0, 3000.0, False), (32, 1, 30.0, 1000.0, True))]
    data, _ = html.frontier_figure(rows, chosen=1)
    by_name = {t["name"]: t for t in data}
    assert set(by_name) == {"meets the SLOs", "fails the SLOs", "Pareto frontier (2)", "chosen"}
    assert by_name["Pareto frontier (2)"]["customdata"] == [1, 0]  # along x: 1000/15, then 1000/8
    for t in data:
        for i, text in zip(t["customdata"], t["hovertext"]):
            assert f"max_num_seqs={rows[i]['serving.max_num_seqs']}" in text and f"tp={rows[i]['tp']}" in text
            assert f"GPUs: {rows[i]['tp']}" in text and "output tokens/s per GPU: " in text


def band(metric, value, lo, hi):
    return Band(metric, value, lo, hi, 0.9, 12)


@needs_plotly
def test_compare_table_ratios_and_band_error_bars():
    s = {"output_throughput": 2000.0, "tensor_parallel_size": 1, "data_parallel_size": 1, "mean_ttft_ms": 80.0,
         "mean_tpot_ms": 10.0}
    cols = [Column("h100", "m", "h100", dict(s)),
            Column("h200", "m", "h200", {**s, "output_throughput": 3000.0, "tensor_parallel_size": 2}),
            Column("l4", "m", "l4", error="does not fit", oom=True)]
    comparison = build_comparison(cols, ("output_throughput", "mean_ttft_ms"))
    bands = [({"mean_ttft_ms": band("ttft", 80.0, 60.0, 120.0), "output_throughput": band("thr", 2000, 1800, 2400)},
              ()), ({}, ("isl 9,000 above the calibrated 8,192",)), ({}, ())]
    page = html.compare_report(comparison, bands)
    cells, _ = table_rows(page, "headline")
    assert cells[0][1:] == ["2,000", "3,000 (x1.50)", "OOM"]
    assert "isl 9,000 above the calibrated 8,192" in page
    figs = figures(page)
    per_gpu, ttft = figs[0]["data"][0], figs[1]["data"][0]
    assert per_gpu["y"] == [2000.0, 1500.0, None]
    # the per-GPU bar carries the output-throughput band scaled to it; TTFT's is the band itself
    assert per_gpu["error_y"]["arrayminus"][0] == pytest.approx(200.0) and per_gpu["error_y"]["array"][0] == 400.0
    assert ttft["error_y"]["arrayminus"][:2] == [20.0, 0.0] and ttft["error_y"]["array"][:2] == [40.0, 0.0]


def measurement(where_line, model, hardware, ttft, tpot):
    return Measurement(source="bench.csv", line=where_line, model=model, hardware=hardware, backend="vllm",
                       precision="", mode="agg", tp=1, pp=1, dp=1, input_len=1024, output_len=128, concurrency=8,
                       request_rate=math.inf, num_prompts=64, ttft_ms=ttft, tpot_ms=tpot)


@needs_plotly
def test_validate_scatter_per_metric_with_sources_on_hover():
    points = [Point(measurement(2, "llama", "h100", 100.0, 10.0), "llama", "h100", {"ttft": 110.0, "tpot": 9.0,
                                                                                    "itl": 9.0, "e2el": 1000.0}),
              Point(measurement(3, "llama", "h200", 50.0, 5.0), "llama", "h200", {"ttft": 40.0, "tpot": 5.5,
                                                                                  "itl": 5.5, "e2el": 700.0}),
              Point(measurement(4, "mystery", "", 10.0, 1.0), "", "", None, "no model preset")]
    summary = error_summary(points)
    page = html.validate_report(points, summary)
    cells, _ = table_rows(page, "headline")
    assert [c[:3] for c in cells] == [["TTFT", "2", "15.0%"], ["TPOT", "2", "10.0%"]]
    assert "no model preset" in page and "bench.csv:4" in page
    figs = figures(page)
    assert len(figs) == 2  # ITL and E2E latency were not measured
    assert figs[0]["layout"]["title"]["text"] == "TTFT: 2 points, median |error| 15.0%"
    scatter = {t["name"]: t for t in figs[0]["data"] if t["mode"] == "markers"}
    assert set(scatter) == {"h100", "h200"}
    assert "bench.csv:2" in scatter["h100"]["hovertext"][0] and "+10.0%" in scatter["h100"]["hovertext"][0]
    assert "-20.0%" in scatter["h200"]["hovertext"][0]


@pytest.fixture(scope="module")
def small_run():
    return simllm.simulate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), None,
                           simllm.Workload(num_prompts=20, request_rate=10.0), keep_requests=True)


@needs_plotly
def test_run_report_agrees_with_the_summary(small_run):
    s = small_run.summary
    bands = {"mean_ttft_ms": band("ttft", s["mean_ttft_ms"], 1.0, 2.0)}
    page = html.run_report(small_run, bands=bands, reasons=("model family not calibrated",))
    cells, _ = table_rows(page, "headline")
    by_name = {c[0]: c[1:] for c in cells}
    assert by_name["Successful requests"] == [f"{s['completed']:,}", ""]
    assert by_name["Mean TTFT (ms)"] == [f"{s['mean_ttft_ms']:.2f}", "1.00–2.00"]
    assert by_name["P99 ITL (ms)"][0] == f"{s['p99_itl_ms']:.2f}"
    assert "outside the calibrated domain" in page and "model family not calibrated" in page
    figs = figures(page)
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert titles[:4] == [f"TTFT distribution ({s['completed']} values)", f"TPOT distribution ({s['completed']} values)",
                          f"ITL distribution ({int(small_run.itl_histogram.sum()):,} tokens)",
                          f"E2E latency distribution ({s['completed']} values)"]
    assert titles[4:] == ["Output throughput", "Batch size", "KV cache use", "Queue"]
    ttft = figs[0]["data"]
    assert math.isclose(sum(ttft[0]["y"][:-1]), 1.0)
    assert [t["x"][0] for t in ttft[1:]] == [s["median_ttft_ms"], s["p99_ttft_ms"]]
    ts = small_run.timeseries
    assert figs[4]["data"][0]["y"] == pytest.approx(ts["output_throughput"].tolist())
    # the queue's mean over the run equals the mean queueing time x requests / span (Little's law, exactly)
    queue = np.array(figs[7]["data"][0]["y"])
    waited = np.nansum(small_run.requests["queue_s"])
    assert queue.sum() * ts["window_s"] == pytest.approx(waited)


@needs_plotly
def test_run_cli_writes_the_report(tmp_path, capsys):
    out = tmp_path / "sub" / "run.html"
    assert simllm.cli.main(["run", "--num-prompts", "20", "--request-rate", "10", "-q", "--report", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<h1>simllm run</h1>" in page and len(figures(page)) == 8
    assert [p.name for p in out.parent.iterdir()] == ["run.html"]  # no temporary file left


@needs_plotly
def test_frontier_cli_writes_the_report(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("serving.max_num_seqs,mean_tpot_ms,output_throughput,gpus\n64,8,2000,1\n256,15,4000,1\n"
                    "128,20,1500,1\n", encoding="utf-8")
    out = tmp_path / "frontier.html"
    assert simllm.cli.main(["frontier", str(rows), "--report", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    cells, _ = table_rows(page, "headline")
    assert [c[2] for c in cells] == ["max_num_seqs=256", "max_num_seqs=64"]
    assert str(rows) in page


@needs_plotly
def test_run_report_of_a_disaggregated_run_names_its_pools(small_run):
    """The pools and the KV link of a disaggregated summary (keys as simulate_disagg writes them),
    grafted onto a small run so that no rare kernel compiles."""
    pool = {"instances": 2, "hardware": "h100-sxm", "tensor_parallel_size": 4, "data_parallel_size": 1,
            "num_gpus": 8, "gpu_busy_fraction": 0.5, "compute_utilization": 0.25, "kv_cache_usage_peak": 0.125,
            "mean_batch_size": 3.0}
    kv = {"link": "nvlink", "bandwidth_gbps": 450.0, "latency_us": 19.0, "first_token": "decode",
          "mean_transfer_ms": 1.5, "p99_transfer_ms": 2.25, "link_utilization": 0.01}
    summary = {**small_run.summary, "prefill_pool": pool, "decode_pool": {**pool, "instances": 1, "num_gpus": 4},
               "kv_transfer": kv}
    page = html.run_report(dataclasses.replace(small_run, summary=summary))
    cells, _ = table_rows(page, "engine")
    rows = {c[0]: c[1] for c in cells}
    assert rows["Prefill pool"] == "2 x h100-sxm (TP=4, DP=1), 8 GPUs"
    assert rows["Decode pool"] == "1 x h100-sxm (TP=4, DP=1), 4 GPUs"
    assert rows["KV transfer mean / P99 (ms)"] == "1.50 / 2.25, link 1.0% busy"


@needs_plotly
def test_optimize_report_without_an_answer(tmp_path, capsys):
    """No configuration meets the SLO: the command exits 1 and its report says so, every
    configuration a failing point of the frontier figures, each with its flags on hover."""
    out = tmp_path / "optimize.html"
    argv = ["optimize", "--num-prompts", "20", "--request-rate", "10", "--slo", "ttft_p99<=0.001",
            "--over", "max_num_seqs=8,64", "-q", "--report", str(out)]
    assert simllm.cli.main(argv) == 1
    page = out.read_text(encoding="utf-8")
    assert "No configuration meets the SLOs." in page and "2 fails the SLOs" in page
    figs = figures(page)
    assert len(figs) == 2
    for f in figs:
        failing = [t for t in f["data"] if t["name"] == "fails the SLOs"]
        assert len(failing) == 1 and len(failing[0]["x"]) == 2
        assert all("simllm run --hardware h100-sxm --max-num-seqs " in h and "breaks ttft_p99" in h
                   for h in failing[0]["hovertext"])


@needs_plotly
def test_itl_histogram_is_merged_into_fewer_bins(small_run):
    """The run's fine ITL bins are summed in neighbouring groups: the same tokens, no more than
    ITL_BINS bins, edges taken from the run's own."""
    fine = np.zeros(1000)
    fine[[10, 11, 500, 998]] = [3, 4, 5, 6]
    edges_s = np.geomspace(1e-4, 1.0, 1001)
    run = dataclasses.replace(small_run, itl_histogram=fine, itl_bin_edges_s=edges_s)
    itl = next(f for f in figures(html.run_report(run)) if f["layout"]["title"]["text"].startswith("ITL"))
    step = itl["data"][0]
    assert itl["layout"]["title"]["text"] == "ITL distribution (18 tokens)"
    assert len(step["x"]) - 1 <= html.ITL_BINS and step["x"][0] == pytest.approx(edges_s[10] * 1e3)
    assert step["x"][-1] == pytest.approx(edges_s[999] * 1e3)
    assert set(step["x"]) <= set((edges_s * 1e3).tolist())
    assert [round(y * 18) for y in step["y"][:-1] if y] == [7, 5, 6]
