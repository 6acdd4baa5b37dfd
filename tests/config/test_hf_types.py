"""Every key of the shipped test HuggingFace configs, set to a value of the wrong type or out of
range, loads or gives a ConfigError naming the file; never another exception (issue 16)."""
import json

import pytest

import simllm
from helpers import DATA

BAD_VALUES = ("x", [1], {"a": 1}, -1, 0, 10**30, 1e300, None, True, 2.5, "")
CONFIGS = sorted(p.name for p in DATA.glob("*.config.json"))


@pytest.mark.parametrize("name", CONFIGS)
def test_wrongly_typed_hf_fields_load_or_fail_cleanly(name, tmp_path):
    base = json.loads((DATA / name).read_text(encoding="utf-8"))
    paths = [(k,) for k in base] + [("text_config", k) for k in base.get("text_config", {})]
    path = tmp_path / "config.json"
    for keys in paths:
        for value in BAD_VALUES:
            data = json.loads(json.dumps(base))
            (data if len(keys) == 1 else data[keys[0]])[keys[-1]] = value
            path.write_text(json.dumps(data), encoding="utf-8")
            try:
                simllm.load_model(str(path))
            except simllm.ConfigError as exc:
                assert str(path) in str(exc) and "\n" not in str(exc), (keys, value, str(exc))
