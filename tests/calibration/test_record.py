"""The accuracy record (simllm.calibration.record): what ``simllm validate --write-accuracy``
writes, reading it back, bad records, and that the shipped configs/accuracy.json is what the
current presets give on the shared silicon_sample.csv (skipped when the shared data is absent)."""
import dataclasses
import json
import math

import pytest

import simllm.cli
from helpers import GOLDEN, ROOT, SHARED_DATA, silicon_points
from simllm.calibration import record as R
from simllm.calibration.validate import Point
from simllm.errors import ConfigError
from simllm.formats.common import Measurement

SHARED = SHARED_DATA / "silicon_sample.csv"
MEASURED = [str(GOLDEN / f"vllm_run{i}.json") for i in range(4)]


def measurement(**kw):
    base = dict(source="x/m.csv", line=3, model="meta-llama/Llama-3.1-8B", hardware="h100_sxm", backend="trtllm",
                precision="fp8", mode="agg", tp=2, pp=1, dp=1, input_len=1024, output_len=128, concurrency=16,
                request_rate=math.inf, num_prompts=0, ttft_ms=100.0, tpot_ms=10.0)
    base.update(kw)
    return Measurement(**base)


def test_point_row_and_round_trip(tmp_path):
    closed = Point(measurement(), "llama-3.1-8b", "h100-sxm", {"ttft": 120.0, "tpot": 9.0, "itl": 9.0, "e2el": 1.0},
                   bound={"ttft": 1.0, "tpot": 1.0, "itl": 1.0, "e2el": 1.0})
    fast = Point(measurement(tpot_ms=0.5), "llama-3.1-8b", "h100-sxm", {"ttft": 120.0, "tpot": 9.0, "itl": 9.0,
                                                                         "e2el": 1.0},
                 bound={"ttft": 1.0, "tpot": 1.0, "itl": 1.0, "e2el": 1.0})
    open_loop = Point(measurement(concurrency=0, request_rate=2.0, backend="", precision=""), "llama-3.1-8b",
                      "h100-sxm", {"ttft": 100.0, "tpot": 10.0, "itl": 10.0, "e2el": 1.0})
    skipped = Point(measurement(), "", "", None, "no model preset")
    row = R.point_row(closed)
    assert row["family"] == "llama-3.1" and row["framework"] == "trtllm" and row["precision"] == "fp8"
    assert row["predicted_ttft_ms"] == 120.0 and row["measured_tpot_ms"] == 10.0 and not row["below_bound"]
    # 16 clients x 128 tokens / (100 ms + 127 x 10 ms)
    assert row["measured_output_throughput"] == pytest.approx(16 * 128 / 1.37, rel=1e-5)
    assert row["predicted_output_throughput"] == pytest.approx(16 * 128 / (0.120 + 127 * 0.009), rel=1e-5)
    assert R.point_row(fast)["below_bound"]
    row = R.point_row(open_loop)
    assert row["concurrency"] == pytest.approx(2.0 * 1.37) and row["measured_output_throughput"] is None
    assert row["framework"] == "vllm" and row["precision"] == "native"

    src = tmp_path / "m.csv"
    src.write_text("a,b\n1,2\n", encoding="utf-8")
    disagg = dataclasses.replace(closed, measurement=measurement(mode="disagg"))  # bands are for one engine
    rec = R.build_record([closed, fast, open_loop, skipped, disagg], [src], {"filters": ["x"]}, date="2025-01-02")
    prov = rec["provenance"]
    assert prov["date"] == "2025-01-02" and prov["rows_read"] == 5 and prov["points"] == 3
    assert prov["disaggregated_left_out"] == 1
    assert prov["skipped"] == 1 and prov["below_bound"] == 1 and prov["settings"] == {"filters": ["x"]}
    assert prov["sources"][0]["file"] == "m.csv" and len(prov["sources"][0]["sha256"]) == 64
    path = R.write_record(tmp_path / "acc.json", rec)
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == rec and "NaN" not in text
    assert sum(line.lstrip().startswith('{"model"') for line in text.splitlines()) == 3  # one line per point
    loaded = R.load_record(path)
    assert len(loaded) == 3 and list(loaded["gpu"]) == ["h100-sxm"] * 3
    assert math.isnan(loaded["measured_output_throughput"][2]) and list(loaded["below_bound"]) == [False, True, False]


@pytest.mark.parametrize("text, needle", [
    ('{"points": 3}', "an accuracy record"),
    ('{"points": [{"model": "x"}]}', "key 'family' in every point"),
    ("{", "invalid JSON"),
])
def test_bad_record_is_a_one_line_error(tmp_path, text, needle):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=needle) as exc:
        R.load_record(path)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="accuracy record"):
        R.load_record(tmp_path / "absent.json")


def test_validate_writes_a_record(tmp_path, capsys):
    path = tmp_path / "acc.json"
    rc = simllm.cli.main(["validate", *MEASURED, "--hardware", "h100-sxm", "--write-accuracy", str(path)])
    capsys.readouterr()
    assert rc == 0
    rec = R.load_record(path)
    prov = rec.provenance
    assert prov["rows_read"] == 4 and prov["points"] == len(rec) > 0
    assert [s["file"] for s in prov["sources"]] == [f"vllm_run{i}.json" for i in range(4)]
    assert prov["simllm_version"] and prov["date"] and "--write-accuracy" in prov["regenerate"]
    assert set(rec["gpu"]) == {"h100-sxm"}


def test_shipped_record_is_package_data():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"accuracy.json"' in pyproject
    assert R.default_record_path() == ROOT / "configs" / "accuracy.json"


def _stale(fresh, shipped):
    """The differences of ``fresh`` record points from ``shipped`` ones, pairwise (floats to 1e-4)."""
    stale = []
    for a, b in zip(fresh, shipped):
        for key, value in a.items():
            same = (value == b[key] or (isinstance(value, float) and isinstance(b[key], float)
                                        and math.isclose(value, b[key], rel_tol=1e-4)))
            if not same:
                stale.append(f"{a['source']} {key}: {b[key]} -> {value}")
    return stale


@pytest.mark.heavy  # every row of the silicon CSV: every kernel variant, thousands of runs
@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_file(), reason=f"{SHARED} is absent")
def test_regenerating_the_shipped_record_gives_it_back(tmp_path_factory):
    """The documented command's computation on the shared data (helpers.silicon_points: the command
    line ``simllm validate ../shared/data/silicon_sample.csv`` parsed, its points bounded and
    predicted as the command does) reproduces configs/accuracy.json's points: a re-calibration that
    changes predictions must regenerate the record (the command is in its provenance's
    ``regenerate``). That the command writes the record of what it computed is the next test's."""
    args, points = silicon_points(tmp_path_factory)  # shared with the accuracy tests
    fresh = R.build_record(points, args.measured)
    shipped = json.loads(R.default_record_path().read_text(encoding="utf-8"))
    assert fresh["provenance"]["sources"] == shipped["provenance"]["sources"]
    assert len(fresh["points"]) == len(shipped["points"])
    stale = _stale(fresh["points"], shipped["points"])
    assert not stale, ("configs/accuracy.json is stale; regenerate it with `" + shipped["provenance"]["regenerate"]
                       + "`:\n" + "\n".join(stale[:10]))


@pytest.mark.heavy
@pytest.mark.skipif(not SHARED.is_file(), reason=f"{SHARED} is absent")
def test_the_validate_command_writes_the_shipped_points_of_its_rows(tmp_path, capsys):
    """``simllm validate FILE --write-accuracy OUT`` on the shared file's first 40 rows (a file of
    the same name): the record it writes holds the shipped record's points of those rows."""
    lines = SHARED.read_text(encoding="utf-8").splitlines(keepends=True)
    part = tmp_path / SHARED.name
    part.write_text("".join(lines[:41]), encoding="utf-8")
    out = tmp_path / "acc.json"
    rc = simllm.cli.main(["validate", str(part), "--write-accuracy", str(out)])
    capsys.readouterr()
    assert rc == 0
    fresh = json.loads(out.read_text(encoding="utf-8"))["points"]
    shipped = {p["source"]: p for p in json.loads(R.default_record_path().read_text(encoding="utf-8"))["points"]}
    assert len(fresh) >= 20 and all(p["source"] in shipped for p in fresh)
    assert not _stale(fresh, [shipped[p["source"]] for p in fresh])
