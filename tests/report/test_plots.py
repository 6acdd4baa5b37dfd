"""``simllm.report.plots``: the validation scatter PNGs (one per metric with data), skipped and missing
values, and the one-line error when matplotlib is not installed. Tests that draw skip when
matplotlib is absent; the missing-matplotlib test always runs."""
import math
import sys

import pytest

from simllm.calibration.validate import Point
from simllm.errors import ConfigError
from simllm.formats.measurements import Measurement
from simllm.report import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAN = math.nan


@pytest.fixture
def mpl():
    return pytest.importorskip("matplotlib")


def measurement(model, hardware, ttft, tpot, itl=NAN, e2el=NAN):
    return Measurement(source="bench.csv", line=2, model=model, hardware=hardware, backend="vllm", precision="",
                       mode="agg", tp=1, pp=1, dp=1, input_len=1024, output_len=128, concurrency=8,
                       request_rate=math.inf, num_prompts=64, ttft_ms=ttft, tpot_ms=tpot, itl_ms=itl,
                       e2el_ms=e2el)


def point(model, hardware, measured, predicted):
    """A Point whose measured and predicted values are given as (ttft, tpot, itl, e2el)."""
    m = measurement(model, hardware, *measured)
    if predicted is not None:
        predicted = dict(zip(("ttft", "tpot", "itl", "e2el"), predicted, strict=True))
    return Point(m, model, hardware, predicted, "" if predicted else "no model preset")


def sample_points():
    """TTFT, TPOT and ITL have data, E2E latency is never measured; one point is skipped."""
    return [
        point("llama-3.1-8b", "h100_sxm", (120.0, 10.0, 9.5, NAN), (130.0, 10.5, 9.0, 1500.0)),
        point("llama-3.1-8b", "h100_sxm", (450.0, 14.0, NAN, NAN), (400.0, 15.0, 14.0, 2200.0)),
        point("llama-3.1-70b", "a100_sxm", (900.0, 40.0, 38.0, NAN), (1000.0, 36.0, 35.0, 6000.0)),
        point("llama-3.1-70b", "a100_sxm", (2000.0, 55.0, 50.0, NAN), (2100.0, NAN, 60.0, 9000.0)),
        point("mystery-model", "h100_sxm", (300.0, 12.0, 11.0, NAN), None),
    ]


def check_png(path, mpl):
    import matplotlib.image

    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert height > 0 and width > 0


def test_one_png_per_metric_with_data(tmp_path, mpl):
    written = plots.plot_validation(sample_points(), tmp_path)
    assert written == [tmp_path / f"validation_{m}.png" for m in ("ttft", "tpot", "itl")]
    for path in written:
        check_png(path, mpl)
    assert not (tmp_path / "validation_e2el.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)


def test_creates_the_directory(tmp_path, mpl):
    target = tmp_path / "a" / "b"
    written = plots.plot_validation(sample_points(), str(target))
    assert target.is_dir() and len(written) == 3


def test_only_skipped_points_write_nothing(tmp_path, mpl):
    skipped = [point("x", "h100_sxm", (100.0, 10.0, NAN, NAN), None) for _ in range(3)]
    assert plots.plot_validation(skipped, tmp_path / "out") == []
    assert plots.plot_validation([], tmp_path / "out") == []
    assert not (tmp_path / "out").exists()


def test_missing_zero_and_infinite_values_are_not_drawn(tmp_path, mpl, monkeypatch):
    points = [
        point("m", "h100_sxm", (0.0, 10.0, NAN, NAN), (100.0, 11.0, 5.0, 50.0)),   # ttft measured 0
        point("m", "h100_sxm", (100.0, 10.0, NAN, NAN), (math.inf, 0.0, 5.0, 50.0)),  # bad predictions
        point("m", "h100_sxm", (200.0, 20.0, NAN, NAN), (220.0, 18.0, 5.0, 50.0)),
    ]
    titles = capture_titles(monkeypatch)
    written = plots.plot_validation(points, tmp_path)
    assert [p.name for p in written] == ["validation_ttft.png", "validation_tpot.png"]
    assert titles["validation_ttft.png"]["title"].startswith("TTFT: 1 point,")
    assert titles["validation_tpot.png"]["title"].startswith("TPOT: 2 points,")


def capture_titles(monkeypatch):
    """Record the texts of every figure :func:`plots._save` writes, by file name."""
    seen = {}
    save = plots._save

    def spy(fig, path):
        ax = fig.axes[0]
        legend = ax.get_legend()
        seen[path.name] = {
            "title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "scales": (ax.get_xscale(), ax.get_yscale()),
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        }
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    return seen


def test_labels_title_and_legend(tmp_path, mpl, monkeypatch):
    seen = capture_titles(monkeypatch)
    plots.plot_validation(sample_points(), tmp_path)
    ttft = seen["validation_ttft.png"]
    # TTFT errors: +8.3%, -11.1%, +11.1%, +5%: median 9.7%.
    assert ttft["title"] == "TTFT: 4 points, median |error| 9.7%"
    assert (ttft["xlabel"], ttft["ylabel"]) == ("measured TTFT (ms)", "predicted TTFT (ms)")
    assert ttft["scales"] == ("log", "log")
    assert ttft["legend"][:4] == ["a100_sxm", "h100_sxm", "llama-3.1-70b", "llama-3.1-8b"]
    assert {"±10%", "±20%", "y = x"} <= set(ttft["legend"])
    assert "mystery-model" not in ttft["legend"]  # skipped
    assert seen["validation_tpot.png"]["title"].startswith("TPOT: 3 points,")
    assert seen["validation_itl.png"]["xlabel"] == "measured ITL (ms)"


def test_many_models_share_one_marker(tmp_path, mpl, monkeypatch):
    seen = capture_titles(monkeypatch)
    many = [point(f"model-{i}", f"gpu-{i % 3}", (100.0 + i, 10.0, NAN, NAN), (105.0 + i, 9.0, NAN, NAN))
            for i in range(len(plots.MARKERS) + 2)]
    written = plots.plot_validation(many, tmp_path)
    assert [p.name for p in written] == ["validation_ttft.png", "validation_tpot.png"]
    legend = seen["validation_ttft.png"]["legend"]
    assert legend[:3] == ["gpu-0", "gpu-1", "gpu-2"]
    assert not any(label.startswith("model-") for label in legend)


def test_e2e_label(tmp_path, mpl, monkeypatch):
    seen = capture_titles(monkeypatch)
    p = point("m", "h100_sxm", (NAN, NAN, NAN, 5000.0), (100.0, 10.0, 9.0, 5500.0))
    assert [w.name for w in plots.plot_validation([p], tmp_path)] == ["validation_e2el.png"]
    assert seen["validation_e2el.png"]["xlabel"] == "measured E2E latency (ms)"


def test_no_pyplot_figures_left_open(tmp_path, mpl):
    plots.plot_validation(sample_points(), tmp_path)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        assert pyplot.get_fignums() == []


def test_missing_matplotlib_is_a_config_error(tmp_path, monkeypatch):
    # A None entry in sys.modules makes the import raise ImportError, installed or not.
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r'pip install "simllm\[plot\]"') as info:
        plots.plot_validation(sample_points(), tmp_path)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []
