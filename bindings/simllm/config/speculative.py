"""Speculative decoding settings, named as vLLM's ``--speculative-config`` keys, and the acceptance
model they state.

vLLM v1 (``vllm/config/speculative.py``, ``vllm/v1/core/sched/scheduler.py``,
``vllm/v1/sample/rejection_sampler.py``, ``vllm/v1/spec_decode/eagle.py``): each engine step runs the
target over every decoding request's last token and its ``k = num_speculative_tokens`` draft tokens
(``1 + k`` tokens against the token budget, logits at each), keeps the drafts up to the first
rejection and one token of the target's own (the correction, or the bonus when all ``k`` pass): 1 to
``k + 1`` tokens a request and step, streamed as one chunk. Then the drafter proposes the next ``k``:
``mtp`` (DeepSeek-V3's multi-token-prediction layer, one decoder layer run ``k`` times), ``eagle`` /
``eagle3`` (a one-layer head on the target's hidden states), ``draft_model`` (a smaller model) or
``ngram`` (prompt lookup on the CPU, no GPU pass).

How often drafts are accepted is a property of the model pair and the traffic, which simllm cannot
derive; it is stated as vLLM's synthetic rejection sampling states it
(``rejection_sample_method: synthetic``): ``synthetic_acceptance_rates``, the *unconditional*
per-position rates (entry ``i`` the probability that the first ``i + 1`` drafts are all accepted,
non-increasing, what vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos`` over
``vllm:spec_decode_num_drafts`` measures), or ``synthetic_acceptance_length``, the mean tokens a step
(``1 + accepted / drafts``), resolved to vLLM's least-variance schedule: full acceptance up to the
integer part, the fraction next, then none (2.6 at ``k = 3``: ``[1, 0.6, 0]``).

May import: :mod:`simllm.errors`.
"""
import dataclasses
import json
import math
import re
from dataclasses import dataclass

from simllm.errors import CLI, ConfigError

METHODS = ("mtp", "eagle", "eagle3", "draft_model", "ngram")
# vLLM's per-model MTP method names, all rewritten to "mtp" (SpeculativeConfig.__post_init__)
MTP_ALIASES = ("deepseek_mtp", "mimo_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp", "glm4_moe_mtp")
ACCEPTANCE_FILE = "acceptance_metrics_file"  # simllm's key: the rates measured by a vLLM server
KEYS = ("method", "num_speculative_tokens", "synthetic_acceptance_rates", "synthetic_acceptance_length", ACCEPTANCE_FILE,
        "model",
        "draft_tensor_parallel_size", "rejection_sample_method")
FLAG = "--speculative-config"
MAX_SPECULATIVE_TOKENS = 32
MAX_METRICS_BYTES = 64 << 20  # a /metrics scrape is kilobytes; read no more than this


@dataclass(frozen=True)
class SpeculativeConfig:
    """A speculative-decoding setup: the drafter, ``k`` and the stated acceptance.

    Attributes
    ----------
    method : str
        One of :data:`METHODS`.
    num_speculative_tokens : int
        Draft tokens ``k`` proposed per request and step (1 to 32).
    acceptance_rates : tuple of float
        Unconditional per-position acceptance, length ``k``, non-increasing, each in [0, 1].
    model : str
        The drafter's model (preset name or path) for ``draft_model``; "" otherwise.
    draft_tensor_parallel_size : int
        The drafter's tensor parallelism (vLLM: 1 or the target's; 0 = the target's).
    """

    method: str
    num_speculative_tokens: int
    acceptance_rates: tuple
    model: str = ""
    draft_tensor_parallel_size: int = 0

    def __post_init__(self):
        k = self.num_speculative_tokens
        if self.method not in METHODS:
            _bad("method", self.method, "one of " + ", ".join(METHODS + MTP_ALIASES))
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            _bad("num_speculative_tokens", k, f"an integer from 1 to {MAX_SPECULATIVE_TOKENS}")
        rates = self.acceptance_rates
        if len(rates) != k or any(not (0.0 <= r <= 1.0) for r in rates) or any(
                b > a for a, b in zip(rates, rates[1:])):
            _bad("synthetic_acceptance_rates", list(rates),
                 f"{k} non-increasing rates in [0, 1], one per draft position")
        if (self.method == "draft_model") != bool(self.model):
            _bad("model", self.model or "(none)", "a draft model's preset name or path with method draft_model, "
                 "and only with it")
        if self.draft_tensor_parallel_size < 0:
            _bad("draft_tensor_parallel_size", self.draft_tensor_parallel_size, "a positive integer")

    @property
    def tokens_per_step(self):
        """Expected tokens a decoding request emits per step: ``1 + sum(acceptance_rates)``
        (vLLM's mean acceptance length)."""
        return 1.0 + math.fsum(self.acceptance_rates)

    def emitted_distribution(self):
        """Probabilities of emitting ``1 .. k + 1`` tokens in a step (a tuple of ``k + 1``):
        ``P(m) = rate[m - 2] - rate[m - 1]``, with ``rate[-1] = 1`` and ``rate[k] = 0``."""
        r = (1.0,) + tuple(self.acceptance_rates) + (0.0,)
        return tuple(r[m] - r[m + 1] for m in range(len(r) - 1))

    def vllm_dict(self):
        """The ``--speculative-config`` JSON object of this setup (parses back to it)."""
        out = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
               "synthetic_acceptance_rates": list(self.acceptance_rates)}
        if self.model:
            out["model"] = self.model
        if self.draft_tensor_parallel_size:
            out["draft_tensor_parallel_size"] = self.draft_tensor_parallel_size
        return out

    def to_dict(self):
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "synthetic_acceptance_rates": list(self.acceptance_rates), "model": self.model or None,
                "draft_tensor_parallel_size": self.draft_tensor_parallel_size or None,
                "mean_acceptance_length": self.tokens_per_step}


def _bad(key, value, expected):
    raise ConfigError(expected, source=FLAG, key=key, value=value)


def with_tokens(spec, k, key=FLAG):
    """``spec`` proposing ``k`` drafts instead: its first ``k`` per-position rates (unconditional
    rates do not depend on how many drafts follow), None for ``k = 0``. Raises
    :class:`ConfigError` without a ``spec`` or for more drafts than it states rates for."""
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_SPECULATIVE_TOKENS:
        raise ConfigError(f"a number of draft tokens from 0 to {MAX_SPECULATIVE_TOKENS}", source=CLI, key=key, value=k)
    if k == 0:
        return None
    if spec is None:
        raise ConfigError("a base --speculative-config stating the acceptance (the drafter's rates per position)",
                          source=CLI, key=key, value=k)
    if k > spec.num_speculative_tokens:
        raise ConfigError(f"at most {spec.num_speculative_tokens}: --speculative-config states the acceptance of "
                          f"{spec.num_speculative_tokens} positions; state more to try more drafts",
                          source=CLI, key=key, value=k)
    return dataclasses.replace(spec, num_speculative_tokens=k, acceptance_rates=spec.acceptance_rates[:k])


_METRIC = re.compile(r'^(vllm:spec_decode_num_drafts|vllm:spec_decode_num_accepted_tokens_per_pos)(?:_total)?'
                     r'(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*$')
_POSITION = re.compile(r'position="(\d+)"')


def rates_from_metrics(path, k):
    """The first ``k`` per-position acceptance rates a vLLM server measured, from a scrape of its
    Prometheus ``/metrics`` (``curl host:8000/metrics > FILE`` after a benchmark): position ``i``'s
    ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` over
    ``vllm:spec_decode_num_drafts_total``, summed over the engines' label sets. Raises
    :class:`ConfigError` naming the file for a missing file, counters or positions."""
    key = ACCEPTANCE_FILE
    if not isinstance(path, str) or not path:
        _bad(key, path, "the path of a vLLM /metrics scrape")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(MAX_METRICS_BYTES).splitlines()
    except OSError as err:
        raise ConfigError(f"a readable vLLM /metrics scrape ({err.strerror})", source=FLAG, key=key,
                          value=path) from None
    drafts = 0.0
    per_pos = {}
    for line in lines:
        m = _METRIC.match(line.strip())
        if not m:
            continue
        value = float(m.group(3))
        if not math.isfinite(value) or value < 0:
            raise ConfigError("finite counts >= 0", source=path, key=m.group(1), value=m.group(3))
        if m.group(1) == "vllm:spec_decode_num_drafts":
            drafts += value
        else:
            pos = _POSITION.search(m.group(2) or "")
            if pos:
                i = int(pos.group(1))
                per_pos[i] = per_pos.get(i, 0.0) + value
    if drafts <= 0:
        raise ConfigError("vllm:spec_decode_num_drafts_total > 0 (a scrape after speculative decoding ran)",
                          source=path, key="vllm:spec_decode_num_drafts_total", value=drafts)
    missing = [i for i in range(k) if i not in per_pos]
    if missing:
        raise ConfigError(f"vllm:spec_decode_num_accepted_tokens_per_pos_total for positions 0..{k - 1} "
                          f"(num_speculative_tokens {k})", source=path, key="position", value=missing[0])
    rates = [min(per_pos[i] / drafts, 1.0) for i in range(k)]
    for i in range(1, k):  # counted over the same drafts: non-increasing but for a draft cut short
        rates[i] = min(rates[i], rates[i - 1])
    return tuple(rates)


def rates_from_length(length, k):
    """vLLM's least-variance per-position rates for a mean acceptance length ``length`` (tokens a
    step, 1 to ``k + 1``): ``min(max(length - 1 - i, 0), 1)`` at position ``i``."""
    return tuple(min(max(length - 1.0 - i, 0.0), 1.0) for i in range(k))


def parse_speculative_config(text):
    """A :class:`SpeculativeConfig` from vLLM's ``--speculative-config`` JSON object
    (:func:`speculative_from_dict` reads its keys). Raises :class:`ConfigError` naming the key."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ConfigError("a JSON object such as '{\"method\": \"mtp\", \"num_speculative_tokens\": 1, "
                          "\"synthetic_acceptance_rates\": [0.8]}'", source=CLI, key=FLAG, value=text) from err
    if not isinstance(raw, dict):
        raise ConfigError("a JSON object", source=CLI, key=FLAG, value=text)
    return speculative_from_dict(raw)


def speculative_config(value, flag=FLAG):
    """``ServingConfig.speculative_config``'s normaliser: None, a :class:`SpeculativeConfig`, its
    JSON text or its mapping (a YAML section, a sweep value) to a :class:`SpeculativeConfig` or None."""
    if value is None or isinstance(value, SpeculativeConfig):
        return value
    if isinstance(value, str):
        return parse_speculative_config(value)
    if isinstance(value, dict):
        return speculative_from_dict(value)
    raise ConfigError("a JSON object of vLLM's speculative config keys (" + ", ".join(KEYS) + ")",
                      source=CLI, key=flag, value=value)


def speculative_from_dict(raw):
    """A :class:`SpeculativeConfig` from a mapping of vLLM's ``--speculative-config`` keys.

    Keys: ``method``, ``num_speculative_tokens``, exactly one of ``synthetic_acceptance_rates``
    (a number repeats over the ``k`` positions only when it is 0 or 1; else a list of ``k``),
    ``synthetic_acceptance_length`` and ``acceptance_metrics_file`` (:func:`rates_from_metrics`),
    ``model`` (``draft_model``), ``draft_tensor_parallel_size``,
    and ``rejection_sample_method`` (``synthetic`` or left out). Raises :class:`ConfigError`
    naming the key.
    """
    for key in raw:
        if key not in KEYS:
            _bad(key, raw[key], "a known key: " + ", ".join(KEYS))
    method = raw.get("method", "")
    method = "mtp" if method in MTP_ALIASES else method
    k = raw.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        _bad("num_speculative_tokens", k, f"an integer from 1 to {MAX_SPECULATIVE_TOKENS}")
    if raw.get("rejection_sample_method", "synthetic") != "synthetic":
        _bad("rejection_sample_method", raw["rejection_sample_method"],
             "synthetic (simllm cannot derive how often a real drafter is accepted: state it)")
    given = [key for key in ("synthetic_acceptance_rates", "synthetic_acceptance_length", ACCEPTANCE_FILE) if key in raw]
    if len(given) != 1:
        _bad("synthetic_acceptance_rates", " and ".join(given) or "(none)",
             "exactly one of synthetic_acceptance_rates (per-position, unconditional), synthetic_acceptance_length "
             f"(mean tokens a step) and {ACCEPTANCE_FILE} (a vLLM /metrics scrape): how often drafts pass is the "
             "model pair's, not simllm's")
    if given[0] == ACCEPTANCE_FILE:
        rates = rates_from_metrics(raw[ACCEPTANCE_FILE], k)
    elif given[0] == "synthetic_acceptance_length":
        length = raw["synthetic_acceptance_length"]
        if isinstance(length, bool) or not isinstance(length, (int, float)) or not 1.0 <= length <= k + 1:
            _bad("synthetic_acceptance_length", length, f"a number from 1 to {k + 1} (num_speculative_tokens + 1)")
        rates = rates_from_length(float(length), k)
    else:
        rates = raw["synthetic_acceptance_rates"]
        if isinstance(rates, (int, float)) and not isinstance(rates, bool) and rates in (0, 1):
            rates = [rates] * k
        if not isinstance(rates, list) or any(isinstance(r, bool) or not isinstance(r, (int, float)) for r in rates):
            _bad("synthetic_acceptance_rates", rates, f"a list of {k} numbers in [0, 1]")
        rates = tuple(float(r) for r in rates)
    model = raw.get("model") or ""
    if method == "mtp" and model:
        model = ""  # vLLM: MTP runs the target checkpoint's own layer
    draft_tp = raw.get("draft_tensor_parallel_size", 0)
    if isinstance(draft_tp, bool) or not isinstance(draft_tp, int):
        _bad("draft_tensor_parallel_size", draft_tp, "a positive integer")
    return SpeculativeConfig(method=method, num_speculative_tokens=k, acceptance_rates=rates,
                             model=str(model), draft_tensor_parallel_size=draft_tp)
