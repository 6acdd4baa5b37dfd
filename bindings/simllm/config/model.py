"""Model configurations: the seed's YAML form, the richer simllm form, and HuggingFace
``config.json`` read directly. :func:`load_model` validates and returns a frozen
:class:`ModelConfig`; derived numbers (parameter counts) are methods of it."""
from dataclasses import dataclass, field, replace
from pathlib import Path

from simllm.config import dtypes, hub, presets
from simllm.config.sections import Section
from simllm.config.yamlio import line_of, load_file
from simllm.errors import ConfigError

# Published parameter counts may differ from what the dimensions give by rounding and
# bookkeeping (buffers, padding); a larger gap means the declared number or the dimensions are wrong.
DECLARED_PARAMS_TOLERANCE = 0.03


@dataclass(frozen=True)
class ModelConfig:
    """A transformer's architecture, as the cost model needs it.

    All sizes are element counts; ``head_dim`` is per attention head. ``intermediate_size`` is the
    dense FFN width; for MoE models ``moe_intermediate_size`` is one routed expert's width and
    ``shared_expert_intermediate_size`` the total width of the always-on shared experts.
    """

    name: str
    dtype: str
    layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_sequence_length: int
    ffn: str = "gated"  # "gated" (SwiGLU/GeGLU: 3 matrices) or "plain" (2 matrices)
    activation: str = "silu"
    norm: str = "rmsnorm"  # "rmsnorm" (weight) or "layernorm" (weight + bias)
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # biases on q, k, v (Qwen2)
    mlp_bias: bool = False
    lm_head_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm of q and k (Qwen3)
    parallel_attention: bool = False  # attention and FFN share one norm (GPT-J)
    sandwich_norm: bool = False  # norms before and after attention and FFN, 4 a layer (Gemma 2/3)
    rotary_dim: int = 0  # 0 means head_dim
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): each token caches one latent of
    # kv_lora_rank plus a rope key of qk_rope_head_dim shared by all heads; head_dim is then the
    # query/key width per head (qk_nope_head_dim + qk_rope_head_dim) and v_head_dim the value width.
    kv_lora_rank: int = 0  # 0 = not MLA
    # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5) on MLA: a lightning indexer of index_n_heads x
    # index_head_dim scores every cached key (FP8 keys of its own in the cache) and each query
    # attends to its index_topk best keys only.
    index_topk: int = 0  # 0 = dense attention
    index_n_heads: int = 0
    index_head_dim: int = 0
    q_lora_rank: int = 0  # 0 = queries projected directly from the hidden state
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Windowed layers (vLLM's hybrid KV cache: one block pool per attention type): sliding-window
    # attention (gpt-oss, Gemma 3: each query sees its last sliding_window keys, the cache keeps
    # them) or chunked local attention (Llama 4: queries see their own attention_chunk_size-token
    # chunk); windowed_layers of the layers have it, the rest attend to every key.
    sliding_window: int = 0
    attention_chunk_size: int = 0
    windowed_layers: int = 0
    # Linear-attention layers (Gated DeltaNet: Qwen3-Next, Qwen3.5): linear_layers of the layers
    # keep a recurrent state of num_value_heads x key_head_dim x value_head_dim per sequence (in
    # linear_state_dtype) and a short causal convolution over q, k and v instead of a KV cache.
    linear_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_state_dtype: str = ""  # "" = the activations' dtype
    attn_output_gate: bool = False  # full attention's output gated by a second query-width projection
    attention_dtype: str = ""  # the attention projections' weights when the checkpoint keeps them
    #                            apart from the rest (gpt-oss, NVFP4 exports: BF16); "" = dtype
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: int = 0  # layers whose FFN is MoE (the first layers - moe_layers are dense)
    kv_cache_enabled: bool = True
    kv_cache_max_tokens: int = 0  # 0 = sized by memory; else a preallocated pool of this many tokens
    kv_cache_dtype: str = "auto"
    kv_compression_ratio: float = 1.0  # stored KV bytes = raw bytes / ratio
    declared_parameters: float = 0.0  # a published count to cross-check (0 = none)
    # the HuggingFace ids a preset stands for (``--model ORG/NAME`` finds it by any of them)
    hf_ids: tuple = field(default=(), compare=False)
    source: str = "<dict>"
    warnings: tuple = field(default=(), compare=False)

    # ------------------------------------------------------------------ derived sizes
    @property
    def is_moe(self):
        return self.num_experts > 0

    @property
    def dense_layers(self):
        return self.layers - self.moe_layers

    @property
    def rope_dim(self):
        return self.rotary_dim or self.head_dim

    @property
    def norms_per_layer(self):
        """Norms each layer applies: 1 with parallel attention (GPT-J), 4 with sandwich norms
        (Gemma 2/3: before and after attention and the FFN), else 2."""
        return 1 if self.parallel_attention else (4 if self.sandwich_norm else 2)

    @property
    def is_mla(self):
        return self.kv_lora_rank > 0

    @property
    def index_key_bytes(self):
        """Bytes of the indexer's key one token caches per layer: FP8 values and an FP32 scale per
        128 (vLLM's and SGLang's DeepSeek-V3.2 layout)."""
        return self.index_head_dim + 4 * -(-self.index_head_dim // 128) if self.index_topk else 0

    @property
    def window_tokens(self):
        """Keys a windowed layer's query sees at most (0: no windowed layers)."""
        return (self.sliding_window or self.attention_chunk_size) if self.windowed_layers else 0

    @property
    def full_layers(self):
        """Layers whose KV cache grows with the whole context."""
        return self.layers - self.windowed_layers - self.linear_layers

    @property
    def attention_layers(self):
        """Layers with softmax attention over a KV cache (full or windowed)."""
        return self.layers - self.linear_layers

    def linear_widths(self):
        """One linear-attention layer's widths (unsharded): ``in`` the input projection's output
        (q, k, v, the output gate z, and the per-head beta and decay), ``conv`` the channels the
        causal convolution runs over (q, k, v), ``out`` the output projection's input."""
        nk, nv = self.linear_num_key_heads, self.linear_num_value_heads
        dk, dv = self.linear_key_head_dim, self.linear_value_head_dim
        return {"in": 2 * nk * dk + 2 * nv * dv + 2 * nv, "conv": 2 * nk * dk + nv * dv, "out": nv * dv}

    def window_blocks(self, block_size):
        """KV blocks one windowed layer holds at most per sequence, as vLLM's sliding-window and
        chunked-local managers free the blocks that fell out of the window: a sliding window of
        ``W`` keys spans ``ceil(W / block_size) + 1`` blocks when not aligned to them; a chunk
        (aligned to multiples of its size) ``ceil(C / block_size)``."""
        if not self.windowed_layers:
            return 0
        if self.sliding_window:
            return -(-self.sliding_window // block_size) + 1
        return -(-self.attention_chunk_size // block_size)

    def mla_params(self):
        """MLA's attention parameters of one layer, split into what tensor parallelism replicates
        (``replicated``: the down-projections ``q_a`` and ``kv_a`` and their norms) and what it
        shards by heads (``sharded``: ``q_b`` (or the direct ``q`` projection), ``kv_b``)."""
        h, nh, d = self.hidden_size, self.num_attention_heads, self.head_dim
        rope, lat, ql = self.qk_rope_head_dim, self.kv_lora_rank, self.q_lora_rank
        nope = d - rope
        replicated = h * (lat + rope) + lat + (h * ql + ql if ql else 0)
        if self.index_topk:  # the indexer: queries from the q latent, one key, per-head weights, key norm
            ni, di = self.index_n_heads, self.index_head_dim
            replicated += (ql or h) * ni * di + h * di + h * ni + 2 * di
        sharded = lat * nh * (nope + self.v_head_dim) + (ql if ql else h) * nh * d
        return {"replicated": replicated, "sharded": sharded}

    def matrix_params(self):
        """Parameters of each weight matrix group, unsharded (biases included).

        Returns
        -------
        dict
            ``qkv`` (MLA: its four projections and two norms), ``o``, ``ffn_up``, ``ffn_down``
            (one dense layer); ``router``,
            ``expert_up``, ``expert_down`` (one routed expert), ``shared_up``, ``shared_down``
            (all shared experts of one MoE layer); ``norm`` (one norm), ``qk_norm`` (per layer);
            ``embed``, ``lm_head``.
        """
        h, d = self.hidden_size, self.head_dim
        nh, nkv, inter = self.num_attention_heads, self.num_key_value_heads, self.intermediate_size
        up_mult = 2 if self.ffn == "gated" else 1
        qkv_out = (nh + 2 * nkv) * d
        shared = self.shared_expert_intermediate_size
        if self.attn_output_gate:
            qkv_out += nh * d  # the gate's projection, fused with q
        if self.is_mla:
            mla = self.mla_params()
            qkv, o = mla["replicated"] + mla["sharded"], nh * self.v_head_dim * h
        else:
            qkv, o = h * qkv_out + (qkv_out if self.attention_bias else 0), nh * d * h
        lin = self.linear_widths() if self.linear_layers else {"in": 0, "conv": 0, "out": 0}
        return {
            "qkv": qkv,
            "o": o,
            "ffn_up": h * up_mult * inter + (up_mult * inter if self.mlp_bias else 0),
            "ffn_down": inter * h + (h if self.mlp_bias else 0),
            "router": h * self.num_experts,
            "expert_up": 2 * h * self.moe_intermediate_size,
            "expert_down": self.moe_intermediate_size * h,
            "shared_up": 2 * h * shared,
            "shared_down": shared * h,
            "norm": h * (2 if self.norm == "layernorm" else 1),
            "qk_norm": 2 * d if self.qk_norm else 0,
            # one linear-attention layer: in projection + depthwise conv; out projection; the
            # per-head decay and dt bias and the gated norm's weights
            "linear_in": h * lin["in"] + lin["conv"] * self.linear_conv_kernel_dim,
            "linear_out": lin["out"] * h,
            "linear_small": 2 * self.linear_num_value_heads + self.linear_value_head_dim if self.linear_layers else 0,
            "embed": self.vocab_size * h,
            "lm_head": self.vocab_size * h + (self.vocab_size if self.lm_head_bias else 0),
        }

    def parameter_breakdown(self):
        """Parameter count by component (total over layers), in parameters."""
        m = self.matrix_params()
        norms_per_layer = self.norms_per_layer
        moe = m["router"] + self.num_experts * (m["expert_up"] + m["expert_down"]) + m["shared_up"] + m["shared_down"]
        return {
            "embedding": m["embed"],
            "attention": self.attention_layers * (m["qkv"] + m["o"] + m["qk_norm"])
            + self.linear_layers * (m["linear_in"] + m["linear_out"] + m["linear_small"]),
            "ffn": self.dense_layers * (m["ffn_up"] + m["ffn_down"]) + self.moe_layers * moe,
            "norms": (self.layers * norms_per_layer + 1) * m["norm"],
            "lm_head": 0 if self.tie_word_embeddings else m["lm_head"],
        }

    def parameter_count(self):
        """Total parameters the dimensions give (a tied LM head counted once)."""
        return sum(self.parameter_breakdown().values())

    def active_parameter_count(self):
        """Parameters one token passes through (MoE: only its ``experts_per_token`` experts)."""
        if not self.is_moe:
            return self.parameter_count()
        m = self.matrix_params()
        idle = self.num_experts - self.experts_per_token
        return self.parameter_count() - self.moe_layers * idle * (m["expert_up"] + m["expert_down"])

    def linear_state_elements(self):
        """Recurrent-state elements one sequence holds in one linear-attention layer (unsharded):
        value heads x key dim x value dim, and the convolution's last kernel - 1 inputs."""
        if not self.linear_layers:
            return 0, 0
        w = self.linear_widths()
        return (self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim,
                (self.linear_conv_kernel_dim - 1) * w["conv"])

    def kv_elements_per_layer(self):
        """KV-cache elements one token stores in one layer (unsharded): 2 x KV heads x head_dim;
        MLA: kv_lora_rank + qk_rope_head_dim."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_key_value_heads * self.head_dim

    def kv_elements_per_token(self):
        """KV-cache elements one token of context stores (unsharded) in every layer that keeps
        the whole context: 2 x full layers x KV heads x head_dim; MLA: full layers x
        (kv_lora_rank + qk_rope_head_dim). Windowed layers hold at most their window
        (:meth:`window_blocks`)."""
        return self.full_layers * self.kv_elements_per_layer()

    def with_overrides(self, **changes):
        """A copy with fields replaced (no re-validation of dimensions)."""
        return replace(self, **changes)


_SEED_KEYS = {
    "name", "dtype", "layers", "hidden_size", "num_attention_heads", "head_dim", "vocab_size",
    "max_sequence_length", "kv_cache",
}
_EXTRA_KEYS = {
    "num_key_value_heads", "intermediate_size", "ffn", "activation", "norm", "tie_word_embeddings",
    "attention_bias", "mlp_bias", "lm_head_bias", "qk_norm", "parallel_attention", "sandwich_norm", "rotary_dim",
    "moe", "num_experts", "experts_per_token", "moe_intermediate_size", "num_shared_experts",
    "shared_expert_intermediate_size", "moe_layers", "declared_parameters", "hf_ids",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "sliding_window", "attention_chunk_size", "windowed_layers", "layer_types", "attention_dtype",
    "linear_attention", "attn_output_gate", "index_topk", "index_n_heads", "index_head_dim",
    # HF-style spellings accepted in YAML too
    "num_hidden_layers", "max_position_embeddings",
}
_MOE_KEYS = {"num_experts", "experts_per_token", "moe_intermediate_size", "num_shared_experts",
             "shared_expert_intermediate_size", "moe_layers"}
_KV_KEYS = {"enabled", "max_cache_size", "dtype", "compression_ratio"}
_FFN_ALIASES = {"swiglu": "gated", "geglu": "gated", "glu": "gated", "mlp": "plain", "gelu": "plain", "dense": "plain"}
_NORM_ALIASES = {"rms": "rmsnorm", "rms_norm": "rmsnorm", "layer_norm": "layernorm", "ln": "layernorm"}


#: The longest context a model may declare: the engine keeps token counts in int32, and a
#: request's prompt plus output (at most this) stays below 2**31.
MAX_CONTEXT_TOKENS = 2**30

def model_from_dict(data, source="<dict>"):
    """Validate a simllm/seed-form model mapping (``{"model": {...}}`` or the inner mapping).

    Raises
    ------
    ConfigError
        For a missing key, wrong type, out-of-range or inconsistent value.
    """
    top = Section(data, source)
    sec = top.section("model") if "model" in data else top
    sec.reject_unknown(_SEED_KEYS | _EXTRA_KEYS)

    def first(*keys):
        return next((k for k in keys if sec.has(k)), keys[0])

    layers = sec.positive_int(first("layers", "num_hidden_layers"))
    hidden = sec.positive_int("hidden_size")
    heads = sec.positive_int("num_attention_heads")
    kv_heads = sec.positive_int("num_key_value_heads", heads)
    mla = _mla_fields(sec)
    head_dim_given = sec.has("head_dim") or bool(mla)
    if not head_dim_given and hidden % heads:
        raise sec.error("num_attention_heads", heads, f"a divisor of hidden_size {hidden} (or set head_dim)")
    head_dim = mla.pop("head_dim", None) or sec.positive_int("head_dim", hidden // heads)
    if heads % kv_heads:
        raise sec.error("num_key_value_heads", kv_heads, f"a divisor of num_attention_heads {heads}")
    notes = []
    ffn_given = sec.has("ffn")
    ffn = sec.choice("ffn", ("gated", "plain"), "gated", _FFN_ALIASES)
    if sec.has("intermediate_size"):
        inter = sec.positive_int("intermediate_size")
    else:
        if not ffn_given:
            ffn = "plain"
        inter = 4 * hidden
        notes.append(
            f"intermediate_size is not given: assuming a {ffn} FFN of 4 x hidden_size = {inter}"
        )
    moe = sec.section("moe") if sec.has("moe") else sec
    if sec.has("moe"):
        moe.reject_unknown(_MOE_KEYS)
    n_experts = moe.number("num_experts", 0, integer=True, minimum=0)
    k = moe.number("experts_per_token", 2 if n_experts else 0, integer=True, minimum=0)
    if n_experts and not 1 <= k <= n_experts:
        raise moe.error("experts_per_token", k, f"an integer from 1 to num_experts ({n_experts})")
    moe_inter = moe.number("moe_intermediate_size", inter if n_experts else 0, integer=True, minimum=0)
    n_shared = moe.number("num_shared_experts", 0, integer=True, minimum=0)
    shared_inter = moe.number("shared_expert_intermediate_size", n_shared * moe_inter, integer=True, minimum=0)
    moe_layers = moe.number("moe_layers", layers if n_experts else 0, integer=True, minimum=0, maximum=layers)
    if moe_layers == layers and not sec.has("intermediate_size"):
        notes = [n for n in notes if not n.startswith("intermediate_size")]  # no dense FFN to size

    kv = sec.section("kv_cache")
    kv.reject_unknown(_KV_KEYS)
    dtype = dtypes.normalize(sec.raw("dtype", "bf16"), dtypes.WEIGHT_DTYPES,
                             source=source, key=sec.path("dtype"), line=line_of(sec.data, "dtype"))
    attention_dtype = ""
    if sec.has("attention_dtype"):
        attention_dtype = dtypes.normalize(sec.raw("attention_dtype"), dtypes.WEIGHT_DTYPES, source=source,
                                           key=sec.path("attention_dtype"), line=line_of(sec.data, "attention_dtype"))
    window, counted_linear = _window_fields(sec, layers)
    linear = _linear_fields(sec, layers - window.get("windowed_layers", 0), counted_linear or None, source)
    kv_dtype = kv.raw("dtype", "auto")
    if kv_dtype != "auto":
        kv_dtype = dtypes.normalize(kv_dtype, dtypes.KV_DTYPES, source=source, key=kv.path("dtype"),
                                    line=line_of(kv.data, "dtype"))

    cfg = ModelConfig(
        name=sec.string("name", Path(source).stem),
        dtype=dtype,
        layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=sec.positive_int("vocab_size"),
        max_sequence_length=sec.number(first("max_sequence_length", "max_position_embeddings"), integer=True,
                                       minimum=1, maximum=MAX_CONTEXT_TOKENS),
        ffn=ffn,
        activation=sec.string("activation", "silu" if ffn == "gated" else "gelu"),
        norm=sec.choice("norm", ("rmsnorm", "layernorm"), "rmsnorm", _NORM_ALIASES),
        tie_word_embeddings=sec.boolean("tie_word_embeddings", False),
        attention_bias=sec.boolean("attention_bias", False),
        mlp_bias=sec.boolean("mlp_bias", False),
        lm_head_bias=sec.boolean("lm_head_bias", False),
        qk_norm=sec.boolean("qk_norm", False),
        parallel_attention=sec.boolean("parallel_attention", False),
        sandwich_norm=sec.boolean("sandwich_norm", False),
        rotary_dim=mla.get("qk_rope_head_dim") or sec.number("rotary_dim", 0, integer=True, minimum=0, maximum=head_dim),
        **mla,
        **window,
        **linear,
        attn_output_gate=sec.boolean("attn_output_gate", False),
        attention_dtype="" if attention_dtype == dtype else attention_dtype,
        num_experts=n_experts,
        experts_per_token=k,
        moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared,
        shared_expert_intermediate_size=shared_inter,
        moe_layers=moe_layers,
        kv_cache_enabled=kv.boolean("enabled", True),
        kv_cache_max_tokens=kv.number("max_cache_size", 0, integer=True, minimum=1),
        kv_cache_dtype=kv_dtype,
        kv_compression_ratio=kv.number("compression_ratio", 1.0, minimum=1.0),
        declared_parameters=sec.number("declared_parameters", 0.0, exclusive_minimum=0),
        hf_ids=_hf_ids(sec),
        source=source,
    )
    return _with_warnings(cfg, notes)


def _hf_ids(sec):
    """``hf_ids``: a list of HuggingFace model ids (``ORG/NAME``)."""
    ids = sec.raw("hf_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) and hub.is_hf_id(i) for i in ids):
        raise sec.error("hf_ids", ids, "a list of HuggingFace model ids (ORG/NAME)")
    return tuple(ids)


def _mla_fields(sec):
    """The MLA fields of a model mapping (empty without ``kv_lora_rank``), with ``head_dim`` the
    query/key width per head: ``qk_nope_head_dim + qk_rope_head_dim`` when the former is given
    (transformers' DeepSeek keys), else the mapping's ``head_dim``."""
    if not sec.has("kv_lora_rank"):
        for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_topk"):
            if sec.has(key) and sec.data.get(key) not in (None, 0):
                raise sec.error(key, sec.data[key], "given only with kv_lora_rank (multi-head latent attention)")
        return {}
    out = {"kv_lora_rank": sec.positive_int("kv_lora_rank")}
    q_lora = sec.data.get("q_lora_rank")
    out["q_lora_rank"] = 0 if q_lora is None else sec.number("q_lora_rank", 0, integer=True, minimum=0)
    rope = sec.positive_int("qk_rope_head_dim")
    if sec.has("qk_nope_head_dim"):
        head_dim = sec.positive_int("qk_nope_head_dim") + rope
    else:
        head_dim = sec.positive_int("head_dim")
        if head_dim <= rope:
            raise sec.error("head_dim", head_dim, f"more than qk_rope_head_dim ({rope}): the query/key width per head")
    out["qk_rope_head_dim"] = rope
    out["v_head_dim"] = sec.positive_int("v_head_dim", head_dim - rope)
    out["head_dim"] = head_dim
    if sec.data.get("index_topk"):
        out.update(index_topk=sec.positive_int("index_topk"), index_n_heads=sec.positive_int("index_n_heads"),
                   index_head_dim=sec.positive_int("index_head_dim"))
    return out


# transformers' layer_types entries: full attention, the windowed kinds and linear attention
_FULL_LAYER_TYPES = {"full_attention", "attention", "global_attention"}
_LINEAR_LAYER_TYPES = {"linear_attention"}
_WINDOW_LAYER_TYPES = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


_LINEAR_KEYS = {"layers", "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel_dim",
                "state_dtype"}


def _linear_fields(sec, max_layers, counted, source):
    """The linear-attention fields: a ``linear_attention`` mapping (``layers`` — or counted from
    ``layer_types`` — ``num_key_heads``, ``num_value_heads``, ``key_head_dim``,
    ``value_head_dim``, ``conv_kernel_dim``, ``state_dtype``), or none."""
    if not sec.has("linear_attention"):
        if counted:
            raise sec.error("layer_types", "linear_attention", "a linear_attention mapping giving the layers' heads and dims")
        return {}
    lin = sec.section("linear_attention")
    lin.reject_unknown(_LINEAR_KEYS)
    n = counted if counted is not None else lin.number("layers", integer=True, minimum=1)
    if n >= max_layers:
        raise lin.error("layers", n, f"fewer than the model's {max_layers} non-windowed layers (it needs some "
                                     f"full-attention layers)")
    nk = lin.positive_int("num_key_heads")
    nv = lin.positive_int("num_value_heads")
    if nv % nk:
        raise lin.error("num_value_heads", nv, f"a multiple of num_key_heads ({nk})")
    state = ""
    if lin.has("state_dtype"):
        state = dtypes.normalize(lin.raw("state_dtype"), dtypes.KV_DTYPES, source=source, key=lin.path("state_dtype"),
                                 line=line_of(lin.data, "state_dtype"))
    return {"linear_layers": n, "linear_num_key_heads": nk, "linear_num_value_heads": nv,
            "linear_key_head_dim": lin.positive_int("key_head_dim"),
            "linear_value_head_dim": lin.positive_int("value_head_dim"),
            "linear_conv_kernel_dim": lin.positive_int("conv_kernel_dim", 4), "linear_state_dtype": state}


def _window_fields(sec, layers):
    """The windowed-attention fields of a model mapping: ``sliding_window`` or
    ``attention_chunk_size`` (tokens), and how many layers have it: ``windowed_layers``, or counted
    from a transformers-style ``layer_types`` list, else every layer. Returns ``(fields, linear)``:
    ``linear`` the layers ``layer_types`` marks linear-attention (None without the list)."""
    sliding = sec.number("sliding_window", 0, integer=True, minimum=0) if sec.data.get("sliding_window") is not None else 0
    chunk = sec.number("attention_chunk_size", 0, integer=True, minimum=0) if sec.data.get("attention_chunk_size") is not None else 0
    if sliding and chunk:
        raise sec.error("attention_chunk_size", chunk, "absent when sliding_window is given (one window kind per model)")
    if sec.has("layer_types"):
        types = sec.data["layer_types"]
        if not isinstance(types, list) or len(types) != layers:
            raise sec.error("layer_types", types, f"a list of {layers} layer types (one per layer)")
        allowed = _FULL_LAYER_TYPES | set(_WINDOW_LAYER_TYPES) | _LINEAR_LAYER_TYPES
        bad = [t for t in types if t not in allowed]
        if bad:
            raise sec.error("layer_types", bad[0], "one of " + ", ".join(sorted(allowed)))
        kinds = {_WINDOW_LAYER_TYPES[t] for t in types if t in _WINDOW_LAYER_TYPES}
        if len(kinds) > 1:
            raise sec.error("layer_types", types, "one windowed kind per model (sliding or chunked)")
        n = sum(t in _WINDOW_LAYER_TYPES for t in types)
        if n and not (sliding if "sliding_window" in kinds else chunk):
            raise sec.error(next(iter(kinds)), sec.data.get(next(iter(kinds))), "a positive window for the layer_types' windowed layers")
        linear = sum(t in _LINEAR_LAYER_TYPES for t in types)
    else:
        linear = None
        n = sec.number("windowed_layers", layers if (sliding or chunk) else 0, integer=True, minimum=0, maximum=layers)
        if n and not (sliding or chunk):
            raise sec.error("windowed_layers", n, "0 without sliding_window or attention_chunk_size")
    if not n:
        return {}, linear
    return {"sliding_window": sliding, "attention_chunk_size": chunk, "windowed_layers": n}, linear


# HuggingFace config.json: the keys transformers uses, with the per-architecture aliases.
_HF_ALIASES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "max_sequence_length": ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),  # Mixtral, Qwen2-MoE, DeepSeek
    "experts_per_token": ("num_experts_per_tok", "num_experts_per_token", "top_k"),
}
_PLAIN_FFN_TYPES = {"gptj", "gpt2", "gpt_neox", "opt", "bloom", "falcon", "phi", "gpt_bigcode", "starcoder2"}
_PARALLEL_ATTN_TYPES = {"gptj", "phi", "falcon"}
_GATED_DELTA_TYPES = ("qwen3_next", "qwen3_5")  # Qwen3-Next, Qwen3.5 (dense and MoE): Gated DeltaNet hybrids
_UNTIED_BY_DEFAULT = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama4", "llama4_text"}


def model_from_hf_config(data, source="config.json"):
    """Build a :class:`ModelConfig` from a HuggingFace ``config.json`` mapping.

    Follows transformers' defaults: a missing ``head_dim`` is ``hidden_size //
    num_attention_heads``, a missing ``num_key_value_heads`` is ``num_attention_heads``; Mixtral's
    ``num_local_experts``/``num_experts_per_tok``, Qwen2-MoE's ``num_experts``/
    ``moe_intermediate_size``/``shared_expert_intermediate_size`` and GPT-J's ``n_embd``/``n_layer``/
    ``n_head``/``n_inner`` are understood.
    """
    sec = Section(data, source)
    if isinstance(data.get("text_config"), dict):  # multimodal wrappers keep the LM here
        inner = dict(data["text_config"])
        for key in ("torch_dtype", "tie_word_embeddings", "quantization_config"):
            if key in data:
                inner.setdefault(key, data[key])
        return model_from_hf_config(inner, source)
    mtype = str(data.get("model_type", "")).lower()

    def pick(name):
        for key in _HF_ALIASES.get(name, (name,)):
            if sec.has(key):
                return key
        return _HF_ALIASES.get(name, (name,))[0]

    out = {}
    archs = data.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    out["name"] = data.get("_name_or_path") or arch or mtype or Path(source).parent.name
    torch_dtype = data.get("torch_dtype") or data.get("dtype") or "bfloat16"
    out["dtype"] = torch_dtype
    for name in ("hidden_size", "layers", "num_attention_heads"):
        out[name] = sec.positive_int(pick(name))
    out["max_sequence_length"] = sec.number(pick("max_sequence_length"), integer=True, minimum=1,
                                            maximum=MAX_CONTEXT_TOKENS)
    out["vocab_size"] = sec.positive_int("vocab_size")
    for name in ("num_key_value_heads", "head_dim"):
        if sec.has(name):
            out[name] = sec.positive_int(name)
    inter_key = pick("intermediate_size")
    if sec.has(inter_key):
        out["intermediate_size"] = sec.positive_int(inter_key)
    elif mtype in _PLAIN_FFN_TYPES:
        out["intermediate_size"] = 4 * out["hidden_size"]  # GPT-J/GPT-2: n_inner None = 4 * n_embd
    out["ffn"] = "plain" if mtype in _PLAIN_FFN_TYPES else "gated"
    act = data.get("hidden_act") or data.get("activation_function") or ("gelu" if out["ffn"] == "plain" else "silu")
    out["activation"] = str(act)
    out["norm"] = "layernorm" if mtype in _PLAIN_FFN_TYPES else "rmsnorm"
    # transformers' PretrainedConfig ties by default; these architectures' configs default to untied
    out["tie_word_embeddings"] = bool(data.get("tie_word_embeddings", mtype not in _UNTIED_BY_DEFAULT))
    out["attention_bias"] = bool(data.get("attention_bias", mtype in {"qwen2", "qwen2_moe"} or data.get("qkv_bias", False)))
    out["mlp_bias"] = bool(data.get("mlp_bias", mtype in _PLAIN_FFN_TYPES))
    out["lm_head_bias"] = mtype == "gptj"
    out["qk_norm"] = mtype in {"qwen3", "qwen3_moe", "olmo2", "gemma3", "gemma3_text"} or mtype.startswith(_GATED_DELTA_TYPES)
    out["parallel_attention"] = mtype in _PARALLEL_ATTN_TYPES
    out["sandwich_norm"] = mtype.startswith(("gemma2", "gemma3"))  # pre/post-attention and pre/post-FFN norms
    if sec.has("rotary_dim"):
        out["rotary_dim"] = sec.positive_int("rotary_dim")
    if data.get("kv_lora_rank"):  # DeepSeek-V2/V3(.2), Kimi-K2, GLM-5 (deepseek_v3, deepseek_v32, kimi_k2, glm_moe_dsa)
        for key in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                    "index_topk", "index_n_heads", "index_head_dim"):
            if data.get(key) is not None:
                out[key] = data[key]
        out.pop("head_dim", None)
    out.update(_hf_windows(sec, mtype, out["layers"]))
    out.update(_hf_linear(sec, mtype, out["layers"], out.get("layer_types")))
    rope = data.get("rope_parameters") if isinstance(data.get("rope_parameters"), dict) else data
    factor = rope.get("partial_rotary_factor") or data.get("partial_rotary_factor")
    if factor and "rotary_dim" not in out and isinstance(factor, (int, float)) and 0 < factor < 1:
        out["rotary_dim"] = int(out.get("head_dim", out["hidden_size"] // out["num_attention_heads"]) * factor)
    quant = data.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method == "fp8":
        out["dtype"] = "fp8"  # an FP8 checkpoint (DeepSeek's block-scaled e4m3, or per-tensor)
    elif method == "mxfp4":
        out["dtype"] = "mxfp4"  # gpt-oss: MXFP4 experts
    elif method == "modelopt" and "fp4" in str(quant.get("quant_algo", "")).lower():
        out["dtype"] = "fp4"  # NVIDIA ModelOpt NVFP4 checkpoints
    elif method == "modelopt" and "fp8" in str(quant.get("quant_algo", "")).lower():
        out["dtype"] = "fp8"  # ModelOpt FP8 exports
    if method and _keeps_attention(quant):
        out["attention_dtype"] = torch_dtype  # modules left out of the quantisation keep the checkpoint's dtype
    experts_key = pick("num_experts")
    if sec.has(experts_key) and sec.number(experts_key, integer=True, minimum=0) > 0:
        moe = {"num_experts": sec.number(experts_key, integer=True, minimum=1)}
        moe["experts_per_token"] = sec.positive_int(pick("experts_per_token"), 2)
        if sec.has("moe_intermediate_size"):
            moe["moe_intermediate_size"] = sec.positive_int("moe_intermediate_size")
        n_shared = _hf_count(sec, "n_shared_experts", 0, 0) or _hf_count(sec, "num_shared_experts", 0, 0)
        if sec.has("shared_expert_intermediate_size"):
            moe["shared_expert_intermediate_size"] = sec.number("shared_expert_intermediate_size", integer=True, minimum=0)
            n_shared = n_shared or (1 if moe["shared_expert_intermediate_size"] else 0)
        moe["num_shared_experts"] = int(n_shared)
        dense_first = _hf_count(sec, "first_k_dense_replace", 0, 0)
        if data.get("mlp_only_layers"):
            if not isinstance(data["mlp_only_layers"], list):
                raise sec.error("mlp_only_layers", data["mlp_only_layers"], "a list of layer indices")
            dense_first = len(data["mlp_only_layers"])
        moe["moe_layers"] = out["layers"] - dense_first
        if mtype.startswith("llama4"):
            # Llama 4: intermediate_size is one expert's (and its one shared expert's) width,
            # intermediate_size_mlp the dense layers'; every interleave_moe_layer_step-th layer is MoE
            width = out.get("intermediate_size", 0)
            moe.update(moe_intermediate_size=width, num_shared_experts=1, shared_expert_intermediate_size=width)
            out["intermediate_size"] = sec.positive_int("intermediate_size_mlp", width)
            moe["moe_layers"] = out["layers"] // sec.positive_int("interleave_moe_layer_step", 1)
        out["moe"] = moe
    return model_from_dict(out, source)  # no "model." prefix: errors name config.json's own keys


def _hf_count(sec, key, default, minimum=1):
    """An integer of a transformers config (``default`` when absent, null or 0), type-checked."""
    return sec.number(key, integer=True, minimum=minimum) if sec.data.get(key) else default


def _hf_windows(sec, mtype, layers):
    """Windowed attention from a transformers config: its ``layer_types`` list where it has one
    (gpt-oss, Gemma 3, recent exports); else Gemma 2/3's ``sliding_window_pattern`` (every n-th
    layer global), Llama 4's ``attention_chunk_size`` on its RoPE layers (``no_rope_layers``:
    1 = RoPE and chunked; default every 4th layer global), and a ``sliding_window`` on every
    layer where the architecture applies it to all (Mistral v0.1) and ``use_sliding_window`` is
    not false (Qwen2/3 configs carry an unused one)."""
    data = sec.data
    sliding = data.get("sliding_window")
    chunk = data.get("attention_chunk_size")
    types = data.get("layer_types")
    if isinstance(types, list) and any(t in _WINDOW_LAYER_TYPES for t in types):
        key = "attention_chunk_size" if "chunked_attention" in types else "sliding_window"
        return {"layer_types": types, key: data.get(key)}
    if mtype.startswith("llama4") and chunk:
        nope = data.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == layers:
            n = sum(1 for v in nope if v)
        else:
            interval = _hf_count(sec, "no_rope_layer_interval", 4)
            n = sum(1 for i in range(layers) if (i + 1) % interval)
        return {"attention_chunk_size": chunk, "windowed_layers": n}
    if not sliding or data.get("use_sliding_window") is False:
        return {}
    if mtype.startswith(("gemma2", "gemma3")):
        pattern = _hf_count(sec, "sliding_window_pattern", 6 if mtype.startswith("gemma3") else 2)
        return {"sliding_window": sliding, "windowed_layers": sum(1 for i in range(layers) if (i + 1) % pattern)}
    if mtype in ("mistral", "mixtral") or data.get("use_sliding_window"):
        return {"sliding_window": sliding, "windowed_layers": layers}
    return {}


def _hf_linear(sec, mtype, layers, types):
    """Linear-attention layers from a transformers config (Qwen3-Next, Qwen3.5): its
    ``layer_types`` (or every ``full_attention_interval``-th layer full), the ``linear_*`` head
    counts and dims, ``mamba_ssm_dtype`` for the state, ``attn_output_gate`` (Qwen3-Next's
    attention is always gated)."""
    data = sec.data
    if not data.get("linear_num_value_heads"):
        return {}
    if not isinstance(types, list):
        types = data.get("layer_types")
    if not isinstance(types, list):
        interval = _hf_count(sec, "full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    lin = {"num_key_heads": data.get("linear_num_key_heads"), "num_value_heads": data.get("linear_num_value_heads"),
           "key_head_dim": data.get("linear_key_head_dim"), "value_head_dim": data.get("linear_value_head_dim"),
           "conv_kernel_dim": data.get("linear_conv_kernel_dim") or 4}
    if data.get("mamba_ssm_dtype"):
        lin["state_dtype"] = data["mamba_ssm_dtype"]
    return {"layer_types": types, "linear_attention": lin,
            "attn_output_gate": bool(data.get("attn_output_gate", mtype.startswith("qwen3_next")))}


def _keeps_attention(quant):
    """Whether a quantisation config leaves the attention projections out (gpt-oss's
    ``modules_to_not_convert``, compressed-tensors' ``ignore``, ModelOpt's ``exclude_modules``)."""
    if not isinstance(quant, dict):
        return False
    for key in ("modules_to_not_convert", "ignore", "exclude_modules"):
        names = quant.get(key)
        if isinstance(names, list) and any(isinstance(n, str) and "attn" in n for n in names):
            return True
    return False


def _with_warnings(cfg, notes):
    """Attach warnings about the configuration's internal consistency."""
    warnings = list(notes)
    attn_width = cfg.num_attention_heads * cfg.head_dim
    if 2 * attn_width < cfg.hidden_size:
        warnings.append(
            f"num_attention_heads x head_dim = {cfg.num_attention_heads} x {cfg.head_dim} = {attn_width} "
            f"is smaller than hidden_size {cfg.hidden_size}: attention projects {cfg.hidden_size} -> "
            f"{attn_width} -> {cfg.hidden_size}; published models use heads x head_dim of at least half "
            f"hidden_size (the narrowest, Gemma 3 27B: 4096 of 5376), "
            f"so one of these numbers is probably wrong (simulating the dimensions as given)"
        )
    derived = cfg.parameter_count()
    if cfg.declared_parameters and abs(derived - cfg.declared_parameters) > DECLARED_PARAMS_TOLERANCE * cfg.declared_parameters:
        b = dtypes.BYTES[cfg.dtype]
        warnings.append(
            f"declared_parameters {cfg.declared_parameters / 1e9:.2f}B ({cfg.declared_parameters * b / 1e9:.1f} GB in "
            f"{cfg.dtype}) does not match the dimensions, which give {derived / 1e9:.2f}B "
            f"({derived * b / 1e9:.1f} GB); simulating what the dimensions imply"
        )
    if cfg.kv_cache_max_tokens and cfg.kv_cache_max_tokens < cfg.max_sequence_length:
        warnings.append(
            f"kv_cache.max_cache_size {cfg.kv_cache_max_tokens} tokens is less than max_sequence_length "
            f"{cfg.max_sequence_length}: one full-length sequence cannot be cached"
        )
    if not cfg.kv_cache_enabled:
        warnings.append("kv_cache.enabled is false: every decode step recomputes the whole context")
    return replace(cfg, warnings=tuple(warnings))


def _hf_quant_config(path):
    """A ModelOpt ``hf_quant_config.json`` beside a ``config.json`` (NVIDIA's NVFP4 and FP8
    exports; also ``<name>_hf_quant_config.json`` beside ``<name>_config.json``), as the
    ``quantization_config`` mapping transformers would hold (``quant_method: modelopt``), or None."""
    name = path.name
    stem = name[: -len("config.json")] if name.endswith("config.json") else None
    if stem is None:
        return None
    side = path.with_name(stem + "hf_quant_config.json")
    if not side.is_file():
        return None
    data = load_file(side)
    quant = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(quant, dict):
        raise ConfigError("a ModelOpt quantization config with a 'quantization' mapping", source=str(side),
                          key="quantization", value=quant)
    return {"quant_method": "modelopt", **quant}


def _looks_like_hf(data):
    return isinstance(data, dict) and "model" not in data and (
        "num_hidden_layers" in data or "model_type" in data or "n_layer" in data or "architectures" in data
    )


def load_model(name_or_path):
    """Load and validate a model: a preset name (``"llama-3.1-8b"``), a HuggingFace id
    (``"meta-llama/Llama-3.1-8B-Instruct"``: the preset that stands for it, else its config.json in
    the local HuggingFace cache, :mod:`simllm.config.hub`), a simllm/seed YAML file, a HuggingFace
    ``config.json`` or a directory holding one.

    Returns
    -------
    ModelConfig
        With ``warnings`` listing inconsistencies found (the model still loads).

    Raises
    ------
    ConfigError
        For an unknown preset (with the nearest names), a missing file, a YAML syntax error
        (with its line), or an invalid value (naming file, key, value and expectation).
    """
    text = str(name_or_path)
    if hub.is_hf_id(text) and not Path(text).expanduser().exists():
        path = hub.resolve_hf_id(text)
    else:
        path = presets.resolve("models", name_or_path, flag="--model")
    data = load_file(path)
    source = str(path)
    if data is None:
        raise ConfigError("a model configuration, got an empty file", source=source)
    if _looks_like_hf(data):
        quant = _hf_quant_config(Path(path))
        if quant and isinstance(data, dict) and not data.get("quantization_config"):
            data = {**data, "quantization_config": quant}
        return model_from_hf_config(data, source)
    return model_from_dict(data, source)
