"""Every ``--report`` kind opened in a real headless browser (Debian's chromium driven by
playwright): the page loads with no console error and no request beyond its own file, every plot
renders (an SVG with drawn traces), hovering a point of a Pareto frontier shows that point's
configuration, and a full-page PNG of each kind is kept in ``$SIMLLM_ARTIFACTS`` (default: a
temporary folder). The reports come from the commands themselves on small runs of the default
model. Marked heavy (and slow); skipped, with the reason, without chromium or playwright (failed
instead when SIMLLM_REQUIRE_BROWSER is set, as CI does)."""
import csv
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

import simllm.cli
from helpers import SHARED_DATA

pytestmark = [pytest.mark.heavy, pytest.mark.slow]  # slow: not again in the NUMBA_DISABLE_JIT pass

CHROMIUM = os.environ.get("SIMLLM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SILICON = SHARED_DATA / "silicon_sample.csv"
SMALL = ["--num-prompts", "20", "--request-rate", "10"]

#: The point of trace ``curve`` of plot ``id`` farthest from any point of another configuration
#: (``customdata`` is the row), so that hovering it cannot pick a neighbour: its index and its
#: position in the viewport (the plot scrolled into view first).
POINT_JS = """([id, curve]) => {
  const gd = document.getElementById(id);
  gd.scrollIntoView({block: "center"});
  const fl = gd._fullLayout, box = gd.getBoundingClientRect();
  const at = (t, i) => [box.left + fl._size.l + fl.xaxis.l2p(fl.xaxis.c2l(t.x[i])),
                        box.top + fl._size.t + fl.yaxis.l2p(fl.yaxis.c2l(t.y[i]))];
  const others = [];
  gd._fullData.forEach(t => (t.customdata || []).forEach((row, i) => others.push([row, at(t, i)])));
  const tr = gd._fullData[curve];
  let best = [-1, 0];
  tr.x.forEach((_, i) => {
    const [x, y] = at(tr, i);
    const gap = Math.min(...others.filter(o => o[0] !== tr.customdata[i])
                                  .map(o => Math.hypot(o[1][0] - x, o[1][1] - y)), 1e9);
    if (gap > best[1]) best = [i, gap];
  });
  return [best[0], ...at(tr, best[0])];
}"""

#: Per plot: its id, the number of traces drawn as SVG paths or points, and its frontier trace
#: (index and name) if it has one.
PLOTS_JS = """() => Array.from(document.querySelectorAll(".plot")).map(gd => {
  const drawn = gd.querySelectorAll(".main-svg .scatterlayer .trace path, .main-svg .barlayer .trace path").length;
  const frontier = (gd._fullData || []).findIndex(t => (t.name || "").startsWith("Pareto frontier")
                                                     || (t.name || "").startsWith("aggregated"));
  return {id: gd.id, svg: gd.querySelectorAll("svg.main-svg").length, drawn: drawn, frontier: frontier,
          traces: (gd._fullData || []).length};
})"""


def artifacts():
    folder = Path(os.environ.get("SIMLLM_ARTIFACTS") or tempfile.mkdtemp(prefix="simllm-report-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def missing(reason):
    """Skip, or fail where the browser is required (CI sets SIMLLM_REQUIRE_BROWSER=1)."""
    if os.environ.get("SIMLLM_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright import sync_api
    except ImportError:
        missing("playwright is not installed (pip install playwright)")
    if not os.path.isfile(CHROMIUM):
        missing(f"chromium is not installed ({CHROMIUM}; apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Each command's report, written by the command: {kind: (path, text in a frontier's hover)}."""
    pytest.importorskip("plotly", reason="the report extra (plotly) is not installed")
    d = tmp_path_factory.mktemp("reports")
    spec = d / "sweep.yaml"
    spec.write_text(textwrap.dedent("""\
        base:
          workload: {num_prompts: 20, request_rate: 10}
        grid:
          serving.max_num_seqs: [2, 8, 64]
        seeds: [0, 1]
        """), encoding="utf-8")
    commands = {
        "run": (["run", *SMALL, "-q"], None),
        "loadtest": (["loadtest", "--request-rate", "2", "8", "32", "--number", "20", "-q"], None),
        "compare": (["compare", "--hardware", "h100-sxm", "h200-sxm", "--model", "llama-3.1-8b", *SMALL], None),
        "sweep": (["sweep", str(spec), "-q", "-o", str(d / "sweep.csv")], "max_num_seqs="),
        "optimize": (["optimize", *SMALL, "--slo", "ttft_p99<=5000", "--over", "max_num_seqs=2,8,64", "-q"],
                     "simllm run --hardware h100-sxm"),
    }
    out = {}
    for kind, (argv, hover) in commands.items():
        path = d / f"{kind}.html"
        code = simllm.cli.main([*argv, "--report", str(path)])
        assert code == 0, kind
        out[kind] = (path, hover)
    path = d / "frontier.html"
    assert simllm.cli.main(["frontier", str(d / "sweep.csv"), "--report", str(path)]) == 0
    out["frontier"] = (path, "max_num_seqs=")
    if SILICON.is_file():  # a small slice of the measured data: dense Llama-3.1-8B on H100
        with open(SILICON, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        keep = [r for r in rows[1:] if "Llama-3.1-8B" in r[4] and r[5] == "h100_sxm" and r[7] == "agg"][:4]
        sliced = d / "silicon_slice.csv"
        with open(sliced, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([rows[0], *keep])
        path = d / "validate.html"
        assert simllm.cli.main(["validate", str(sliced), "--num-prompts", "16", "--report", str(path)]) == 0
        out["validate"] = (path, None)
    return out


KINDS = ("run", "loadtest", "compare", "sweep", "optimize", "frontier", "validate")
#: The kinds whose headline carries error bands (from the shipped accuracy record).
BANDED = ("run", "loadtest", "compare", "optimize")


@pytest.mark.parametrize("kind", KINDS)
def test_report_in_chromium(kind, browser, reports):
    if kind not in reports:
        pytest.skip(f"{SILICON} is absent: no validate report")
    path, hover_text = reports[kind]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems, requests = [], []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    url = path.resolve().as_uri()

    def only_the_file(route):
        requests.append(route.request.url)
        return route.continue_() if route.request.url == url else route.abort()

    page.route("**/*", only_the_file)
    page.goto(url)
    page.wait_for_selector("body[data-plots-rendered]", timeout=60_000)
    plots = page.evaluate(PLOTS_JS)
    if kind in BANDED:
        assert page.locator("th", has_text="error band").count() + page.locator("p", has_text="error bands").count()
    assert plots, "no plot on the page"
    assert int(page.get_attribute("body", "data-plots-rendered")) == len(plots)
    for p in plots:
        assert p["svg"] >= 1 and p["traces"] >= 1 and p["drawn"] >= 1, p
    if hover_text is not None:
        frontier = [p for p in plots if p["frontier"] >= 0]
        assert frontier, "no Pareto frontier drawn"
        p = frontier[0]
        pt, x, y = page.evaluate(POINT_JS, [p["id"], p["frontier"]])
        page.mouse.move(x + 30, y + 30)
        page.mouse.move(x, y)
        label = page.wait_for_selector(f"#{p['id']} .hoverlayer .hovertext", timeout=10_000)
        text = label.text_content()
        assert hover_text in text, text
        config = page.evaluate("([id, c, i]) => document.getElementById(id)._fullData[c].hovertext[i]",
                               [p["id"], p["frontier"], pt])
        first_line = config.split("<br>")[0].replace("&amp;", "&")
        assert first_line in text, (first_line, text)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts() / f"report_{kind}.png"), full_page=True)
    page.close()
    assert requests == [url]
    assert not problems, problems
