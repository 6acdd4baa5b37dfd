"""Workloads: sampling (seeded, vLLM arrival semantics), length distributions, the shipped
workload presets, trace formats (Azure, BurstGPT, Mooncake, simple CSV) and bad input (each a
one-line ConfigError naming the file, the line where there is one, and the field)."""
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import simllm
from helpers import ROOT
from simllm.config.workload import LengthDist, Workload, fixed, generate, random_range, read_lengths
from simllm.errors import ConfigError

WORKLOADS = sorted((ROOT / "configs" / "workloads").glob("*.yaml"))
SEED_MODEL = ROOT / "configs" / "model.yaml"  # Jalapeño, max_sequence_length 2048
SEED_HARDWARE = ROOT / "configs" / "hardware.yaml"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def assert_one_line(exc, *needles):
    text = str(exc)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return text


def open_loop(rate, arrival="poisson", burstiness=1.0, n=200_000, seed=0):
    return Workload(num_prompts=n, request_rate=rate, arrival=arrival, burstiness=burstiness, seed=seed,
                    input_len=fixed(16), output_len=fixed(4))


# ----------------------------------------------------------------------------- sampling


def _varied(seed=7):
    return Workload(num_prompts=2000, request_rate=3.0, arrival="gamma", burstiness=0.5, seed=seed,
                    input_len=LengthDist("lognormal", mean=500, sigma=0.8, maximum=4000),
                    output_len=LengthDist("uniform", low=10, high=300), prefix_hit_ratio=0.3)


def test_same_seed_identical_bit_for_bit():
    a, b = generate(_varied()), generate(_varied())
    for name in ("arrival_s", "input_len", "output_len", "prefix_hit"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape == (2000,)
        assert x.tobytes() == y.tobytes(), name


def test_different_seed_differs():
    a, b = generate(_varied(1)), generate(_varied(2))
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.input_len, b.input_len)
    assert not np.array_equal(a.output_len, b.output_len)


def test_dtypes_and_length():
    r = generate(_varied())
    assert len(r) == 2000
    assert r.arrival_s.dtype == np.float64
    assert r.input_len.dtype == np.int64 and r.output_len.dtype == np.int64
    assert r.prefix_hit.dtype == bool
    assert 0.2 < r.prefix_hit.mean() < 0.4


@pytest.mark.parametrize("arrival", ["poisson", "gamma", "constant"])
def test_first_arrival_is_zero_and_sorted(arrival):
    r = generate(open_loop(7.0, arrival, burstiness=0.4, n=1000))
    assert r.arrival_s[0] == 0.0
    assert np.all(np.diff(r.arrival_s) >= 0)


def test_poisson_mean_gap():
    rate = 20.0
    gaps = np.diff(generate(open_loop(rate)).arrival_s)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    # exponential: coefficient of variation 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 4.0])
def test_gamma_mean_gap_and_cv(burstiness):
    rate = 8.0
    gaps = np.diff(generate(open_loop(rate, "gamma", burstiness)).arrival_s)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_constant_spacing_exact():
    r = generate(open_loop(4.0, "constant", n=101))
    assert r.arrival_s[0] == 0.0
    np.testing.assert_allclose(np.diff(r.arrival_s), 0.25, rtol=0, atol=1e-12)
    assert r.arrival_s[-1] == pytest.approx(25.0, abs=1e-9)


@pytest.mark.parametrize("arrival", ["poisson", "gamma", "constant"])
def test_infinite_rate_all_zero(arrival):
    r = generate(open_loop(math.inf, arrival, burstiness=0.5, n=500))
    assert r.arrival_s.shape == (500,)
    assert not r.arrival_s.any()


def test_single_request():
    r = generate(open_loop(5.0, n=1))
    assert r.arrival_s.tolist() == [0.0]


# ----------------------------------------------------------------------------- lengths


def test_fixed_length():
    out = fixed(333).sample(np.random.default_rng(0), 100)
    assert out.dtype == np.int64 and np.all(out == 333)


def test_uniform_bounds_low_inclusive_high_exclusive():
    out = LengthDist("uniform", low=100, high=110).sample(np.random.default_rng(0), 20_000)
    assert out.min() == 100 and out.max() == 109
    assert set(np.unique(out)) == set(range(100, 110))
    assert out.mean() == pytest.approx(104.5, rel=0.01)
    assert LengthDist("uniform", low=100, high=110).mean_value == 104.5
    assert LengthDist("uniform", low=100, high=110).upper == 109


@pytest.mark.parametrize("value,ratio", [(1024, 0.5), (100, 0.1), (128, 0.25), (200, 1.0)])
def test_random_range_inclusive_like_vllm(value, ratio):
    """vLLM's random dataset: integers in [value*(1-r), value*(1+r)], both ends included."""
    lo, hi = round(value * (1 - ratio)), round(value * (1 + ratio))
    out = random_range(value, ratio).sample(np.random.default_rng(1), 50_000)
    assert out.min() >= max(lo, 1) and out.max() <= hi
    assert out.min() == max(lo, 1) and out.max() == hi  # both ends are reachable
    assert out.mean() == pytest.approx((max(lo, 1) + hi) / 2, rel=0.02)


def test_random_range_non_integer_bounds_vllm_truncation():
    # vLLM: low = int(value*(1-r)), high = int(value*(1+r)), randint(low, high + 1)
    out = random_range(7, 0.3).sample(np.random.default_rng(0), 5000)
    assert out.min() == int(7 * 0.7) and out.max() == int(7 * 1.3)


def test_random_range_zero_ratio_is_fixed():
    d = random_range(512, 0.0)
    assert d.kind == "fixed" and d.value == 512


def test_normal_mean_and_clip():
    d = LengthDist("normal", mean=500, std=100)
    out = d.sample(np.random.default_rng(0), 100_000)
    assert out.dtype == np.int64
    assert out.mean() == pytest.approx(500, rel=0.01)
    assert out.std() == pytest.approx(100, rel=0.03)
    clipped = LengthDist("normal", mean=500, std=300, minimum=200, maximum=700).sample(np.random.default_rng(0), 20_000)
    assert clipped.min() == 200 and clipped.max() == 700
    assert (clipped == 200).mean() > 0.1 and (clipped == 700).mean() > 0.1


def test_normal_never_below_one():
    out = LengthDist("normal", mean=2, std=10).sample(np.random.default_rng(0), 10_000)
    assert out.min() == 1


def test_lognormal_mean_and_clip():
    d = LengthDist("lognormal", mean=800, sigma=0.8)
    out = d.sample(np.random.default_rng(0), 200_000)
    assert out.mean() == pytest.approx(800, rel=0.02)
    # the median of a lognormal is exp(mu) = mean * exp(-sigma^2 / 2)
    assert np.median(out) == pytest.approx(800 * math.exp(-0.32), rel=0.03)
    capped = LengthDist("lognormal", mean=800, sigma=0.8, minimum=100, maximum=2000).sample(np.random.default_rng(0), 50_000)
    assert capped.min() >= 100 and capped.max() == 2000
    assert capped.mean() < 800


def test_empirical_from_text_file(tmp_path):
    path = write(tmp_path / "lengths.txt", "10\n20\n\n30\n")
    assert read_lengths(path) == [10, 20, 30]
    wpath = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 3000\n  input_len: {distribution: empirical, file: lengths.txt}\n")
    w = simllm.load_workload(wpath)
    assert w.input_len.kind == "empirical" and sorted(w.input_len.values) == [10, 20, 30]
    out = generate(w).input_len
    assert set(np.unique(out)) == {10, 20, 30}
    assert out.mean() == pytest.approx(20, rel=0.05)


def test_empirical_from_csv_column(tmp_path):
    write(tmp_path / "lens.csv", "id,tokens\n1,5\n2,7\n3,7\n")
    assert read_lengths(tmp_path / "lens.csv", "tokens") == [5, 7, 7]
    wpath = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 500\n"
                  "  output_len: {distribution: empirical, file: lens.csv, column: tokens, max: 6}\n")
    out = generate(simllm.load_workload(wpath)).output_len
    assert set(np.unique(out)) == {5, 6}


def test_yaml_length_forms(tmp_path):
    path = write(tmp_path / "w.yaml", (
        "workload:\n"
        "  num_prompts: 10\n"
        "  input_len: {distribution: normal, mean: 300, std: 50, min: 10, max: 1000}\n"
        "  output_len: {distribution: fixed, value: 42}\n"
    ))
    w = simllm.load_workload(path)
    assert w.input_len == LengthDist("normal", mean=300, std=50, minimum=10, maximum=1000)
    assert w.output_len.kind == "fixed" and w.output_len.value == 42
    ratio = write(tmp_path / "r.yaml", "workload:\n  input_len: 1000\n  output_len: 100\n  random_range_ratio: 0.5\n")
    w = simllm.load_workload(ratio)
    assert (w.input_len.low, w.input_len.high) == (500, 1501)
    assert (w.output_len.low, w.output_len.high) == (50, 151)


# ----------------------------------------------------------------------------- presets


def test_bench_1m_preset():
    w = simllm.load_workload("bench-1m")
    assert w.num_prompts == 1_000_000
    assert w.request_rate == 20
    assert w.arrival == "poisson"
    assert w.input_len.kind == "uniform" and (w.input_len.low, w.input_len.high) == (100, 1000)
    assert w.output_len.kind == "uniform" and (w.output_len.low, w.output_len.high) == (20, 400)
    assert w.seed == 0
    assert w.max_concurrency == 0 and not w.trace
    r = generate(dataclasses.replace(w, num_prompts=10_000))
    assert len(r) == 10_000
    assert r.arrival_s[0] == 0.0
    assert np.diff(r.arrival_s).mean() == pytest.approx(1 / 20, rel=0.05)
    assert r.input_len.min() >= 100 and r.input_len.max() <= 999
    assert r.output_len.min() >= 20 and r.output_len.max() <= 399


def test_bench_1m_by_path_equals_by_name():
    assert simllm.load_workload(ROOT / "configs" / "workloads" / "bench-1m.yaml") == simllm.load_workload("bench-1m")


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_all_workload_files_load(path):
    w = simllm.load_workload(path)
    assert w.num_prompts >= 1
    assert w.name == path.stem
    r = generate(dataclasses.replace(w, num_prompts=min(w.num_prompts, 200)))
    assert len(r) == min(w.num_prompts, 200)
    assert r.input_len.min() >= 1 and r.output_len.min() >= 1
    assert w.describe()


def test_workload_presets_listed():
    names = simllm.preset_names("workloads")
    assert {p.stem for p in WORKLOADS} == set(names)
    assert "bench-1m" in names


# ----------------------------------------------------------------------------- traces

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,4808,10\n"
    "2023-11-16 18:15:50.9951690,3180,8\n"
    "2023-11-16 18:15:51.0000000,110,27\n"
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,284,1371,Conversation log\n"
    "118,GPT-4,417,1031,1448,Conversation log\n"
)
MOONCAKE = (
    '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]}\n'
    '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [1, 3]}\n'
    '{"timestamp": 31000, "input_length": 700, "output_length": 300, "hash_ids": [4]}\n'
)
SIMPLE = "arrival_s,input_len,output_len\n1.5,100,10\n2.0,200,20\n4.25,300,30\n"


@pytest.mark.parametrize("name,text,suffix,times,inputs,outputs", [
    ("azure", AZURE, ".csv", [0.0, 4.314579, 4.31941], [4808, 3180, 110], [10, 8, 27]),
    ("burstgpt", BURSTGPT, ".csv", [0.0, 40.0, 113.0], [472, 1087, 417], [18, 284, 1031]),
    ("mooncake", MOONCAKE, ".jsonl", [0.0, 3.053, 3.518], [6955, 6472, 700], [52, 26, 300]),
    ("simple", SIMPLE, ".csv", [0.0, 0.5, 2.75], [100, 200, 300], [10, 20, 30]),
])
def test_trace_formats(tmp_path, name, text, suffix, times, inputs, outputs):
    path = write(tmp_path / f"{name}{suffix}", text)
    arrival, inp, out = simllm.read_trace(path)
    assert arrival.dtype == np.float64 and inp.dtype == np.int64 and out.dtype == np.int64
    assert inp.tolist() == inputs and out.tolist() == outputs
    np.testing.assert_allclose(arrival - arrival[0], times, atol=1e-6)
    # explicit format gives the same
    a2, i2, o2 = simllm.read_trace(path, name)
    assert np.array_equal(a2, arrival) and np.array_equal(i2, inp) and np.array_equal(o2, out)
    # load_workload on the trace file replays it as is, times relative to the first request
    w = simllm.load_workload(path)
    assert w.trace and w.num_prompts == 0
    r = generate(w)
    assert len(r) == 3
    np.testing.assert_allclose(r.arrival_s, times, atol=1e-6)
    assert r.arrival_s[0] == 0.0
    assert r.input_len.tolist() == inputs and r.output_len.tolist() == outputs


def test_mooncake_timestamps_are_milliseconds(tmp_path):
    arrival, _, _ = simllm.read_trace(write(tmp_path / "m.jsonl", MOONCAKE))
    np.testing.assert_allclose(arrival, [27.482, 30.535, 31.0])


def test_azure_absolute_timestamp(tmp_path):
    arrival, _, _ = simllm.read_trace(write(tmp_path / "a.csv", AZURE))
    expected = np.datetime64("2023-11-16T18:15:46.680590", "us").astype(np.int64) / 1e6
    assert arrival[0] == pytest.approx(expected, abs=1e-6)


def test_trace_sorted_by_time_lengths_follow(tmp_path):
    path = write(tmp_path / "t.csv", "arrival_s,input_len,output_len\n3,300,30\n1,100,10\n2,200,20\n")
    arrival, inp, out = simllm.read_trace(path)
    assert arrival.tolist() == [1.0, 2.0, 3.0]
    assert inp.tolist() == [100, 200, 300] and out.tolist() == [10, 20, 30]


def test_trace_from_workload_yaml_num_prompts_and_time_scale(tmp_path):
    write(tmp_path / "trace.csv", SIMPLE)
    wpath = write(tmp_path / "w.yaml", "workload:\n  trace: trace.csv\n  num_prompts: 2\n  time_scale: 2\n")
    w = simllm.load_workload(wpath)
    assert Path(w.trace) == tmp_path / "trace.csv"
    r = generate(w)
    assert r.arrival_s.tolist() == [0.0, 1.0]
    assert r.input_len.tolist() == [100, 200]


# ----------------------------------------------------------------------------- bad input


def _err(fn, *args):
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return info.value


def test_negative_request_rate_yaml(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n  request_rate: -1\n")
    e = _err(simllm.load_workload, path)
    assert_one_line(e, f"{path}:3:", "request_rate", "-1", "> 0")


def test_zero_num_prompts_yaml(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 0\n")
    assert_one_line(_err(simllm.load_workload, path), f"{path}:2:", "num_prompts", "0", ">= 1")


def test_non_numeric_request_rate_yaml(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  request_rate: fast\n")
    assert_one_line(_err(simllm.load_workload, path), f"{path}:2:", "request_rate", "fast", "number")


@pytest.mark.parametrize("high", [100, 50])
def test_uniform_high_not_above_low(tmp_path, high):
    path = write(tmp_path / "w.yaml", "workload:\n  input_len:\n    distribution: uniform\n    low: 100\n"
                 f"    high: {high}\n")
    assert_one_line(_err(simllm.load_workload, path), f"{path}:5:", "input_len.high", str(high), ">= 101")


def test_unknown_key_suggests_nearest(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n  reqest_rate: 5\n")
    assert_one_line(_err(simllm.load_workload, path), f"{path}:3:", "reqest_rate", "unknown key",
                    "did you mean request_rate")


def test_unknown_length_key_suggests_nearest(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: uniform, lo: 100, high: 200}\n")
    assert_one_line(_err(simllm.load_workload, path), str(path), "input_len.lo", "unknown key", "did you mean low")


def test_unknown_distribution(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: zipf, value: 3}\n")
    assert_one_line(_err(simllm.load_workload, path), str(path), "input_len.distribution", "zipf", "one of")


def test_workload_yaml_syntax_error(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n   request_rate: 3\n")
    assert_one_line(_err(simllm.load_workload, path), f"{path}:3:", "YAML")


def test_empty_workload_file(tmp_path):
    path = write(tmp_path / "w.yaml", "")
    assert_one_line(_err(simllm.load_workload, path), str(path), "empty")


def test_missing_workload_file(tmp_path):
    assert_one_line(_err(simllm.load_workload, tmp_path / "nope.yaml"), "--workload", "nope.yaml")


def test_unknown_workload_preset_suggests():
    assert_one_line(_err(simllm.load_workload, "bench1m"), "--workload", "did you mean", "bench-1m")


def test_empty_trace_header_only(tmp_path):
    path = write(tmp_path / "t.csv", "arrival_s,input_len,output_len\n")
    assert_one_line(_err(simllm.read_trace, path), str(path), "at least one request")
    assert_one_line(_err(simllm.load_workload, path), str(path), "at least one request")


def test_empty_jsonl_trace(tmp_path):
    path = write(tmp_path / "t.jsonl", "\n")
    assert_one_line(_err(simllm.load_workload, path), str(path), "at least one request")


def test_trace_missing_column_auto(tmp_path):
    path = write(tmp_path / "t.csv", "arrival_s,input_len\n0,5\n")
    text = assert_one_line(_err(simllm.load_workload, path), f"{path}:1:", "output_len")
    assert "found arrival_s, input_len" in text


def test_trace_missing_column_explicit_format(tmp_path):
    path = write(tmp_path / "t.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,5\n")
    assert_one_line(_err(simllm.read_trace, path, "azure"), str(path), "GeneratedTokens", "azure")


@pytest.mark.parametrize("suffix,text,line,key,value", [
    (".csv", "arrival_s,input_len,output_len\n0,5,5\n1,6,6\n2,abc,5\n", 4, "input_len", "'abc'"),
    (".csv", BURSTGPT + "200,ChatGPT,12,x1,13,Conversation log\n", 5, "Response tokens", "'x1'"),
    (".csv", AZURE.replace("3180", "3180.5"), 3, "ContextTokens", "'3180.5'"),
    (".csv", "arrival_s,input_len,output_len\n0,5,5\n1,0,5\n", 3, "input_len", "'0'"),
    (".csv", "arrival_s,input_len,output_len\n0,5,5\nsoon,6,5\n", 3, "arrival_s", "'soon'"),
    (".csv", AZURE.replace("2023-11-16 18:15:50.9951690", "yesterday"), 3, "TIMESTAMP", "'yesterday'"),
    (".jsonl", MOONCAKE + '{"timestamp": 32000, "input_length": "many", "output_length": 3}\n', 4,
     "input_length", "'many'"),
])
def test_trace_bad_value_names_file_line_field(tmp_path, suffix, text, line, key, value):
    path = write(tmp_path / f"t{suffix}", text)
    assert_one_line(_err(simllm.load_workload, path), f"{path}:{line}:", key, value)


def test_trace_invalid_json_line(tmp_path):
    path = write(tmp_path / "t.jsonl", MOONCAKE + "{not json\n")
    assert_one_line(_err(simllm.read_trace, path), f"{path}:4:", "JSON")


def test_lengths_file_bad_value(tmp_path):
    write(tmp_path / "lens.txt", "10\nx\n")
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: empirical, file: lens.txt}\n")
    assert_one_line(_err(simllm.load_workload, path), f"{tmp_path / 'lens.txt'}:2:", "'x'")


def test_lengths_csv_missing_column(tmp_path):
    write(tmp_path / "lens.csv", "a,tokens\n1,5\n")
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: empirical, file: lens.csv, column: nope}\n")
    assert_one_line(_err(simllm.load_workload, path), str(tmp_path / "lens.csv"), "nope")


def test_lengths_file_missing(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: empirical, file: gone.txt}\n")
    assert_one_line(_err(simllm.load_workload, path), "gone.txt")


@pytest.fixture(scope="module")
def jalapeno():
    model = simllm.load_model(SEED_MODEL)
    hardware = simllm.load_hardware(SEED_HARDWARE)
    return model, hardware


def test_input_len_above_model_max(tmp_path, jalapeno):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n  input_len: 5000\n")
    w = simllm.load_workload(path)
    e = _err(lambda: simllm.simulate(*jalapeno, workload=w))
    assert_one_line(e, str(path), "input_len", "5000", "2048")


def test_uniform_input_len_entirely_above_model_max(tmp_path, jalapeno):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n"
                 "  input_len: {distribution: uniform, low: 3000, high: 4000}\n")
    e = _err(lambda: simllm.simulate(*jalapeno, workload=simllm.load_workload(path)))
    assert_one_line(e, str(path), "input_len", "2048")


def test_input_plus_output_above_model_max(tmp_path, jalapeno):
    path = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 10\n  input_len: 1900\n  output_len: 500\n")
    e = _err(lambda: simllm.simulate(*jalapeno, workload=simllm.load_workload(path)))
    assert_one_line(e, str(path), "input_len", "2048")


def test_trace_prompt_above_model_max(tmp_path, jalapeno):
    path = write(tmp_path / "t.csv", "arrival_s,input_len,output_len\n0,100,10\n0.5,3000,10\n")
    e = _err(lambda: simllm.simulate(*jalapeno, workload=simllm.load_workload(path)))
    assert_one_line(e, str(path), "input_len", "3000", "2048")


def test_zero_num_prompts_python_api(jalapeno):
    e = _err(lambda: simllm.simulate(*jalapeno, workload=Workload(num_prompts=0)))
    assert_one_line(e, "num_prompts")


# ----------------------------------------------------------------------------- edge cases


def test_request_rate_yaml_dot_inf(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  request_rate: .inf\n")
    assert simllm.load_workload(path).request_rate == math.inf


def test_request_rate_yaml_inf_string(tmp_path):
    for text in ("inf", "Infinity"):
        path = write(tmp_path / "w.yaml", f"workload:\n  request_rate: {text}\n")
        assert simllm.load_workload(path).request_rate == math.inf


def test_length_min_above_max_rejected(tmp_path):
    path = write(tmp_path / "w.yaml", "workload:\n  input_len: {distribution: normal, mean: 100, std: 10, "
                 "min: 200, max: 50}\n")
    assert_one_line(_err(simllm.load_workload, path), str(path), "max")


def test_trace_with_byte_order_mark(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + SIMPLE.encode())
    assert simllm.read_trace(path)[1].tolist() == [100, 200, 300]


# --------------------------------------------------------------------------- closed loops, ramp-up, warm-up
def test_closed_loop_settings_from_yaml(tmp_path):
    f = write(tmp_path / "w.yaml", "workload:\n  num_prompts: 100\n  max_concurrency: 4\n  client_jitter_ms: 5\n"
                                   "  warmup_requests: 20\n")
    w = simllm.load_workload(str(f))
    assert (w.client_jitter_ms, w.warmup_requests) == (5.0, 20)
    assert Workload().client_jitter_ms == 20.0 and Workload().warmup_requests == 0  # the documented defaults
    r = write(tmp_path / "r.yaml", "workload:\n  ramp_up_strategy: exponential\n  ramp_up_start_rps: 1\n"
                                   "  ramp_up_end_rps: 50\n")
    w = simllm.load_workload(str(r))
    assert (w.ramp_up_strategy, w.ramp_up_start_rps, w.ramp_up_end_rps) == ("exponential", 1.0, 50.0)
    assert not w.closed_loop and "exponential ramp-up 1 to 50 req/s" in w.describe()


@pytest.mark.parametrize("text, key", [
    ("client_jitter_ms: -1", "workload.client_jitter_ms"),
    ("warmup_requests: 1.5", "workload.warmup_requests"),
    ("num_prompts: 10\n  warmup_requests: 10", "workload.warmup_requests"),
    ("ramp_up_strategy: quadratic", "workload.ramp_up_strategy"),
    ("ramp_up_strategy: linear\n  ramp_up_end_rps: 5", "workload.ramp_up_start_rps"),
    ("ramp_up_strategy: linear\n  ramp_up_start_rps: 5\n  ramp_up_end_rps: 2", "workload.ramp_up_end_rps"),
    ("ramp_up_strategy: linear\n  ramp_up_start_rps: 1\n  ramp_up_end_rps: 2\n  request_rate: 3",
     "workload.request_rate"),
    ("ramp_up_start_rps: 1", "workload.ramp_up_strategy"),
])
def test_bad_closed_loop_settings_are_one_line_errors(tmp_path, text, key):
    f = write(tmp_path / "w.yaml", f"workload:\n  {text}\n")
    with pytest.raises(ConfigError) as info:
        simllm.load_workload(str(f))
    assert_one_line(info.value, key, "w.yaml")


def test_client_delays_come_from_their_own_stream():
    """Jitter draws do not move the lengths or send times drawn from the same seed, and are
    exponential with the stated mean."""
    from simllm.config.workload import client_delays

    w = Workload(num_prompts=20000, max_concurrency=8, input_len=random_range(500, 0.5), seed=4)
    a, b = generate(w), generate(dataclasses.replace(w, client_jitter_ms=0.0))
    assert np.array_equal(a.input_len, b.input_len)
    d = client_delays(w, 20000)
    assert np.array_equal(d, client_delays(w, 20000))
    assert d.mean() == pytest.approx(0.020, rel=0.03) and d.std() == pytest.approx(0.020, rel=0.05)
    assert client_delays(dataclasses.replace(w, client_jitter_ms=0.0), 10) is None
    assert client_delays(dataclasses.replace(w, max_concurrency=0), 10) is None  # open loop


@pytest.mark.parametrize("field, value, expected", [
    ("num_prompts", 10**30, "an integer in [0, 2147483647]"),
    ("request_rate", 1e-300, "requests per second in [1e-06, 1e+09], or inf"),
    ("request_rate", float("nan"), "requests per second in [1e-06, 1e+09], or inf"),
    ("burstiness", float("inf"), "a number in [1e-6, 1e6]"),
    ("seed", -1, "an integer in [0, 2**63)"),
    ("timeout_s", float("inf"), "seconds in [0, 1e+12]"),
    ("prefix_hit_ratio", 1.5, "a fraction in [0, 1]"),
    ("arrival", "bursty", "one of poisson, gamma, constant"),
])
def test_workload_fields_declare_their_ranges(field, value, expected):
    """The Python API refuses what the YAML reader and the flags refuse (one validation layer)."""
    with pytest.raises(simllm.ConfigError) as err:
        simllm.Workload(**{field: value})
    assert str(err.value).endswith(f"workload.{field} = {value!r}: expected {expected}")


def _row_read(path, fmt="auto"):
    from simllm.config.workload import _read_rows_trace
    return _read_rows_trace(Path(path), fmt, True)


@pytest.mark.parametrize("seed", range(6))
def test_csv_trace_column_reader_matches_the_row_reader(tmp_path, seed):
    """The column-wise CSV reader gives the row-wise reader's arrays (the reference) on random
    traces of every CSV format, and the same one-line error for the first bad value."""
    rng = np.random.default_rng(seed)
    n = 300
    t = np.sort(rng.uniform(0, 1000, n))
    i = rng.integers(1, 5000, n)
    o = rng.integers(0, 500, n)  # some 0: failed upstream, skipped
    fmt = ["simple", "burstgpt", "mooncake", "azure"][seed % 4]
    if fmt == "simple":
        rows = ["arrival_s,input_len,output_len"] + [f"{float(a)!r},{b},{c}" for a, b, c in zip(t, i, o)]
    elif fmt == "burstgpt":
        rows = ["Timestamp,Model,Request tokens,Response tokens"] + [f"{a},ChatGPT,{b},{c}" for a, b, c in zip(t, i, o)]
    elif fmt == "mooncake":
        rows = ["timestamp,input_length,output_length"] + [f"{int(a * 1000)},{b},{c}" for a, b, c in zip(t, i, o)]
    else:
        stamps = np.datetime64("2023-11-16T18:00:00") + (t * 1e6).astype("timedelta64[us]")
        rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"{str(s).replace('T', ' ')},{b},{c}"
                                                              for s, b, c in zip(stamps, i, o)]
    if seed >= 4:
        rows.insert(5, "")  # a blank line: skipped, later lines keep their numbers
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    got = simllm.read_trace(path, with_lines=True)
    want = _row_read(path)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for k, bad in ((17, "x"), (40, "nan"), (90, "1e31"), (121, "-3"), (151, "2.5")):
        broken = list(rows)
        cells = broken[k].split(",")
        cells[-1 if k % 2 else 0] = bad
        broken[k] = ",".join(cells)
        path.write_text("\n".join(broken) + "\n", encoding="utf-8")
        with pytest.raises(ConfigError) as got_err:
            simllm.read_trace(path)
        with pytest.raises(ConfigError) as want_err:
            _row_read(path)
        assert str(got_err.value) == str(want_err.value)


def test_csv_trace_cache_sees_a_changed_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_len,output_len\n0,100,10\n1,200,20\n", encoding="utf-8")
    first = simllm.read_trace(path)
    path.write_text("arrival_s,input_len,output_len\n0,100,10\n1,200,20\n2,300,30\n", encoding="utf-8")
    second = simllm.read_trace(path)
    assert len(first[0]) == 2 and list(second[1]) == [100, 200, 300]
    second[1][0] = 7  # the caller's copy: the cached arrays stay as read
    assert simllm.read_trace(path)[1][0] == 100
