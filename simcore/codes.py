"""Enum-like integer codes shared by the kernels and the bindings. The only place they are defined."""

# Operators of one forward pass. Layer operators repeat once per layer (or per dense / MoE layer);
# the last four run once per iteration.
OP_EMBEDDING = 0
OP_INPUT_NORM = 1
OP_QKV_PROJ = 2
OP_ROPE = 3
OP_KV_WRITE = 4
OP_ATTENTION = 5
OP_O_PROJ = 6
OP_ALLREDUCE_ATTN = 7
OP_RESIDUAL = 8
OP_POST_NORM = 9
OP_FFN_UP = 10
OP_FFN_ACT = 11
OP_FFN_DOWN = 12
OP_MOE_ROUTER = 13
OP_MOE_UP = 14
OP_MOE_ACT = 15
OP_MOE_DOWN = 16
OP_ALLREDUCE_FFN = 17
OP_FINAL_NORM = 18
OP_LM_HEAD = 19
OP_LOGITS_GATHER = 20
OP_SAMPLING = 21
N_OPS = 22

OP_NAMES = (
    "embedding",
    "input_norm",
    "qkv_proj",
    "rope",
    "kv_cache_write",
    "attention",
    "o_proj",
    "allreduce_attn",
    "residual_add",
    "post_attn_norm",
    "ffn_up",
    "ffn_act",
    "ffn_down",
    "moe_router",
    "moe_experts_up",
    "moe_experts_act",
    "moe_experts_down",
    "allreduce_ffn",
    "final_norm",
    "lm_head",
    "logits_gather",
    "sampling",
)

# What limits an operator's time on the roofline.
BOUND_NONE = 0  # the operator does not run in this iteration
BOUND_COMPUTE = 1
BOUND_MEMORY = 2
BOUND_COMM = 3
BOUND_NAMES = ("-", "compute", "memory", "interconnect")

# Which peak an operator's FLOPs run at.
UNIT_GEMM = 0  # tensor cores at the weight dtype's rate
UNIT_ATTN = 1  # tensor cores at the activation dtype's rate
UNIT_VECTOR = 2  # elementwise / reductions on the vector units
UNIT_LINK = 3  # interconnect (collectives)
