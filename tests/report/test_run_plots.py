"""``simllm.report.plots`` for runs, load tests and comparisons: valid PNG files with labelled axes, the
accepted row keys, and the one-line error without matplotlib (those tests always run; the
drawing ones skip when matplotlib is absent)."""
import math
import sys

import pytest

import simllm
from simllm.analysis.compare import Column, build_comparison
from simllm.errors import ConfigError
from simllm.report import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def mpl():
    return pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def result():
    return simllm.simulate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), None,
                           simllm.Workload(num_prompts=150, request_rate=15.0), keep_requests=True)


def check_png(path):
    import matplotlib.image

    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height > 0 and width > 0


def capture_axes(monkeypatch):
    """Record the title and axis labels of every figure :func:`plots._save` writes, by file name."""
    seen = {}
    save = plots._save

    def spy(fig, path):
        ax = fig.axes[0]
        seen[path.name] = {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                           "ticks": [t.get_text() for t in ax.get_xticklabels()]}
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    return seen


def loadtest_rows():
    """vLLM summary keys; throughput saturates while latency climbs."""
    return [{"concurrency": c, "request_rate": "inf", "output_throughput": thr, "mean_tpot_ms": tpot,
             "p99_e2el_ms": p99, "mean_e2el_ms": p99 * 0.8}
            for c, thr, tpot, p99 in ((64, 5200.0, 12.0, 3000.0), (1, 150.0, 6.0, 900.0), (8, 1100.0, 7.0, 1100.0))]


def comparison():
    base = {"output_throughput": 2000.0, "tensor_parallel_size": 1, "data_parallel_size": 1, "mean_ttft_ms": 80.0,
            "mean_tpot_ms": 10.0}
    return build_comparison([
        Column("llama-3.1-8b @ h100-sxm", "llama-3.1-8b", "h100-sxm", base),
        Column("llama-3.1-8b @ a100-sxm-80gb", "llama-3.1-8b", "a100-sxm-80gb",
               dict(base, output_throughput=1000.0, tensor_parallel_size=2, mean_tpot_ms=20.0)),
        Column("llama-3.1-70b @ h100-sxm", "llama-3.1-70b", "h100-sxm", None, "simulated OOM: does not fit", True),
    ], metrics=("mean_ttft_ms",))


# ----------------------------------------------------------------------------- plot_run


def test_run_figures(result, tmp_path, mpl, monkeypatch):
    seen = capture_axes(monkeypatch)
    written = plots.plot_run(result, tmp_path / "plots")
    assert [p.name for p in written] == ["run_ttft_cdf.png", "run_tpot_cdf.png", "run_kv_cache.png",
                                         "run_throughput.png"]
    for path in written:
        check_png(path)
    assert seen["run_ttft_cdf.png"]["xlabel"] == "TTFT (ms)"
    assert seen["run_tpot_cdf.png"]["xlabel"] == "TPOT (ms)"
    assert seen["run_ttft_cdf.png"]["ylabel"] == "fraction of requests"
    assert seen["run_kv_cache.png"]["xlabel"] == "time (s)"
    assert seen["run_kv_cache.png"]["ylabel"] == "KV cache blocks in use (%)"
    assert seen["run_throughput.png"]["ylabel"] == "output throughput (tok/s)"
    assert result.summary["model"] in seen["run_ttft_cdf.png"]["title"]


def test_run_needs_requests(tmp_path, mpl):
    res = simllm.simulate(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), None,
                          simllm.Workload(num_prompts=20), keep_requests=False)
    with pytest.raises(ConfigError, match="keep_requests=True"):
        plots.plot_run(res, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_cdf_points_are_thinned():
    x, y = plots._cdf_points([math.nan] + list(range(10 * plots.CDF_POINTS)))
    assert len(x) <= plots.CDF_POINTS and y[-1] == 1.0 and x[-1] == 10 * plots.CDF_POINTS - 1


# ----------------------------------------------------------------------------- plot_loadtest


def test_loadtest_figures(tmp_path, mpl, monkeypatch):
    seen = capture_axes(monkeypatch)
    written = plots.plot_loadtest(loadtest_rows(), tmp_path)
    assert [p.name for p in written] == ["loadtest_throughput.png", "loadtest_latency.png", "loadtest_frontier.png"]
    for path in written:
        check_png(path)
    assert seen["loadtest_throughput.png"]["xlabel"] == "concurrency (clients)"
    assert seen["loadtest_throughput.png"]["ylabel"] == "output throughput (tok/s)"
    assert seen["loadtest_latency.png"]["ylabel"] == "E2E latency (ms)"
    assert seen["loadtest_frontier.png"]["xlabel"] == "output tokens/s per user (1000 / mean TPOT ms)"
    assert seen["loadtest_frontier.png"]["ylabel"] == "total output throughput (tok/s)"


def test_loadtest_open_loop_and_loadtest_row_keys(tmp_path, mpl, monkeypatch):
    seen = capture_axes(monkeypatch)
    rows = [{"concurrency": 0, "request_rate_rps": r, "output_throughput_tok_s": 100.0 * r, "mean_tpot_ms": 8.0 + r,
             "p99_latency_ms": 1000.0 + r, "avg_latency_ms": None} for r in (2.0, 4.0, 8.0)]
    assert len(plots.plot_loadtest(rows, tmp_path)) == 3
    assert seen["loadtest_throughput.png"]["xlabel"] == "request rate (req/s)"


def test_loadtest_accepts_loadtest_rows(tmp_path, mpl):
    loadtest = pytest.importorskip("simllm.analysis.loadtest")
    row_cls = getattr(loadtest, "LoadTestRow", None)
    if row_cls is None:
        pytest.skip("no LoadTestRow")
    rows = [row_cls(concurrency=c, output_throughput_tok_s=100.0 * c, mean_tpot_ms=5.0 + c, p99_latency_ms=50.0 * c)
            for c in (1, 2, 4)]
    assert len(plots.plot_loadtest(rows, tmp_path)) == 3


def test_loadtest_missing_key_and_no_rows(tmp_path, mpl):
    rows = loadtest_rows()
    del rows[1]["p99_e2el_ms"]
    with pytest.raises(ConfigError, match="p99_e2el_ms") as info:
        plots.plot_loadtest(rows, tmp_path)
    assert "\n" not in str(info.value)
    assert plots.plot_loadtest([], tmp_path / "none") == []
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- plot_compare


def test_compare_figures(tmp_path, mpl, monkeypatch):
    seen = capture_axes(monkeypatch)
    written = plots.plot_compare(comparison(), tmp_path)
    assert [p.name for p in written] == ["compare_throughput_per_gpu.png", "compare_ttft.png", "compare_tpot.png"]
    for path in written:
        check_png(path)
    assert seen["compare_throughput_per_gpu.png"]["ylabel"] == "output tok/s per GPU"
    assert seen["compare_ttft.png"]["ylabel"] == "mean TTFT (ms)"
    assert seen["compare_tpot.png"]["ylabel"] == "mean TPOT (ms)"
    assert seen["compare_ttft.png"]["ticks"] == list(comparison().labels)


# ----------------------------------------------------------------------------- without matplotlib


def test_missing_matplotlib_is_a_config_error(result, tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    for call in (lambda: plots.plot_run(result, tmp_path), lambda: plots.plot_loadtest(loadtest_rows(), tmp_path),
                 lambda: plots.plot_compare(comparison(), tmp_path)):
        with pytest.raises(ConfigError, match=r'pip install "simllm\[plot\]"') as info:
            call()
        assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_run_and_loadtest_cli_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import simllm.cli

    assert simllm.cli.main(["run", "--num-prompts", "60", "--max-concurrency", "8", "-q", "--plot", str(tmp_path / "r")]) == 0
    assert len(list((tmp_path / "r").glob("*.png"))) == 4
    assert simllm.cli.main(["loadtest", "--parallel", "1", "4", "--number", "4", "8", "-q",
                            "--plot", str(tmp_path / "l")]) == 0
    assert len(list((tmp_path / "l").glob("*.png"))) == 3
    capsys.readouterr()
