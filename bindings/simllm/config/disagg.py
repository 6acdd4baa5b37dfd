"""Disaggregated prefill/decode settings: how many instances each pool has, how each differs from
the base serving settings (parallelism, batching, GPU), and how KV caches move between them.

The pools are described as a user launches them: the base flags (``-tp``, ``--max-num-seqs``, ...)
apply to both, ``--prefill-config`` / ``--decode-config`` override them per pool with
:class:`~simllm.config.serving.ServingConfig`'s field names (vLLM's engine arguments) plus ``gpu``
(a hardware preset: heterogeneous pools), and ``--kv-transfer-config`` takes vLLM's
``kv_connector`` key (NixlConnector, MooncakeConnector, ...: informational) with the link's
``kv_transfer_bandwidth_gbps`` (one prefill instance's link, GB/s) and
``kv_transfer_latency_us``, and ``first_token`` (``prefill``: SGLang and TensorRT-LLM stream the
prefill's token once its KV cache has arrived; ``decode``: vLLM's proxy discards it and the decode
instance recomputes the prompt's last token; ``auto``: by framework).

May import: :mod:`simllm.config.serving`, :mod:`simllm.errors`.
"""
import json
import math
from dataclasses import dataclass, fields, replace

from simllm.config.serving import CLI, ServingConfig
from simllm.errors import ConfigError

FIRST_TOKEN = ("auto", "prefill", "decode")
POOL_FLAGS = {"prefill": "--prefill-config", "decode": "--decode-config"}
TRANSFER_FLAG = "--kv-transfer-config"
TRANSFER_KEYS = ("kv_connector", "kv_role", "kv_transfer_bandwidth_gbps", "kv_transfer_latency_us", "first_token")
MAX_INSTANCES = 4096
_SERVING_KEYS = {f.name for f in fields(ServingConfig)}


@dataclass(frozen=True)
class DisaggConfig:
    """A prefill pool and a decode pool.

    Attributes
    ----------
    prefill_instances, decode_instances : int
        Engine instances in each pool (each ``tensor_parallel_size x data_parallel_size`` GPUs).
    prefill, decode : tuple of (str, object)
        Each pool's overrides of the base :class:`ServingConfig` (field name, value).
    prefill_gpu, decode_gpu : str
        Each pool's hardware preset or YAML; "" = the base hardware.
    kv_transfer_bandwidth_gbps : float
        One prefill instance's link to the decode pool, GB/s; 0 = its GPUs' NVLink when both pools
        fit one NVLink domain (``gpus_per_node``) of the same GPU, else their network NICs.
    kv_transfer_latency_us : float
        Before a transfer's first byte moves; negative = the link's (NVLink's or the network's).
    first_token : str
        One of :data:`FIRST_TOKEN`.
    kv_connector : str
        vLLM's connector name, kept for the report.
    """

    prefill_instances: int = 1
    decode_instances: int = 1
    prefill: tuple = ()
    decode: tuple = ()
    prefill_gpu: str = ""
    decode_gpu: str = ""
    kv_transfer_bandwidth_gbps: float = 0.0
    kv_transfer_latency_us: float = -1.0
    first_token: str = "auto"
    kv_connector: str = ""

    def __post_init__(self):
        for key in ("prefill_instances", "decode_instances"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_INSTANCES:
                raise ConfigError(f"an integer from 1 to {MAX_INSTANCES}", source=CLI,
                                  key="--" + key.replace("_", "-"), value=v)
        bw = self.kv_transfer_bandwidth_gbps
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not (math.isfinite(bw) and 0.0 <= bw <= 1e6):
            raise ConfigError("GB/s from 0 (the link's) to 1e6", source=CLI,
                              key=TRANSFER_FLAG + " kv_transfer_bandwidth_gbps", value=bw)
        lat = self.kv_transfer_latency_us
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not (math.isfinite(lat) and lat <= 1e7):
            raise ConfigError("microseconds up to 1e7 (negative: the link's)", source=CLI,
                              key=TRANSFER_FLAG + " kv_transfer_latency_us", value=lat)
        if self.first_token not in FIRST_TOKEN:
            raise ConfigError("one of " + ", ".join(FIRST_TOKEN), source=CLI, key=TRANSFER_FLAG + " first_token",
                              value=self.first_token)

    def pool_serving(self, base, role):
        """``base`` with pool ``role``'s (``prefill`` or ``decode``) overrides; a bad one raises
        :class:`ConfigError` naming the pool's flag and key."""
        overrides = dict(getattr(self, role))
        try:
            return replace(base, **overrides)
        except ConfigError as err:
            key = next((k for k in overrides if err.key and err.key.lstrip("-").replace("-", "_") == k), err.key)
            raise ConfigError(err.expected, source=CLI, key=f"{POOL_FLAGS[role]} {key}", value=err.value) from None

    def first_token_on_decode(self, framework):
        """Whether the decode pool samples the first token (vLLM) for ``framework``'s name."""
        if self.first_token == "auto":
            return framework == "vllm"
        return self.first_token == "decode"

    def to_dict(self):
        return {"prefill_instances": self.prefill_instances, "decode_instances": self.decode_instances,
                "prefill_config": dict(self.prefill, **({"gpu": self.prefill_gpu} if self.prefill_gpu else {})),
                "decode_config": dict(self.decode, **({"gpu": self.decode_gpu} if self.decode_gpu else {}))}


def _json_object(text, flag):
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ConfigError("a JSON object", source=CLI, key=flag, value=text) from err
    if not isinstance(raw, dict):
        raise ConfigError("a JSON object", source=CLI, key=flag, value=text)
    return raw


def parse_pool_config(text, role):
    """(overrides, gpu) of ``--prefill-config`` / ``--decode-config`` JSON: ServingConfig field
    names (``tensor_parallel_size``, ``max_num_seqs``, ...) and ``gpu``."""
    flag = POOL_FLAGS[role]
    raw = _json_object(text, flag) if text else {}
    gpu = raw.pop("gpu", "")
    if not isinstance(gpu, str):
        raise ConfigError("a hardware preset name or YAML path", source=CLI, key=f"{flag} gpu", value=gpu)
    for key in raw:
        if key not in _SERVING_KEYS:
            raise ConfigError("gpu or a serving setting: " + ", ".join(sorted(_SERVING_KEYS)), source=CLI,
                              key=f"{flag} {key}", value=raw[key])
    return tuple(sorted(raw.items())), gpu


def parse_transfer_config(text):
    """The ``--kv-transfer-config`` JSON's keys as :class:`DisaggConfig` keyword arguments."""
    raw = _json_object(text, TRANSFER_FLAG) if text else {}
    out = {}
    for key, value in raw.items():
        if key not in TRANSFER_KEYS:
            raise ConfigError("a known key: " + ", ".join(TRANSFER_KEYS), source=CLI, key=f"{TRANSFER_FLAG} {key}",
                              value=value)
        if key == "kv_role":
            continue  # vLLM's kv_producer / kv_consumer / kv_both: the pool says it here
        out[key] = str(value) if key == "kv_connector" else value
    return out
