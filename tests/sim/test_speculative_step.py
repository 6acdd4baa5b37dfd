"""Speculative decoding in estimate: the verification step, the drafter and the acceptance, against
closed forms."""
import pytest

import simllm
from helpers import build
from simcore import iteration_time_nb
from simllm.config.speculative import SpeculativeConfig
from simllm.sim.speculative import EAGLE3_DRAFT_VOCAB, draft_seconds, pack_drafter


def spec(method, k, rates, **kw):
    return SpeculativeConfig(method, k, tuple(rates), **kw)


def est(name, hw, s=None, **kw):
    return simllm.estimate(simllm.load_model(name), simllm.load_hardware(hw), s or simllm.ServingConfig(), **kw)


def test_full_acceptance_emits_k_plus_one_and_none_costs_more_than_plain_decode():
    e1 = est("llama-3.1-8b", "h100-sxm", batch_size=4, speculative=spec("eagle", 3, [1, 1, 1]))
    sp = e1.speculative
    assert sp.tokens_per_step == 4.0
    assert sp.tpot_s == pytest.approx((sp.verify.seconds + sp.draft_s) / 4, rel=1e-12)
    e0 = est("llama-3.1-8b", "h100-sxm", batch_size=4, speculative=spec("eagle", 3, [0, 0, 0]))
    sp0 = e0.speculative
    assert sp0.tokens_per_step == 1.0
    assert sp0.tpot_s == pytest.approx(sp0.verify.seconds + sp0.draft_s, rel=1e-12)
    assert sp0.tpot_s > e0.decode.seconds  # verifying drafts that all fail is slower than plain decode
    assert sp0.verify.seconds == sp.verify.seconds and sp0.draft_s == sp.draft_s  # acceptance costs nothing


def test_verification_is_a_k_plus_one_token_forward_with_logits_at_each():
    """Batch 8, k = 2, context c: 24 new tokens, pairs 8 (3c + 6), keys read 8 (c + 3), 24 logit rows."""
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    e = est("llama-3.1-8b", "h100-sxm", s, batch_size=8, speculative=spec("ngram", 2, [0.5, 0.25]))
    v = e.speculative.verify
    c = v.context_tokens
    assert (v.batch_size, v.new_tokens, c) == (8, 3, 1024 + 64)
    assert v.seconds == pytest.approx(iteration_time_nb(p, 24.0, 8 * (3 * c + 6.0), 8 * (c + 3.0), 24.0), rel=1e-12)
    lm = next(o for o in v.ops if o.name == "lm_head")
    assert lm.flops == pytest.approx(2 * 24 * 128256 * 4096, rel=1e-12)
    assert e.speculative.draft_s == 0.0 and e.speculative.draft_weight_bytes == 0.0  # n-gram drafts on the CPU


def test_mtp_drafts_with_one_layer_of_the_target_k_times():
    """DeepSeek-V3's MTP module: one MLA + MoE layer after eh_proj (2h x h), run k times: the first
    pass over the step's batch x (1 + k) tokens, the rest over one token a request."""
    model, hw, s, r, p = build("deepseek-v3", "h200-sxm", tensor_parallel_size=8)
    d = pack_drafter(model, hw, s, spec("mtp", 2, [0.8, 0.6]))
    dp = d.params
    assert (dp.n_layers, dp.n_moe_layers, dp.n_experts) == (1, 1, 256.0)
    h = 7168.0
    assert d.proj_params == 2 * h * h / 8
    b, c = 4.0, 1000.0

    def proj(t):
        return max(2 * t * d.proj_params / (dp.gemm_flops * dp.eff_compute),
                   (d.proj_params * dp.w_bytes + t * 3 * h * dp.a_bytes) / (dp.mem_bw * dp.eff_bw)) + dp.launch_s

    want = (iteration_time_nb(dp, b * 3, b * (3 * c + 6), b * (c + 3), b) + proj(b * 3)
            + iteration_time_nb(dp, b, b * (c + 4), b * (c + 4), b) + proj(b))
    assert draft_seconds(d, 2, 4, 1000) == pytest.approx(want, rel=1e-12)
    # its weights: the layer and eh_proj on this GPU, not the shared embedding and head
    assert d.weight_bytes < 2.0e9 and d.kv_bytes_per_token == pytest.approx(576 * 2, rel=1e-12)


def test_eagle3_head_weights_closed_form():
    """EAGLE-3 for Llama-3.1-8B (BF16): one Llama layer (QKV 4096 x 6144, O 4096^2, gated MLP
    3 x 4096 x 14336, two norms), fc 3 x 4096^2, its own 32,000-token head and final norm."""
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    d = pack_drafter(model, hw, s, spec("eagle3", 3, [0.73, 0.521, 0.355]))
    h = 4096
    layer = h * 6144 + h * h + 3 * h * 14336 + 2 * h
    want = 2 * (layer + 3 * h * h + EAGLE3_DRAFT_VOCAB * h + h)
    assert d.weight_bytes == pytest.approx(want, rel=1e-12)
    with_spec = est("llama-3.1-8b", "h100-sxm", speculative=spec("eagle3", 3, [0.73, 0.521, 0.355]))
    plain = est("llama-3.1-8b", "h100-sxm")
    assert with_spec.memory.weight_bytes - plain.memory.weight_bytes == pytest.approx(want, rel=1e-12)
    assert with_spec.memory.kv_bytes_per_token - plain.memory.kv_bytes_per_token == pytest.approx(2 * 8 * 128 * 2)


def test_the_gain_shrinks_with_the_batch():
    """At batch 1 the verification's extra tokens ride on the weights' bandwidth; at large batches
    the step is compute-bound and the same acceptance pays less, and a lower one less than nothing
    (Llama-3.1-8B on an H100: 4 x 256 verification tokens take twice a 256-row decode step)."""
    sc = spec("eagle3", 3, [0.73, 0.521, 0.355])
    speedups = []
    for b in (1, 64, 128, 256):
        e = est("llama-3.1-8b", "h100-sxm", batch_size=b, input_len=512, output_len=128, speculative=sc)
        speedups.append(e.decode.seconds / e.speculative.tpot_s)
    assert speedups[0] > 1.8 and speedups[1] > speedups[2] > speedups[3]
    low = est("llama-3.1-8b", "h100-sxm", batch_size=256, input_len=512, output_len=128,
              speculative=spec("eagle3", 3, [0.6, 0.0, 0.0]))
    assert low.speculative.tpot_s > low.decode.seconds
    assert low.speculative.verify.seconds > 1.8 * low.decode.seconds


def test_draft_model_runs_the_small_model_k_times():
    model, hw, s, r, p = build("qwen2.5-7b", "h100-sxm")
    d = pack_drafter(model, hw, s, spec("draft_model", 4, [0.9, 0.7, 0.5, 0.3], model="qwen2.5-0.5b"))
    assert d.params.n_layers == 24 and d.proj_params == 0.0
    dp = d.params
    want = iteration_time_nb(dp, 5.0, 5 * 1000 + 15.0, 1005.0, 1.0) + sum(
        iteration_time_nb(dp, 1.0, 1000 + 5.0 + i, 1000 + 5.0 + i, 1.0) for i in range(1, 4))
    assert draft_seconds(d, 4, 1, 1000) == pytest.approx(want, rel=1e-12)
    with pytest.raises(simllm.ConfigError, match="draft model"):
        pack_drafter(model, hw, s, spec("draft_model", 1, [0.5], model="no-such-model"))


def test_cli_estimate_prints_and_exports_the_speculative_step(capsys):
    from simllm.cli.app import main
    cfg = '{"method": "mtp", "num_speculative_tokens": 1, "synthetic_acceptance_rates": [0.81]}'
    rc = main(["estimate", "deepseek-v3", "h200-sxm", "-tp", "8", "--batch-size", "8", "--speculative-config", cfg,
               "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0
    import json
    sp = json.loads(out)["speculative"]
    assert sp["method"] == "mtp" and sp["tokens_per_step"] == pytest.approx(1.81)
    assert sp["tpot_ms"] == pytest.approx(sp["step_time_ms"] / 1.81, rel=1e-12) and sp["speedup"] > 1.0
    rc = main(["estimate", "deepseek-v3", "h200-sxm", "-tp", "8", "--speculative-config", cfg])
    out = capsys.readouterr().out
    assert rc == 0 and "Speculative decoding: mtp, 1 draft token a step" in out and "drafter:" in out
    rc = main(["estimate", "llama-3.1-8b", "h100-sxm", "--speculative-config", '{"method": "mtp"}'])
    err = capsys.readouterr().err
    assert rc == 2 and "num_speculative_tokens" in err and err.count("\n") == 1
