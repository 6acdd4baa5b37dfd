"""Speculative decoding's drafter and its step, priced by the kernels every step uses.

One engine step of vLLM v1 with speculation (``vllm/v1/worker/gpu_model_runner.py``,
``execute_model``): the target's forward over every decoding request's ``1 + k`` tokens (logits at
each), rejection sampling, then the drafter's ``k`` passes (``vllm/v1/spec_decode/eagle.py``,
``propose``): the first over every token the step scheduled, the next ``k - 1`` over one token a
request. The drafter (:func:`drafter_model`) is

- ``mtp``: the checkpoint's multi-token-prediction module, one decoder layer of the target's kind
  (DeepSeek-V3's: MLA and MoE) after a projection of ``[embedding; hidden]`` (``eh_proj``, 2h x h),
  sharing the target's embedding and LM head; run ``k`` times for ``k`` tokens
  (``vllm/model_executor/models/deepseek_mtp.py``);
- ``eagle`` / ``eagle3``: one dense decoder layer after a projection of 2 (EAGLE) or 3 (EAGLE-3)
  hidden states (``fc``); EAGLE shares the target's LM head, EAGLE-3 has its own over a 32,000-token
  draft vocabulary (``draft_vocab_size`` of the EAGLE-3 checkpoints, e.g.
  yuhuili/EAGLE3-LLaMA3.1-Instruct-8B); both share the embedding;
- ``draft_model``: a whole smaller model at ``draft_tensor_parallel_size`` (default the target's);
- ``ngram``: prompt lookup on the CPU, no GPU work.

The one-layer drafters run the target's serving settings (dtype, TP, experts' parallelism); their
KV cache (one layer) sits in the target's pool.
"""
import dataclasses

import numpy as np

from simcore import Speculation, acceptance_thresholds, draft_totals_nb, kv_bytes_per_token_nb, resident_weight_bytes_nb
from simcore.params import NO_RATES, NO_THRESHOLDS
from simllm.config import serving as serving_mod
from simllm.config import speculative as speculative_mod
from simllm.config.model import load_model
from simllm.errors import CLI, ConfigError
from simllm.sim.pack import pack_cost_params

EAGLE3_DRAFT_VOCAB = 32000  # draft_vocab_size of the EAGLE-3 checkpoints (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)


@dataclasses.dataclass(frozen=True)
class Drafter:
    """A drafter packed for one GPU: ``params`` (None for ``ngram``), the input projection it runs
    before its layer (``proj_params``: ``eh_proj`` / ``fc`` weights on this GPU, 0 for a whole
    model), its own weights and KV per token on this GPU (shared embedding and head left out)."""

    method: str
    params: object
    proj_params: float
    weight_bytes: float
    kv_bytes_per_token: float


def drafter_model(model, spec):
    """The drafter's :class:`~simllm.config.model.ModelConfig` (None for ``ngram``)."""
    if spec.method == "ngram":
        return None
    if spec.method == "draft_model":
        try:
            return load_model(spec.model)
        except ConfigError as err:
            raise ConfigError(f"a draft model preset or file ({err.expected})", source=speculative_mod.FLAG,
                              key="model", value=spec.model) from None
    one = dict(layers=1, windowed_layers=0, linear_layers=0, declared_parameters=0.0, warnings=())
    if spec.method == "mtp":
        return dataclasses.replace(model, name=f"{model.name} MTP layer", moe_layers=1 if model.is_moe else 0, **one)
    dense = model.intermediate_size or model.moe_intermediate_size * max(model.experts_per_token, 1)
    return dataclasses.replace(
        model, name=f"{model.name} {spec.method.upper()} head", moe_layers=0, num_experts=0, experts_per_token=0,
        moe_intermediate_size=0, num_shared_experts=0, shared_expert_intermediate_size=0, intermediate_size=dense,
        vocab_size=EAGLE3_DRAFT_VOCAB if spec.method == "eagle3" else model.vocab_size, **one)


def pack_drafter(model, hardware, serving, spec, framework=None):
    """The :class:`Drafter` of ``spec`` for ``model`` served as ``serving`` on ``hardware``."""
    dm = drafter_model(model, spec)
    if dm is None:
        return Drafter(spec.method, None, 0.0, 0.0, 0.0)
    if spec.method == "draft_model":
        tp = spec.draft_tensor_parallel_size or serving.tensor_parallel_size
        ds = dataclasses.replace(serving, tensor_parallel_size=tp, data_parallel_size=1, expert_parallel_size=1,
                                 enable_expert_parallel=False, num_redundant_experts=0, max_model_len=0)
    else:
        ds = dataclasses.replace(serving, max_model_len=0)
    r = serving_mod.resolve(dm, hardware, ds)
    # The drafter's passes run inside the target's engine step: no CPU time of their own.
    p = pack_cost_params(dm, hardware, ds, r, framework)._replace(iter_overhead_s=0.0, seq_overhead_s=0.0)
    h = float(model.hidden_size)
    embedding = p.vocab * p.hidden / p.tp * p.a_bytes
    if spec.method == "draft_model":
        proj, weights = 0.0, resident_weight_bytes_nb(p, dm.tie_word_embeddings)
    elif spec.method == "eagle3":  # its own small head, the target's embedding
        proj, weights = 3.0 * h * h / p.tp, resident_weight_bytes_nb(p, False) - embedding
    else:  # MTP and EAGLE share the target's embedding and LM head
        proj, weights = 2.0 * h * h / p.tp, resident_weight_bytes_nb(p, True) - embedding
    weights += proj * p.w_bytes
    return Drafter(spec.method, p, proj, float(weights), float(kv_bytes_per_token_nb(p)))


def draft_seconds(drafter, k, batch, context):
    """Seconds of the drafter's ``k`` passes in one step of ``batch`` decoding requests at
    ``context`` cached tokens each (``simcore.speculative.draft_totals_nb``): the first over the
    step's ``batch x (1 + k)`` tokens, the others over ``batch`` tokens, each sampling one token a
    request."""
    if drafter.params is None or batch <= 0:
        return 0.0
    b, q, c = float(batch), float(1 + k), float(context)
    sp = Speculation(NO_RATES, NO_THRESHOLDS, 0, drafter.params, float(drafter.proj_params), True)
    return draft_totals_nb(sp, k, b * q, b * (q * c + q * (q + 1.0) / 2.0), b * (c + q), b, b * (c + q))[0]


def speculation(params, drafter, seed, spec):
    """The engine kernels' :class:`simcore.Speculation` of ``spec`` (None without it): its
    acceptance rates, ``drafter`` (:func:`pack_drafter`; its ``params`` None for n-gram drafts, whose
    passes cost no GPU time: the target's ``params`` stand in) and the draws' ``seed``."""
    if spec is None:
        return None
    rates = np.asarray(spec.acceptance_rates, dtype=np.float64)
    rates.flags.writeable = False
    if drafter is None or drafter.params is None:
        return Speculation(rates, acceptance_thresholds(rates), int(seed), params, 0.0, False)
    return Speculation(rates, acceptance_thresholds(rates), int(seed), drafter.params, float(drafter.proj_params), True)


def check_speculative(model, serving):
    """Raise :class:`ConfigError` unless ``serving``'s speculative decoding can run: drafts are
    verified against a KV cache, in continuous batching (vLLM's only scheduler)."""
    if not model.kv_cache_enabled:
        raise ConfigError("a model with a KV cache: speculative decoding verifies drafts against it",
                          source=CLI, key=speculative_mod.FLAG, value=model.name)
    if serving.batching != "continuous":
        raise ConfigError("continuous batching (--batching continuous): drafts are verified in vLLM's scheduler",
                          source=CLI, key=speculative_mod.FLAG, value=f"with --batching {serving.batching}")
