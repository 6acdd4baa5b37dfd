"""vllm bench serve's datasets (sharegpt, sonnet, custom) read as vLLM reads them, with simllm's
tokenizer-free token counts: the approximation's closed form, vLLM's selection (shuffle, filter,
oversampling) against a port of its loop, sonnet's arithmetic, workload files and bad input."""
import json
import random

import numpy as np
import pytest

from simllm.config import datasets
from simllm.config.datasets import Dataset, approx_tokens
from simllm.config.workload import Workload, generate, load_workload
from simllm.errors import ConfigError


@pytest.mark.parametrize("text, tokens", [
    ("", 0), ("abcd", 1), ("abcde", 2), ("Hello, world!\n", 4), ("你好", 2), ("ab你", 2), ("é" * 3 + "abcdefgh", 5),
])
def test_approx_tokens_closed_form(text, tokens):
    """ceil(ASCII characters / 4) + the other characters."""
    assert approx_tokens(text) == tokens


def conv(prompt, answer, *more):
    return {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]
            + [{"from": "human", "value": m} for m in more]}


def sharegpt(tmp_path, entries):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    return path


def vllm_sharegpt(entries, n, seed, output_len=None):
    """vLLM's ShareGPTDataset.load_data + sample + maybe_oversample_requests, with approx_tokens
    for the tokenizer: (prompt_len, output_len) per request."""
    data = [e for e in entries if "conversations" in e and len(e["conversations"]) >= 2]
    random.seed(seed)
    random.shuffle(data)
    samples = []
    for entry in data:
        if len(samples) >= n:
            break
        p = approx_tokens(entry["conversations"][0]["value"])
        o = approx_tokens(entry["conversations"][1]["value"]) if output_len is None else output_len
        if p < 4 or (output_len is None and o < 4) or p > 1024 or p + o > 2048:
            continue
        samples.append((p, o))
    if len(samples) < n:
        random.seed(seed)
        samples += [random.choice(samples) for _ in range(n - len(samples))]
    return samples


def entries_of(rng, count):
    letters = "abcdefghij klmnopqrstuvwxyz"
    out = []
    for i in range(count):
        p = "".join(rng.choice(list(letters), size=int(rng.integers(0, 5000))))
        a = "".join(rng.choice(list(letters), size=int(rng.integers(0, 3000))))
        out.append(conv(p, a) if i % 7 else {"conversations": [{"value": p}]})  # some with one turn
    return out


@pytest.mark.parametrize("seed, n", [(0, 5), (1, 40), (7, 200)])
def test_sharegpt_selection_is_vllms(tmp_path, seed, n):
    entries = entries_of(np.random.default_rng(seed), 60)
    ds = Dataset("sharegpt", str(sharegpt(tmp_path, entries)))
    inp, out, prefix = ds.requests(n, seed)
    assert list(zip(inp.tolist(), out.tolist())) == vllm_sharegpt(entries, n, seed) and prefix == 0
    fixed = Dataset("sharegpt", ds.path, sharegpt_output_len=3)  # no output minimum then
    inp, out, _ = fixed.requests(n, seed)
    assert list(zip(inp.tolist(), out.tolist())) == vllm_sharegpt(entries, n, seed, output_len=3)


def test_disable_shuffle_keeps_file_order(tmp_path):
    entries = entries_of(np.random.default_rng(3), 40)
    path = sharegpt(tmp_path, entries)
    inp, _, _ = Dataset("sharegpt", str(path), disable_shuffle=True).requests(10, 5)
    pairs = [(approx_tokens(e["conversations"][0]["value"]), approx_tokens(e["conversations"][1]["value"]))
             for e in entries if len(e["conversations"]) >= 2]
    kept = [p for p, o in pairs if 4 <= p <= 1024 and o >= 4 and p + o <= 2048]
    assert inp.tolist() == kept[:10]


def test_sharegpt_filters_short_and_long(tmp_path):
    path = sharegpt(tmp_path, [conv("abc", "a long enough answer"),  # 1-token prompt: skipped
                               conv("a prompt of some length", "ok"),  # 1-token answer: skipped
                               conv("x" * 4100, "fine answer here"),  # 1025-token prompt: skipped
                               conv("x" * 4000, "y" * 4400),  # 1000 + 1100 > 2048: skipped
                               conv("a prompt of some length", "an answer of some length", "third turn")])
    inp, out, _ = Dataset("sharegpt", str(path)).requests(3, 0)
    assert inp.tolist() == [6, 6, 6] and out.tolist() == [6, 6, 6]


def test_sonnet_closed_form(tmp_path):
    """Lines of 7 characters and a newline are 2 tokens each; the base prompt is 53 ASCII
    characters (14 tokens): prefix round((200 - 14) / 2) = 93 lines, prompts
    round((550 - 14) / 2) = 268 lines, ceil((53 + 268 * 8) / 4) = 550 tokens."""
    path = tmp_path / "sonnet.txt"
    path.write_text("".join(f"line{i:03d}\n" for i in range(300)))
    ds = Dataset("sonnet", str(path))
    inp, out, prefix = ds.requests(10, 3)
    assert len(datasets.SONNET_BASE_PROMPT) == 53
    assert inp.tolist() == [550] * 10 and out.tolist() == [150] * 10
    assert prefix == -(-(53 + 93 * 8) // 4) == 200
    w = Workload(num_prompts=10, dataset=ds)
    assert w.prefix_len == 200 and generate(w).input_len.tolist() == [550] * 10


def test_sonnet_redraws_prompts_over_the_input_len(tmp_path):
    path = tmp_path / "sonnet.txt"
    path.write_text("".join(("a" * (3 + 40 * (i % 2))) + "\n" for i in range(100)))  # 1- and 11-token lines
    ds = Dataset("sonnet", str(path), sonnet_input_len=120, sonnet_prefix_len=0)
    inp, _, _ = ds.requests(500, 0)
    assert inp.max() <= 120 and len(set(inp.tolist())) > 5
    assert (ds.requests(500, 0)[0] == inp).all() and not (ds.requests(500, 1)[0] == inp).all()


def test_sonnet_that_cannot_fit(tmp_path):
    path = tmp_path / "sonnet.txt"
    path.write_text("a short line\n")
    with pytest.raises(ConfigError, match="--sonnet-input-len = 10: expected more than the base prompt's 14 tokens"):
        Dataset("sonnet", str(path), sonnet_input_len=10)


def test_custom_rows_and_output_tokens(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"prompt": "What is the capital of India?", "output_tokens": 10}\n\n'
                    '{"prompt": "abcdefgh", "output_tokens": 20}\n')
    inp, out, _ = Dataset("custom", str(path), custom_output_len=-1).requests(5, 0)
    order = list(range(2))
    random.Random(0).shuffle(order)
    first = [[8, 2][i] for i in order]
    assert inp.tolist()[:2] == first and out.tolist()[:2] == [[10, 20][i] for i in order]
    assert Dataset("custom", str(path)).requests(3, 0)[1].tolist() == [256] * 3
    assert Dataset("custom", str(path)).requests(0, 0)[0].tolist() == []
    path.write_text('{"prompt": ""}\n')
    assert Dataset("custom", str(path)).requests(2, 0)[0].tolist() == [1, 1]  # an empty prompt is its BOS token


@pytest.mark.parametrize("name, text, match", [
    ("custom", '{"prompt": "a"}\n{"prompt": 3}\n', r"c.jsonl:2: prompt = 3: expected a JSON object"),
    ("custom", '{"prompt": "a"}\n{"prompt": "b", "output_tokens": 0}\n', r"c.jsonl:2: output_tokens = 0"),
    ("custom", '{"prompt": "a"\n', r"c.jsonl:1: invalid JSON line"),
    ("custom", "\n", r"c.jsonl: at least one JSON line"),
    ("sharegpt", '[{"conversations": [{"value": "a"}, {"value": null}]}]',
     r"c.jsonl: \[0\].conversations\[1\].value = None: expected a turn with a string 'value'"),
    ("sharegpt", '[\n{"conversations": []},\n', r"c.jsonl:3: invalid JSON"),
    ("sharegpt", '{"a": 1}', r"c.jsonl: a JSON list of ShareGPT entries"),
])
def test_bad_files_name_file_line_and_key(tmp_path, name, text, match):
    path = tmp_path / "c.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Dataset(name, str(path))


def test_custom_needs_output_tokens_with_minus_one(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"prompt": "a", "output_tokens": 3}\n{"prompt": "b"}\n')
    with pytest.raises(ConfigError, match=r"c.jsonl:2: output_tokens: an output_tokens per row"):
        Dataset("custom", str(path), custom_output_len=-1)


def test_workload_file_with_a_dataset(tmp_path):
    sharegpt(tmp_path, [conv("a prompt of some length", "an answer of some length")])
    spec = tmp_path / "w.yaml"
    spec.write_text("workload:\n  num_prompts: 4\n  dataset_name: sharegpt\n  dataset_path: sg.json\n"
                    "  sharegpt_output_len: 9\n  request_rate: 2\n  disable_shuffle: true\n")
    w = load_workload(spec)
    assert w.dataset.disable_shuffle and w.dataset.sharegpt_output_len == 9
    req = generate(w)
    assert req.input_len.tolist() == [6] * 4 and req.output_len.tolist() == [9] * 4
    assert "sharegpt dataset sg.json" in w.describe()


@pytest.mark.parametrize("text, match", [
    ("  dataset_name: sharegpt\n  dataset_path: sg.json\n  input_len: 100\n",
     r"w.yaml:4: workload.input_len = 100: expected no input_len with dataset_name sharegpt"),
    ("  dataset_name: sharegpt\n  dataset_path: sg.json\n  sonnet_input_len: 100\n",
     r"w.yaml:4: workload.sonnet_input_len = 100: expected no sonnet_input_len with dataset_name sharegpt"),
    ("  dataset_path: sg.json\n", r"w.yaml:2: workload.dataset_path = 'sg.json': expected no dataset_path with "
                                   r"dataset_name random"),
    ("  dataset_name: sharegpt\n  dataset_path: none.json\n",
     r"w.yaml: workload.dataset_path = '.*none.json': expected an existing sharegpt dataset file"),
])
def test_workload_file_dataset_errors(tmp_path, text, match):
    sharegpt(tmp_path, [conv("a prompt of some length", "an answer of some length")])
    spec = tmp_path / "w.yaml"
    spec.write_text("workload:\n" + text)
    with pytest.raises(ConfigError, match=match):
        load_workload(spec)
