"""The datasets of ``vllm bench serve --dataset-name ... --dataset-path ...``, read as vLLM reads
them (``vllm/benchmarks/datasets.py``), giving each request's prompt and output token counts.

simllm has no tokenizer: token counts are :func:`approx_tokens` of the text, one closed form (a
quarter token per ASCII character, rounded up, plus one token per other character: ~4 characters a
token for English, as the Llama 3 and GPT-4 tokenizers average, and ~1 for CJK text). Chat
templates and the BOS token vLLM's tokenizer adds are not counted.

- ``sharegpt``: a JSON list of ``{"conversations": [{"value": ...}, ...]}``. Entries with fewer
  than two turns are dropped; the rest are shuffled (Python's ``random`` seeded with ``seed``, the
  very order vLLM draws); each gives the first turn as the prompt and the second as the output
  (``sharegpt_output_len`` replaces the output's count); pairs with a prompt under 4 tokens or
  over 1024, an output under 4 (unless fixed) or more than 2048 together are skipped. Fewer pairs
  than requests are topped up by drawing from them again (vLLM's oversampling).
- ``sonnet``: a text file, one poem line a line. Each prompt is vLLM's base prompt, the first lines
  up to ``sonnet_prefix_len`` tokens (shared by every request) and random lines up to
  ``sonnet_input_len``; draws over ``sonnet_input_len`` are drawn again. Output
  ``sonnet_output_len``.
- ``custom``: JSONL, one ``{"prompt": ..., "output_tokens": N}`` a line (``output_tokens`` only
  needed with ``custom_output_len`` -1); shuffled and oversampled as ShareGPT, nothing skipped (an
  empty prompt counts 1 token, its BOS).
"""
import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simllm.config.model import MAX_CONTEXT_TOKENS as MAX_TOKENS
from simllm.errors import CLI, ConfigError

DATASETS = ("random", "sharegpt", "sonnet", "custom")
#: vLLM's defaults (vllm bench serve's dataset flags; SonnetDataset).
SONNET_INPUT_LEN = 550
SONNET_OUTPUT_LEN = 150
SONNET_PREFIX_LEN = 200
CUSTOM_OUTPUT_LEN = 256
#: vLLM's is_valid_sequence: ShareGPT pairs kept (prompt and output at least MIN_LEN, prompt at most
#: MAX_PROMPT_LEN, both at most MAX_TOTAL_LEN).
MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048
SONNET_BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
#: ASCII characters per token of :func:`approx_tokens`.
CHARS_PER_TOKEN = 4
#: A sonnet request is drawn at most this many times over before simllm says the lines do not fit.
MAX_SONNET_DRAWS = 1000
#: The dataset's own random stream: child 1 of the workload seed's SeedSequence (child 0 is the
#: closed loop's client delays), so the send times drawn from the seed stay the same.
SONNET_SPAWN_KEY = (1,)
SONNET_BATCH = 1 << 16  # sonnet requests drawn at a time


def approx_tokens(text):
    """Tokens of ``text`` without a tokenizer: ``ceil(ascii / 4) + other``, where ``ascii`` counts
    the ASCII characters and ``other`` the rest (``""``: 0)."""
    ascii_chars, other = char_counts(text)
    return -(-ascii_chars // CHARS_PER_TOKEN) + other


def char_counts(text):
    """(ASCII characters, other characters) of ``text``: what :func:`approx_tokens` counts."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars, len(text) - ascii_chars


@dataclass(frozen=True)
class Dataset:
    """A ``vllm bench serve`` dataset file and its flags. ``sharegpt_output_len`` 0: each pair's
    own output; ``custom_output_len`` -1: each row's ``output_tokens``; ``disable_shuffle``:
    ShareGPT's and custom's entries in file order. Reading the file happens
    here (cached by path, modification time and size), so a bad file stops before any simulation."""

    name: str
    path: str
    sharegpt_output_len: int = 0
    sonnet_input_len: int = SONNET_INPUT_LEN
    sonnet_output_len: int = SONNET_OUTPUT_LEN
    sonnet_prefix_len: int = SONNET_PREFIX_LEN
    custom_output_len: int = CUSTOM_OUTPUT_LEN
    disable_shuffle: bool = False
    source: str = CLI

    def __post_init__(self):
        if self.name not in DATASETS[1:]:
            raise ConfigError("one of " + ", ".join(DATASETS[1:]) + " (random takes no file)", source=self.source,
                              key=self.key("dataset_name"), value=self.name)
        checks = (("sharegpt_output_len", 0), ("sonnet_input_len", 1), ("sonnet_output_len", 1),
                  ("sonnet_prefix_len", 0))
        for key, low in checks:
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_TOKENS:
                raise ConfigError(f"an integer in [{low}, {MAX_TOKENS}]", source=self.source, key=self.key(key), value=v)
        if not isinstance(self.disable_shuffle, bool):
            raise ConfigError("true or false", source=self.source, key=self.key("disable_shuffle"),
                              value=self.disable_shuffle)
        v = self.custom_output_len
        if isinstance(v, bool) or not isinstance(v, int) or not (v == -1 or 1 <= v <= MAX_TOKENS):
            raise ConfigError(f"an integer in [1, {MAX_TOKENS}], or -1 (each row's output_tokens)",
                              source=self.source, key=self.key("custom_output_len"), value=v)
        path = Path(self.path)
        if not path.is_file():
            raise ConfigError(f"an existing {self.name} dataset file", source=self.source, key=self.key("dataset_path"),
                              value=self.path)
        if self.name == "sonnet":
            sonnet_plan(self)
            return
        _, output, lines = self.pool()
        if self.name == "custom" and self.custom_output_len == -1 and (output < 0).any():
            raise ConfigError("an output_tokens per row with custom_output_len -1", source=self.path,
                              line=int(lines[np.argmax(output < 0)]), key="output_tokens")

    def key(self, field):
        """How an error names ``field``: its flag on the command line, else ``workload.<field>``."""
        return "--" + field.replace("_", "-") if self.source == CLI else f"workload.{field}"

    def pool(self):
        """The file's prompt tokens, output tokens (-1: a custom row without ``output_tokens``) and
        lines (ShareGPT: the entry's index) per entry, in file order (ShareGPT: entries with two
        turns; custom: every row); read-only int64 arrays."""
        path = Path(self.path)
        stat = path.stat()
        return _read(self.name, str(path.resolve()), stat.st_mtime_ns, stat.st_size, str(path))

    def describe(self):
        return f"{self.name} dataset {Path(self.path).name}"

    def shared_prefix_tokens(self):
        """The tokens every prompt starts with: sonnet's base prompt and prefix lines; else 0."""
        if self.name != "sonnet":
            return 0
        _, prefix, _ = sonnet_plan(self)
        return -(-int(prefix[0]) // CHARS_PER_TOKEN) + int(prefix[1])

    def requests(self, n, seed):
        """``(input_len, output_len, shared_prefix_tokens)`` of ``n`` requests drawn with
        ``seed``: int64 arrays, and the tokens every prompt shares (sonnet's prefix; else 0)."""
        if self.name == "sonnet":
            return sample_sonnet(self, n, seed)
        prompt, output, _ = self.pool()
        if self.name == "custom":
            if self.custom_output_len != -1:
                output = np.full(len(prompt), self.custom_output_len, dtype=np.int64)
            keep = np.ones(len(prompt), dtype=bool)
        else:
            if self.sharegpt_output_len:
                output = np.full(len(prompt), self.sharegpt_output_len, dtype=np.int64)
            keep = (prompt >= MIN_LEN) & (prompt <= MAX_PROMPT_LEN) & (prompt + output <= MAX_TOTAL_LEN)
            if not self.sharegpt_output_len:
                keep &= output >= MIN_LEN
        order = list(range(len(prompt)))
        if not self.disable_shuffle:
            random.Random(seed).shuffle(order)  # vLLM: random.seed(seed); random.shuffle(data)
        order = np.asarray(order, dtype=np.int64)
        chosen = order[keep[order]]
        if not len(chosen):
            raise ConfigError(f"at least one {self.name} pair with a prompt of {MIN_LEN} to {MAX_PROMPT_LEN} tokens "
                              f"and at most {MAX_TOTAL_LEN} with its output (approximate tokens), got none",
                              source=self.path)
        chosen = chosen[:n]
        if len(chosen) < n:  # vLLM's oversampling: random.seed(seed); random.choice(samples) per request short
            rng = random.Random(seed)
            extra = [rng.choice(range(len(chosen))) for _ in range(n - len(chosen))]
            chosen = np.concatenate([chosen, chosen[np.asarray(extra, dtype=np.int64)]])
        return prompt[chosen].copy(), output[chosen].copy(), 0


@functools.lru_cache(maxsize=4)
def _read(name, resolved, mtime_ns, size, shown):
    """:meth:`Dataset.pool` of a ShareGPT or custom file."""
    try:
        columns = (_read_sharegpt if name == "sharegpt" else _read_custom)(resolved, shown)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 text file (byte {exc.start} is not)", source=shown) from None
    arrays = tuple(np.asarray(c, dtype=np.int64) for c in columns)
    for a in arrays:
        a.flags.writeable = False
    return arrays


def _read_sharegpt(path, shown):
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON: {exc.msg}", source=shown, line=exc.lineno) from None
    if not isinstance(data, list):
        raise ConfigError("a JSON list of ShareGPT entries ({\"conversations\": [...]})", source=shown)
    prompt, output, where = [], [], []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue  # vLLM keeps entries with at least two turns
        counts = []
        for t in (0, 1):
            value = turns[t].get("value") if isinstance(turns[t], dict) else None
            if not isinstance(value, str):
                raise ConfigError("a turn with a string 'value'", source=shown, key=f"[{i}].conversations[{t}].value",
                                  value=value)
            counts.append(approx_tokens(value))
        prompt.append(counts[0])
        output.append(counts[1])
        where.append(i)
    if not prompt:
        raise ConfigError("at least one entry with two conversation turns, got none", source=shown)
    return prompt, output, where


def json_lines(path, shown):
    """``(line number, value)`` of each non-blank line of a JSONL file (a byte-order mark allowed),
    as the custom dataset and JSONL traces read them; a line that is not JSON is a
    :class:`ConfigError` naming ``shown`` (the path as the user gave it) and the line."""
    with open(path, encoding="utf-8-sig") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"invalid JSON line: {exc.msg}", source=shown, line=line) from None


def _read_custom(path, shown):
    prompt, output, lines = [], [], []
    for line, row in json_lines(path, shown):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ConfigError("a JSON object with a string 'prompt'", source=shown, line=line, key="prompt",
                              value=row.get("prompt") if isinstance(row, dict) else row)
        n = row.get("output_tokens", -1)
        if n != -1 and (isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n)
                        or not 1 <= n <= MAX_TOKENS):
            raise ConfigError(f"an integer in [1, {MAX_TOKENS}]", source=shown, line=line, key="output_tokens",
                              value=n)
        prompt.append(max(approx_tokens(row["prompt"]), 1))  # an empty prompt is still its BOS token
        output.append(int(n))
        lines.append(line)
    if not prompt:
        raise ConfigError("at least one JSON line with a 'prompt', got none", source=shown)
    return prompt, output, lines


@functools.lru_cache(maxsize=4)
def _sonnet_lines(resolved, mtime_ns, size, shown):
    """(ASCII characters, other characters) per line of a sonnet file (lines keep their newline, as
    vLLM's readlines)."""
    try:
        with open(resolved, encoding="utf-8") as f:
            lines = f.readlines()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 text file (byte {exc.start} is not)", source=shown) from None
    if not lines:
        raise ConfigError("at least one poem line, got none", source=shown)
    counts = np.asarray([char_counts(line) for line in lines], dtype=np.int64).reshape(-1, 2)
    counts.flags.writeable = False
    return counts


def sonnet_plan(ds):
    """vLLM's sonnet arithmetic on approximate tokens: ``(line counts, prefix characters, lines
    drawn per request)``, where the prefix is the base prompt and the first
    ``round((prefix_len - base) / average line)`` lines and each request adds
    ``round((input_len - base) / average line)`` minus those lines.

    Raises
    ------
    ConfigError
        ``sonnet_input_len`` not above the base prompt's tokens, or no draw that can fit it.
    """
    path = Path(ds.path)
    stat = path.stat()
    counts = _sonnet_lines(str(path.resolve()), stat.st_mtime_ns, stat.st_size, str(path))
    tokens = -(-counts[:, 0] // CHARS_PER_TOKEN) + counts[:, 1]
    avg = float(tokens.mean())
    base = approx_tokens(SONNET_BASE_PROMPT)
    if ds.sonnet_input_len <= base:
        raise ConfigError(f"more than the base prompt's {base} tokens", source=ds.source,
                          key=ds.key("sonnet_input_len"), value=ds.sonnet_input_len)
    if avg <= 0:
        raise ConfigError("poem lines with some text, got only empty ones", source=ds.path)
    n_input = round((ds.sonnet_input_len - base) / avg)
    n_prefix = max(round((ds.sonnet_prefix_len - base) / avg), 0)
    prefix = np.asarray(char_counts(SONNET_BASE_PROMPT)) + counts[:n_prefix].sum(axis=0)
    k = max(n_input - n_prefix, 0)
    shortest = np.sort(counts[:, 0])[:k].sum(), np.sort(counts[:, 1])[:k].sum()
    smallest = -(-(prefix[0] + shortest[0]) // CHARS_PER_TOKEN) + prefix[1] + shortest[1]
    if smallest > ds.sonnet_input_len:
        raise ConfigError(f"an input length the base prompt, {n_prefix} prefix lines and {k} more can fit "
                          f"(at least {smallest} tokens)", source=ds.source,
                          key=ds.key("sonnet_input_len"), value=ds.sonnet_input_len)
    return counts, prefix, k


def sample_sonnet(ds, n, seed):
    """``(input_len, output_len, prefix tokens)`` of ``n`` sonnet requests: each draws its lines
    uniformly with replacement and is drawn again while over ``sonnet_input_len`` (vLLM's loop)."""
    counts, prefix, k = sonnet_plan(ds)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=SONNET_SPAWN_KEY))
    out = np.empty(0, dtype=np.int64)
    draws = 0
    while len(out) < n:
        batch = min(max(2 * (n - len(out)), 64), SONNET_BATCH)
        if draws > MAX_SONNET_DRAWS * max(n, 1):
            raise ConfigError(f"an input length that more than 1 in {MAX_SONNET_DRAWS} draws of {k} lines fit",
                              source=ds.source, key=ds.key("sonnet_input_len"), value=ds.sonnet_input_len)
        draws += batch
        picked = counts[rng.integers(0, len(counts), (batch, k))].sum(axis=1) if k else np.zeros((batch, 2), np.int64)
        tokens = -(-(prefix[0] + picked[:, 0]) // CHARS_PER_TOKEN) + prefix[1] + picked[:, 1]
        out = np.concatenate([out, tokens[tokens <= ds.sonnet_input_len]])
    return out[:n].astype(np.int64), np.full(n, ds.sonnet_output_len, dtype=np.int64), ds.shared_prefix_tokens()
