"""ServingConfig declares each field's flag and check once (config.serving.setting): every field has
a flag that ``simllm run`` accepts under that name, every check refuses what it should with a
one-line error naming the flag, and a sweep names the field by its path instead."""
import dataclasses

import pytest

import simllm
from simllm.cli.app import build_parser
from simllm.config.serving import SERVING_FLAGS, ServingConfig
from simllm.search.sweep import row_error


def run_flags():
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    return {s for a in run._actions for s in a.option_strings}


def test_every_field_has_the_flag_run_accepts():
    names = [f.name for f in dataclasses.fields(ServingConfig)]
    assert sorted(SERVING_FLAGS) == sorted(names)
    assert all(flag in run_flags() for flag in SERVING_FLAGS.values())
    assert all(flag == "--" + name.replace("_", "-") for name, flag in SERVING_FLAGS.items())


@pytest.mark.parametrize("name, value, expected", [
    ("tensor_parallel_size", 0, "an integer in [1, 65536]"),
    ("tensor_parallel_size", True, "an integer in [1, 65536]"),
    ("max_model_len", -1, "an integer in [1, 1073741824]"),
    ("gpu_memory_utilization", 1.5, "a fraction in (0, 1]"),
    ("kv_compression_ratio", 0.5, "a ratio in [1, 1e6]"),
    ("kv_compression_ratio", float("inf"), "a ratio in [1, 1e6]"),
    ("data_parallel_size", 10**30, "an integer in [1, 65536]"),
    ("batch_max", 10**30, "an integer in [1, 1048576]"),
    ("batch_window_ms", float("nan"), "a number of milliseconds in [0, 1e9]"),
    ("batching", "eager", "one of continuous, static, dynamic"),
    ("router", "random", "one of round_robin, least_outstanding"),
    ("framework", "tgi", "one of nim-trtllm, sglang, trtllm, vllm (shipped profiles), or a path to a framework profile YAML"),
])
def test_each_check_names_its_flag(name, value, expected):
    with pytest.raises(simllm.ConfigError) as err:
        ServingConfig(**{name: value})
    assert str(err.value) == f"command line: {SERVING_FLAGS[name]} = {value!r}: expected {expected}"
    assert row_error(err.value) == f"serving.{name} = {value!r}: expected {expected}"


def test_dtypes_are_normalised_and_checked():
    assert ServingConfig(dtype="bfloat16").dtype == "bf16"
    with pytest.raises(simllm.ConfigError, match="--kv-cache-dtype"):
        ServingConfig(kv_cache_dtype="fp3")
