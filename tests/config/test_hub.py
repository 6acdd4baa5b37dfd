"""HuggingFace ids resolve offline: to the shipped preset that stands for the id, else to the id's
config.json in the local HuggingFace cache (a temporary one here), else one line naming both."""
import re
import shutil
from pathlib import Path

import pytest

from helpers import DATA
from simllm.calibration.validate import resolve_name
from simllm.config import hub, presets
from simllm.config.model import load_model
from simllm.errors import ConfigError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty HuggingFace hub cache that HF_HUB_CACHE names."""
    folder = tmp_path / "hub"
    folder.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    return folder


def snapshot(cache, repo_id, revision, config=DATA / "qwen2.5-0.5b.config.json", main=True):
    """Put ``config`` into the cache as huggingface_hub lays it out; ``main`` writes refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots" / revision).mkdir(parents=True)
    shutil.copy(config, repo / "snapshots" / revision / "config.json")
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision / "config.json"


@pytest.mark.parametrize("hf_id, preset", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/llama-3.1-8b-instruct", "llama-3.1-8b"),  # the Hub matches ids case-insensitively
    ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
])
def test_hf_id_resolves_to_its_preset(hf_id, preset, cache):
    model = load_model(hf_id)
    assert Path(model.source) == presets.configs_dir() / "models" / f"{preset}.yaml"
    assert hf_id.lower() in [i.lower() for i in model.hf_ids]


def test_every_preset_lists_its_source_id():
    """Each preset's hf_ids hold the HuggingFace repository its comment cites, and no id stands for
    two presets."""
    seen = {}
    for name in presets.preset_names("models"):
        path = presets.configs_dir() / "models" / f"{name}.yaml"
        cited = re.search(r"huggingface\.co/([^/\s]+/[^/\s,]+)/blob", path.read_text())
        ids = load_model(name).hf_ids
        if cited:
            assert cited.group(1) in ids, (name, cited.group(1), ids)
        for i in ids:
            assert hub.is_hf_id(i) and seen.setdefault(i.lower(), name) == name, (i, name, seen.get(i.lower()))
    assert len(seen) >= 40


def test_cached_config_found_through_refs_main(cache):
    snapshot(cache, "acme/Other-0.5B", "a" * 40, main=False)  # an older snapshot
    expected = snapshot(cache, "acme/Tiny-0.5B", "b" * 40)
    (cache / "models--acme--Tiny-0.5B" / "snapshots" / ("c" * 40)).mkdir()  # one without config.json
    model = load_model("acme/Tiny-0.5B")
    assert Path(model.source) == expected
    assert model.layers == 24 and model.hidden_size == 896  # Qwen2.5-0.5B's config.json


def test_cached_config_case_insensitive_and_without_refs(cache):
    expected = snapshot(cache, "Acme/Tiny-0.5B", "d" * 40, main=False)
    assert hub.cached_config("acme/tiny-0.5b") == expected
    assert Path(load_model("ACME/TINY-0.5B").source) == expected


def test_cache_location_from_environment(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub.hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub.hub_cache_dir() == tmp_path / "elsewhere"


def test_unknown_id_names_both_places(cache):
    with pytest.raises(ConfigError) as err:
        load_model("acme/Missing-7B")
    text = str(err.value)
    assert "\n" not in text and "--model" in text and "'acme/Missing-7B'" in text
    assert "no shipped preset" in text and str(cache / "models--acme--Missing-7B") in text
    assert "hf download acme/Missing-7B config.json" in text


def test_local_folder_wins_over_an_id(tmp_path, monkeypatch, cache):
    """An existing ORG/NAME folder with a config.json is read as a path, as transformers does."""
    folder = tmp_path / "meta-llama" / "Llama-3.1-8B-Instruct"
    folder.mkdir(parents=True)
    shutil.copy(DATA / "qwen2.5-0.5b.config.json", folder / "config.json")
    monkeypatch.chdir(tmp_path)
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").hidden_size == 896


def test_measured_model_ids_map_to_presets():
    assert resolve_name("models", "meta-llama/Llama-3.3-70B-Instruct", {}) == "llama-3.1-70b"


def test_bad_hf_ids_key(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("model:\n  name: x\n  hf_ids: [not an id]\n  layers: 2\n  hidden_size: 64\n"
                    "  num_attention_heads: 4\n  vocab_size: 100\n  max_sequence_length: 128\n")
    with pytest.raises(ConfigError, match=r"m.yaml:3: model.hf_ids = \['not an id'\]: expected a list of "):
        load_model(path)
