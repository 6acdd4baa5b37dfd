"""Speculative decoding through simulate, the CLI, sweep, optimize and diagnose: the figures under
vLLM's keys, the batch-size effect, memory, and bad input."""
import json

import pytest

import simllm
from simllm.analysis import diagnose as dg
from simllm.cli.app import main
from simllm.config.speculative import with_tokens
from simllm.config.workload import Workload, fixed
from simllm.errors import ConfigError
from simllm.search.optimize import optimize, parse_over
from simllm.sim.disagg import simulate_disagg

# heavy: speculative decoding's kernel variant (CI's second step)
pytestmark = pytest.mark.heavy

MODEL = simllm.load_model("llama-3.1-8b")
GPU = simllm.load_hardware("h100-sxm")
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "synthetic_acceptance_rates": [0.73, 0.521, 0.355]}
EAGLE3_JSON = json.dumps(EAGLE3)


def serving(spec=EAGLE3, **kw):
    return simllm.ServingConfig(speculative_config=spec, **kw)


def test_summary_carries_vllms_spec_decode_keys_and_the_stated_acceptance():
    w = Workload(num_prompts=200, max_concurrency=16, input_len=fixed(256), output_len=fixed(1000))
    s = simllm.simulate(MODEL, GPU, serving(), w, keep_requests=False).summary
    assert s["speculative_config"]["method"] == "eagle3"
    assert s["spec_decode_acceptance_rate"] == pytest.approx(
        100 * s["spec_decode_accepted_tokens"] / s["spec_decode_draft_tokens"])
    # vLLM's mean acceptance length 1 + sum(rates) = 2.606, less the few last steps with fewer drafts
    assert s["spec_decode_acceptance_length"] == pytest.approx(2.606, abs=0.03)
    # per position: the stated unconditional rates (vLLM's accepted-per-position over num_drafts),
    # which add up to the accepted tokens per step
    per_pos = s["spec_decode_per_position_acceptance_rates"]
    assert per_pos == pytest.approx([0.73, 0.521, 0.355], abs=0.01)
    assert sum(per_pos) * s["spec_decode_num_drafts"] == pytest.approx(s["spec_decode_accepted_tokens"], rel=1e-12)
    # every output token but the first and a request's lone last one is in a verification step
    steps_tokens = s["spec_decode_num_drafts"] + s["spec_decode_accepted_tokens"]
    assert 200 * 998 <= steps_tokens <= 200 * 999
    plain = simllm.simulate(MODEL, GPU, simllm.ServingConfig(), w, keep_requests=False).summary
    assert "spec_decode_num_drafts" not in plain and "speculative_config" not in plain
    assert s["mean_tpot_ms"] < plain["mean_tpot_ms"]


def test_the_gain_shrinks_with_the_batch():
    """One client: the verification's extra tokens ride on the weights' read, TPOT falls ~2x. 256
    clients: the steps are compute-bound and the same acceptance gains much less."""
    gains = []
    for clients in (1, 256):
        w = Workload(num_prompts=max(4, 2 * clients), max_concurrency=clients, input_len=fixed(512),
                     output_len=fixed(256))
        tpot = [simllm.simulate(MODEL, GPU, s, w, keep_requests=False).summary["mean_tpot_ms"]
                for s in (simllm.ServingConfig(), serving())]
        gains.append(tpot[0] / tpot[1])
    assert gains[0] > 1.8 and gains[1] < 0.8 * gains[0]


def test_the_drafter_takes_memory_and_a_kv_share():
    w = Workload(num_prompts=4)
    spec = simllm.simulate(MODEL, GPU, serving(), w, keep_requests=False).summary["memory"]
    plain = simllm.simulate(MODEL, GPU, simllm.ServingConfig(), w, keep_requests=False).summary["memory"]
    assert spec["weight_bytes"] > plain["weight_bytes"] + 0.5e9  # the EAGLE-3 layer, fc and 32k head
    assert spec["kv_bytes_per_token"] > plain["kv_bytes_per_token"]


def test_speculative_decoding_needs_continuous_batching_and_a_kv_cache():
    with pytest.raises(ConfigError, match="continuous batching"):
        simllm.simulate(MODEL, GPU, serving(batching="static"), Workload(num_prompts=2))
    with pytest.raises(ConfigError, match="synthetic_acceptance_rates"):
        serving({"method": "eagle", "num_speculative_tokens": 2})


def test_disaggregated_decode_pool_verifies_drafts():
    w = Workload(num_prompts=100, max_concurrency=16, input_len=fixed(512), output_len=fixed(200))
    s = simulate_disagg(MODEL, GPU, serving(), w, keep_requests=False).summary
    assert s["spec_decode_num_drafts"] == s["decode_pool"]["spec_decode_num_drafts"] > 0
    assert "spec_decode_num_drafts" not in s["prefill_pool"]


def test_cli_run_prints_and_exports_the_speculative_section(capsys):
    args = ["run", "--num-prompts", "50", "--max-concurrency", "8", "--speculative-config", EAGLE3_JSON]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Speculative Decoding" in out and "Acceptance length:" in out
    assert main(args + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spec_decode_num_drafts"] > 0 and data["speculative_config"]["num_speculative_tokens"] == 3
    assert main(["run", "--num-prompts", "5", "--speculative-config", '{"method": "eagle"}']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--speculative-config" in err[0] and "num_speculative_tokens" in err[0]


def test_optimize_over_the_number_of_drafts():
    w = Workload(num_prompts=60, max_concurrency=8, input_len=fixed(512), output_len=fixed(128))
    res = optimize(MODEL, GPU, serving(), w, over=parse_over(["num_speculative_tokens=0,1,3"]))
    by_k = {c.params["num_speculative_tokens"]: c for c in res.candidates}
    assert by_k[0].serving.speculative_config is None
    assert by_k[1].serving.speculative_config.acceptance_rates == (0.73,)
    direct = simllm.simulate(MODEL, GPU, serving(with_tokens(serving().speculative_config, 1)), w, keep_requests=False)
    assert by_k[1].summary["mean_tpot_ms"] == pytest.approx(direct.summary["mean_tpot_ms"], rel=1e-12)
    assert "--speculative-config '{" in by_k[3].run_flags()
    with pytest.raises(ConfigError, match="at most 3"):
        optimize(MODEL, GPU, serving(), w, over=parse_over(["num_speculative_tokens=4"]))
    with pytest.raises(ConfigError, match="base --speculative-config"):
        optimize(MODEL, GPU, simllm.ServingConfig(), w, over=parse_over(["num_speculative_tokens=2"]))


def test_sweep_takes_speculative_configs_and_names_a_bad_one(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("base:\n  model: llama-3.1-8b\n  hardware: h100-sxm\n"
                    "  workload: {num_prompts: 40, max_concurrency: 8, input_len: 256, output_len: 64}\n"
                    "grid:\n  serving.speculative_config:\n    - null\n"
                    f"    - {EAGLE3_JSON}\n")
    res = simllm.sweep(simllm.load_sweep_spec(spec))
    rows = res.table
    assert len(rows) == 2
    assert rows["mean_tpot_ms"][1] < rows["mean_tpot_ms"][0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 40'))
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: .*speculative_config.*num_speculative_tokens"):
        simllm.load_sweep_spec(bad)


def test_diagnose_what_if_toggles_speculative_decoding():
    w = Workload(num_prompts=8, max_concurrency=2, input_len=fixed(256), output_len=fixed(128))
    on = dg.what_if(MODEL, GPU, simllm.ServingConfig(), w, changes=("speculative",))[0]
    direct = simllm.simulate(MODEL, GPU, serving(dg.WHAT_IF_SPECULATIVE), w, keep_requests=False)
    assert on.skipped is None and "--speculative-config" in on.change
    assert on.tpot_ms == pytest.approx(direct.summary["mean_tpot_ms"], rel=1e-12) and on.tpot_change < -0.3
    off = dg.what_if(MODEL, GPU, serving(), w, changes=("speculative",))[0]
    assert off.tpot_change > 0.3 and "without" in off.change


def test_estimate_refuses_speculation_as_run_does():
    """One check for both: static batching verifies no drafts, in estimate as in run."""
    with pytest.raises(ConfigError, match="continuous batching") as err:
        simllm.estimate(MODEL, GPU, serving(batching="static"))
    assert "--speculative-config" in str(err.value)
