"""A trace's send times scaled to a request rate (keeping their shape), and the workload keys a
trace makes meaningless refused in a workload file."""
import math

import numpy as np
import pytest

from simllm.config.workload import Workload, generate, load_workload, trace_rate_scale
from simllm.errors import ConfigError

TRACE = "arrival_s,input_len,output_len\n10,100,5\n10.5,200,6\n12,300,7\n16,400,8\n"


def trace(tmp_path, text=TRACE):
    path = tmp_path / "t.csv"
    path.write_text(text)
    return path


def test_rate_scales_times_keeping_shape(tmp_path):
    w = load_workload(trace(tmp_path))
    recorded = generate(w).arrival_s
    np.testing.assert_allclose(recorded, [0, 0.5, 2, 6])  # 3 gaps over 6 s: 0.5 req/s
    scaled = generate(Workload(**{**vars(w), "request_rate": 2.0})).arrival_s
    np.testing.assert_allclose(scaled, np.array([0, 0.5, 2, 6]) * 0.25)  # 3 gaps over 1.5 s: 2 req/s
    assert (len(scaled) - 1) / scaled[-1] == pytest.approx(2.0)
    lengths = generate(Workload(**{**vars(w), "request_rate": 2.0}))
    assert lengths.input_len.tolist() == [100, 200, 300, 400] and lengths.output_len.tolist() == [5, 6, 7, 8]


def test_rate_scales_the_requests_replayed(tmp_path):
    """With num_prompts the rate is that of the rows replayed: 2 gaps over 2 s at first."""
    w = Workload(**{**vars(load_workload(trace(tmp_path))), "num_prompts": 3, "request_rate": 4.0})
    np.testing.assert_allclose(generate(w).arrival_s, np.array([0, 0.5, 2]) * (2 / 2) / 4)
    assert "scaled to 4 req/s" in w.describe()


def test_scale_closed_form():
    assert trace_rate_scale(np.array([0.0, 1.0, 3.0]), 0.5) == pytest.approx(2 / (3 * 0.5))
    assert trace_rate_scale(np.array([0.0]), 7.0) == 1.0


def test_trace_all_at_once_cannot_take_a_rate(tmp_path):
    path = trace(tmp_path, "arrival_s,input_len,output_len\n1,100,5\n1,200,6\n")
    w = Workload(**{**vars(load_workload(path)), "request_rate": 2.0})
    with pytest.raises(ConfigError, match="span more than 0 s"):
        generate(w)


def test_time_scale_and_rate_conflict(tmp_path):
    trace(tmp_path)
    wpath = tmp_path / "w.yaml"
    wpath.write_text("workload:\n  trace: t.csv\n  request_rate: 2\n  time_scale: 3\n")
    with pytest.raises(ConfigError, match="w.yaml: workload.time_scale = 3: expected no time_scale with a request_rate"):
        load_workload(wpath)


@pytest.mark.parametrize("key, value", [("input_len", 100), ("output_len", 10), ("burstiness", 2),
                                        ("arrival", "gamma"), ("random_range_ratio", 0.5)])
def test_workload_file_refuses_what_a_trace_replays(tmp_path, key, value):
    trace(tmp_path)
    wpath = tmp_path / "w.yaml"
    wpath.write_text(f"workload:\n  trace: t.csv\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=rf"w.yaml:3: workload.{key} = .*: expected no {key} with a trace"):
        load_workload(wpath)


def test_workload_file_rate_scales_the_trace(tmp_path):
    trace(tmp_path)
    wpath = tmp_path / "w.yaml"
    wpath.write_text("workload:\n  trace: t.csv\n  request_rate: 1\n")
    arrival = generate(load_workload(wpath)).arrival_s
    assert arrival[-1] == pytest.approx(3.0) and math.isfinite(load_workload(wpath).request_rate)
