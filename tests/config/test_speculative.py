"""vLLM's --speculative-config as simllm reads it, and the acceptance model it states."""
import math

import pytest

from simllm.config.speculative import SpeculativeConfig, parse_speculative_config, rates_from_length
from simllm.errors import ConfigError


@pytest.mark.parametrize("length, k, rates", [
    # vLLM's own cases for synthetic_acceptance_length (tests/v1/spec_decode: least-variance schedule)
    (2.6, 3, [1.0, 0.6, 0.0]), (1.0, 3, [0.0, 0.0, 0.0]), (4.0, 3, [1.0, 1.0, 1.0]), (2.0, 3, [1.0, 0.0, 0.0]),
    (3.5, 4, [1.0, 1.0, 0.5, 0.0]),
])
def test_acceptance_length_resolves_as_vllm_does(length, k, rates):
    assert rates_from_length(length, k) == pytest.approx(rates)
    spec = parse_speculative_config(f'{{"method": "eagle", "num_speculative_tokens": {k}, '
                                    f'"synthetic_acceptance_length": {length}}}')
    assert spec.tokens_per_step == pytest.approx(length)


def test_per_position_rates_give_vllms_mean_acceptance_length():
    """EAGLE-3 on Llama-3.1-8B in vLLM's acceptance test: per-position 0.730, 0.521, 0.355 give a
    mean acceptance length of 2.606 (vLLM pins 2.60)."""
    spec = parse_speculative_config('{"method": "eagle3", "num_speculative_tokens": 3, '
                                    '"synthetic_acceptance_rates": [0.730, 0.521, 0.355]}')
    assert spec.tokens_per_step == pytest.approx(2.606)
    dist = spec.emitted_distribution()  # 1 .. 4 tokens a step
    assert dist == pytest.approx((0.27, 0.209, 0.166, 0.355))
    assert math.fsum(dist) == pytest.approx(1.0)
    assert sum((m + 1) * pm for m, pm in enumerate(dist)) == pytest.approx(spec.tokens_per_step)
    one = parse_speculative_config('{"method": "deepseek_mtp", "num_speculative_tokens": 2, '
                                   '"synthetic_acceptance_rates": 1}')
    assert one.method == "mtp" and one.acceptance_rates == (1.0, 1.0) and one.tokens_per_step == 3.0


@pytest.mark.parametrize("text, key", [
    ('{"method": "mtp", "num_speculative_tokens": 1}', "synthetic_acceptance_rates"),
    ('{"method": "mtp", "num_speculative_tokens": 1, "synthetic_acceptance_rates": [0.8], '
     '"synthetic_acceptance_length": 1.8}', "synthetic_acceptance_rates"),
    ('{"method": "mtp", "num_speculative_tokens": 2, "synthetic_acceptance_rates": [0.5, 0.7]}',
     "synthetic_acceptance_rates"),
    ('{"method": "mtp", "num_speculative_tokens": 2, "synthetic_acceptance_rates": 0.5}', "synthetic_acceptance_rates"),
    ('{"method": "mtp", "num_speculative_tokens": 0, "synthetic_acceptance_length": 1}', "num_speculative_tokens"),
    ('{"method": "mtp", "num_speculative_tokens": true, "synthetic_acceptance_length": 1}', "num_speculative_tokens"),
    ('{"method": "medusa", "num_speculative_tokens": 1, "synthetic_acceptance_length": 1}', "method"),
    ('{"method": "draft_model", "num_speculative_tokens": 1, "synthetic_acceptance_length": 1}', "model"),
    ('{"method": "eagle", "num_speculative_tokens": 1, "synthetic_acceptance_length": 1, '
     '"rejection_sample_method": "standard"}', "rejection_sample_method"),
    ('{"method": "eagle", "num_speculative_tokens": 1, "synthetic_acceptance_length": 2.5}',
     "synthetic_acceptance_length"),
    ('{"mehtod": "eagle"}', "mehtod"),
    ('[1, 2]', "--speculative-config"),
    ('{"method": ', "--speculative-config"),
])
def test_bad_configs_name_their_key(text, key):
    with pytest.raises(ConfigError) as err:
        parse_speculative_config(text)
    assert err.value.key == key and "\n" not in str(err.value)


def test_the_dataclass_checks_its_fields():
    with pytest.raises(ConfigError, match="non-increasing"):
        SpeculativeConfig("eagle", 2, (0.2, 0.3))
    with pytest.raises(ConfigError, match="draft model"):
        SpeculativeConfig("mtp", 1, (0.5,), model="x")


SCRAPE = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 1000.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 500.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 760.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 520.0
"""


def test_acceptance_measured_by_a_vllm_server_from_its_metrics_scrape(tmp_path):
    """Per position, accepted tokens over drafts summed over both engines: 1560 / 2000 and 1020 / 2000."""
    f = tmp_path / "metrics.txt"
    f.write_text(SCRAPE)
    spec = parse_speculative_config(f'{{"method": "mtp", "num_speculative_tokens": 2, '
                                    f'"acceptance_metrics_file": "{f}"}}')
    assert spec.acceptance_rates == pytest.approx((0.78, 0.51))
    with pytest.raises(ConfigError, match=r"metrics.txt: position = 2: .*positions 0..2"):
        parse_speculative_config(f'{{"method": "mtp", "num_speculative_tokens": 3, "acceptance_metrics_file": "{f}"}}')
    with pytest.raises(ConfigError, match="readable"):
        parse_speculative_config(f'{{"method": "mtp", "num_speculative_tokens": 1, '
                                 f'"acceptance_metrics_file": "{tmp_path / "none.txt"}"}}')
    f.write_text(SCRAPE.replace("1000.0", "0"))
    with pytest.raises(ConfigError, match="num_drafts_total > 0"):
        parse_speculative_config(f'{{"method": "mtp", "num_speculative_tokens": 1, "acceptance_metrics_file": "{f}"}}')
    with pytest.raises(ConfigError, match="exactly one of"):
        parse_speculative_config(f'{{"method": "mtp", "num_speculative_tokens": 1, "synthetic_acceptance_rates": [0.5], '
                                 f'"acceptance_metrics_file": "{f}"}}')
