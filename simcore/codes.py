"""Every integer code and every fixed slot index of simcore, shared by the kernels and the
bindings: the only place they are defined.

Codes name a kind (``OP_*``, ``BOUND_*``, ``UNIT_*``, ``POLICY_*``, ``ROUTER_*``, ``STATUS_*``); slots
name a position in an array (``STAT_*``, ``CLOCK_*``, ``MEMO_*`` and ``WIN_*`` in the float
accumulator, ``RI_*``/``RF_*`` in the request arrays, the workspace slots, ``SCHED_*`` rows and
``GLOBAL_*`` counters). Offsets that depend on sizes (where the time series or the schedule rows
start) are computed once, in :mod:`simcore.layout`."""

# Operators of one forward pass. Layer operators repeat once per layer (or per dense / MoE layer);
# final norm, LM head, logits gather and sampling run once per iteration; the MoE all-to-all
# (expert parallelism's dispatch and combine) once per MoE layer.
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
OP_MOE_ALLTOALL = 22
N_OPS = 23

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
    "moe_all_to_all",
)

# What limits an operator's time on the roofline.
BOUND_NONE = 0  # the operator does not run in this iteration
BOUND_COMPUTE = 1
BOUND_MEMORY = 2
BOUND_COMM = 3
BOUND_LATENCY = 4  # decode attention at its one-block-per-sequence floor (cost.unsplit_attention_nb)
BOUND_NAMES = ("-", "compute", "memory", "interconnect", "latency")

# Which peak an operator's FLOPs run at.
UNIT_GEMM = 0  # tensor cores at the weight dtype's rate
UNIT_ATTN = 1  # tensor cores at the activation dtype's rate
UNIT_VECTOR = 2  # elementwise / reductions on the vector units
UNIT_LINK = 3  # interconnect (collectives)
UNIT_PROJ = 4  # tensor cores at the attention projections' weight dtype's rate
UNIT_A2A = 5  # the experts' all-to-all links: NVLink within a node, the network beyond it

# Shape-aware costs (``CostParams.eff``): the expert-routing curve and the tables fitted from measured
# kernel latencies. One float64 array; each table starts at its ``EFF_*`` offset. The weight GEMMs' block holds seconds per instance at
# M = 2**i rows, interpolated linearly in M (and proportionally beyond the last point), and so does
# the collectives' curve over bus bytes (below its first point, the first point's time); the other
# tables hold the achieved fraction of the roofline ``max(flops / peak, bytes / bandwidth)``,
# interpolated linearly over log2 of each axis and clamped at both ends.
EFF_M_POINTS = 18  # GEMM rows M (tokens; the LM head's emitting rows): 2**0 .. 2**17
EFF_LINK_LOG2_MIN = 7  # collectives: bytes each GPU sends (bus bytes), 2**7 ...
EFF_LINK_POINTS = 24  # ... 2**30
EFF_PF_LOG2_MIN = 20  # prefill attention: FLOPs of one layer, 2**20 ...
EFF_PF_POINTS = 28  # ... 2**47
EFF_CTX_POINTS = 18  # attention: mean keys per query (context), 2**0 .. 2**17
EFF_DEC_POINTS = 24  # decode attention: rows x KV heads, 2**0 .. 2**23
# Expert routing first: with expert parallelism and random routing, the slowest GPU's token-expert
# assignments (ROUTE_ASSIGN + i) and hit experts (ROUTE_HIT + i) over the mean GPU's, at 2**i
# tokens per engine rank, linear in log2 of the tokens and clamped (ones: balanced routing). An
# array of just these ROUTE_SIZE slots is random routing without kernel tables.
ROUTE_POINTS = 18  # 2**0 .. 2**17 tokens per rank
ROUTE_ASSIGN = 0
ROUTE_HIT = ROUTE_ASSIGN + ROUTE_POINTS
ROUTE_SIZE = 2 * ROUTE_POINTS
EFF_GEMM_S = ROUTE_SIZE  # N_OPS rows of EFF_M_POINTS: seconds over M per weight GEMM (the rest unused)
EFF_LINK = EFF_GEMM_S + N_OPS * EFF_M_POINTS  # seconds of one collective at bus bytes 2**(EFF_LINK_LOG2_MIN + i), this TP
EFF_PREFILL = EFF_LINK + EFF_LINK_POINTS  # EFF_PF_POINTS x EFF_CTX_POINTS, compute side
EFF_DECODE = EFF_PREFILL + EFF_PF_POINTS * EFF_CTX_POINTS  # EFF_DEC_POINTS x EFF_CTX_POINTS, memory side
# The layer-count-weighted sum of every weight GEMM curve whose M is the batch's tokens (all but
# the LM head's and the routed experts', which the kernel holds at the roofline one by one): linear interpolation is linear in the curve, so one lookup gives what looking
# each operator up and summing would (an iteration's total, reassociated).
EFF_GEMM_SUM = EFF_DECODE + EFF_DEC_POINTS * EFF_CTX_POINTS
# Seconds of one MoE layer's expert all-to-all (dispatch and combine) at the bytes each GPU moves,
# 2**(EFF_LINK_LOG2_MIN + i): the measured all-to-all kernels where the set has them, else the
# collectives' curve above.
EFF_A2A = EFF_GEMM_SUM + EFF_M_POINTS
EFF_SIZE = EFF_A2A + EFF_LINK_POINTS
EFF_FLOOR = 1e-4  # smallest efficiency a table may hold (a kernel 10,000x slower than its roofline)

# Batching policies of the engine.
POLICY_CONTINUOUS = 0  # vLLM-like continuous batching (chunked prefill on = v1, off = v0)
POLICY_STATIC = 1  # a batch runs to completion before the next one forms
POLICY_DYNAMIC = 2  # static batches formed by a window: up to B requests or W seconds

# How data-parallel replicas share requests.
ROUTER_ROUND_ROBIN = 0
ROUTER_LEAST_OUTSTANDING = 1  # the replica with the fewest waiting + running requests

# Request status after a simulation.
STATUS_PENDING = 0  # never arrived (should not remain after a run)
STATUS_WAITING = 1
STATUS_RUNNING = 2
STATUS_DONE = 3
STATUS_REJECTED = 4  # prompt + output longer than max_model_len
STATUS_TIMED_OUT = 5  # not finished within the client timeout
STATUS_TRANSFER = 6  # disaggregated serving: prefilled, its KV cache on its way to the decode pool
STATUS_NAMES = ("pending", "waiting", "running", "done", "rejected", "timed_out", "transferring")

# Slots of the engine's stats vector (float64).
STAT_END_S = 0  # time the last request finished
STAT_BUSY_S = 1  # time the GPU spent in iterations
STAT_FLOPS = 2
STAT_MEM_BYTES = 3
STAT_ITERATIONS = 4
STAT_PREFILL_TOKENS = 5  # prompt tokens computed (recomputation after preemption included)
STAT_DECODE_TOKENS = 6  # decode tokens computed
STAT_KV_BLOCK_SECONDS = 7  # integral of KV blocks in use over time
STAT_PEAK_BLOCKS = 8
STAT_SEQ_SECONDS = 9  # integral of scheduled sequences over time
STAT_ITL_SUM = 10
STAT_ITL_SQSUM = 11
STAT_ITL_COUNT = 12
STAT_PREEMPTIONS = 13
STAT_FAST_ITERATIONS = 14  # iterations advanced in closed-form decode runs and speculative runs
STAT_MIN_FREE_BLOCKS = 15
STAT_SPEC_DRAFTS = 16  # speculative decoding: request steps that verified drafts (vLLM's num_drafts) ...
STAT_SPEC_DRAFT_TOKENS = 17  # ... the drafts they verified ...
STAT_SPEC_ACCEPTED = 18  # ... and those accepted
STAT_ENGINE_END_S = 19  # when the replica's last iteration ended (>= STAT_END_S: a batch can run on
#                          after every client whose request it holds gave up)
N_STATS = 20

# Slots of a replica's clock in its accumulator (at Layout.off_clock).
CLOCK_NOW = 0  # when the replica's next iteration starts
CLOCK_DEADLINE = 1  # the next client deadline among its requests
CLOCK_COHORT = 2  # time of the decode cohort's last advance
N_CLOCK = 3

# Columns of the windowed time series (float64, one row per window).
WIN_BUSY_S = 0
WIN_ITERATIONS = 1
WIN_OUTPUT_TOKENS = 2
WIN_COMPLETED = 3
WIN_SEQ_SECONDS = 4
WIN_KV_BLOCK_SECONDS = 5
WIN_ARRIVALS = 6
N_WIN = 7

# Columns of the engine's per-request state: ``reqi`` (int32, shape (n, N_RI)) and ``reqf``
# (float64, shape (n, N_RF)). One row per request keeps a request's fields together and lets
# kernels pass two arrays instead of fifteen; int32 and a shared finish/ready column keep it at
# 60 bytes a request.
RI_INPUT = 0  # prompt tokens
RI_OUTPUT = 1  # output tokens to generate (>= 1)
RI_CACHED = 2  # prompt tokens served from the prefix cache (a multiple of block_size)
RI_COMPUTED = 3  # tokens whose KV is computed
RI_GENERATED = 4  # output tokens emitted
RI_BLOCKS = 5  # KV blocks owned
RI_PREEMPTIONS = 6
RI_STATUS = 7  # STATUS_* code
RI_REPLICA = 8  # data-parallel replica the request was routed to
RI_DONE = 9  # the decode cohort's advance that emits the member's last token (-1: not a member)
RI_FIXED_BLOCKS = 10  # blocks it holds whatever its context: windowed layers' windows, recurrent states
N_RI = 11
RF_ARRIVAL = 0  # arrival time (closed loop: filled in as clients free up)
RF_FIRST_SCHED = 1
RF_FIRST_TOKEN = 2
RF_FINISH = 3  # finish, rejection or time-out time; before that, in a closed loop, the earliest
#               time the request may be sent (0, or its open-loop time under a rate limit)
RF_LAST_EMIT = 4  # time of the last token emitted
N_RF = 5
# RF_FIRST_TOKEN of a request whose first token, sampled elsewhere (a disaggregated prefill),
# streams when an engine admits it: admission sets RF_FIRST_TOKEN and RF_LAST_EMIT to its time.
FIRST_TOKEN_ON_ADMISSION = -2.0
# Closed loop: before a request is sent, RF_LAST_EMIT's column holds its client's delay, the
# time between the client's previous request ending and this send (seconds; <= 0: none). It is
# read once, when the request is sent, and set back to -1.
RF_CLIENT_DELAY = RF_LAST_EMIT

# Slots of the decode-run coefficients kept per batch size in the accumulator (at
# Layout.off_memo + batch size * N_MEMO; NaN until computed): an iteration of the run takes
# MEMO_REST_S + attention time, attention's FLOPs and bytes being affine in the context sum.
MEMO_REST_S = 0  # time of every operator but attention
MEMO_REST_FLOPS = 1
MEMO_REST_BYTES = 2
MEMO_ATTN_FLOPS = 3  # attention FLOPs at context sum 0 ...
MEMO_ATTN_BYTES = 4
MEMO_ATTN_FLOPS_SLOPE = 5  # ... and per token of context sum
MEMO_ATTN_BYTES_SLOPE = 6
# With shape-aware tables, the run's fixed grid coordinates (cost.shaped_attention_at_nb): log2 of
# rows x KV heads, of the batch size, and of the FLOPs slope over 2**EFF_PF_LOG2_MIN.
MEMO_X_ROWS = 7
MEMO_LOG_B = 8
MEMO_LOG_SLOPE = 9
N_MEMO = 10

# Slots of the memo of a batch's cost but attention's (at Layout.off_rest: two tables, the model's
# then a speculative drafter's, of Layout.rest_slots entries of N_REST slots, direct-mapped by the
# key; NaN until set). Every operator but attention depends on the batch's tokens and rows with
# logits alone (``cost.rest_totals_nb``). Decode steps repeat few pairs; each admission step
# brings its own (the batch's drafts plus a prompt): with REST_SLOTS entries most of those repeat
# too (a miss prices every operator: 64 entries cost bench-1m's speculative runs ~12%).
REST_TOKENS = 0  # the key: tokens ...
REST_EMIT = 1  # ... and rows with logits
REST_S = 2
REST_FLOPS = 3
REST_BYTES = 4
N_REST = 5
REST_SLOTS = 8192  # a power of two: a speculative engine's tables (without speculation: one entry, unused)

# Slots of the memo of a batch's cost but attention's in two tables (at Layout.off_prefix, then
# Layout.prefix_slots * N_PREFIX further; Layout.prefix_slots entries each, direct-mapped; NaN until
# set; ``cost.prefix_memo_nb``): the operators that depend on the tokens alone, by tokens (an
# admission iteration's tokens, the decode cohort plus a prompt, repeat where its rows with logits
# and contexts do not), and the LM head, logits gather and sampler, by rows with logits.
PREFIX_TOKENS = 0  # the key
PREFIX_S = 1  # the operators' sums, as cost.rest_ops_nb leaves them before OP_LM_HEAD
PREFIX_FLOPS = 2
PREFIX_BYTES = 3
PREFIX_A2A_S = 4  # the experts' all-to-all after the sampler (OP_MOE_ALLTOALL): seconds, FLOPs
PREFIX_A2A_FLOPS = 5
PREFIX_GEMM_S = 6  # the summed weight-GEMM curve at the tokens (with kernel tables; else 0)
PREFIX_MOE_S = 7  # the experts' GEMMs and activation at the tokens (cost.moe_experts_seconds_nb)
N_PREFIX = 8
EMIT_ROWS = 0  # the key
EMIT_LM_HEAD = 1  # seconds, FLOPs and memory bytes of OP_LM_HEAD, OP_LOGITS_GATHER, OP_SAMPLING
EMIT_GATHER = 4
EMIT_SAMPLING = 7
N_EMIT = 10
PREFIX_SLOTS = 2048  # a power of two: every batch of up to 2048 tokens (and rows) has its own entry

# Slots of a replica's int64 workspace ``ws`` (then, at the offsets of Layout: the cohort's
# block-phase counts, the running list, the schedule rows and the waiting queue).
QUEUE_HEAD = 0  # ring-buffer head of the waiting queue
QUEUE_ENTRIES = 1  # entries in the ring (timed-out ones are dropped lazily)
QUEUE_WAITING = 2  # entries still waiting
FREE_BLOCKS = 3  # free KV blocks
RUNNING_COUNT = 4  # running requests
PREEMPTED_COUNT = 5  # preemptions so far
FINISHED_LAST_STEP = 6  # requests that ended with the replica's last iteration
COHORT_SIZE = 7  # decode cohort (fast/cohort.py): members
COHORT_ADVANCES = 8  # cohort advances so far
COHORT_CONTEXT_SUM = 9  # sum of the members' computed tokens
COHORT_NEXT_DONE = 10  # advance count at which the first member completes (NEVER if none)
COHORT_JOINERS = 11  # members that joined since the last advance (listed in row SCHED_JOINER)
PREFILLING_COUNT = 12  # running requests outside the cohort (listed in row SCHED_PREFILLING)
COHORT_MEASURED = 13  # members past the warm-up (EngineSettings.warmup): their tokens' ITLs count
RUNNING_HOLES = 14  # entries of the running list that members completing left empty (-1), removed lazily
N_WORKSPACE_SLOTS = 15
NEVER = 1 << 62  # an advance count no run reaches
DONE_RING = 1024  # buckets of the cohort's members by RI_DONE modulo this (a power of two; Layout.off_done_ring)

# Rows of the workspace's schedule (Layout.off_sched, Layout.sched_cap entries each).
SCHED_REQUEST = 0  # this iteration's requests ...
SCHED_NEW_TOKENS = 1  # ... and the tokens each computes in it
SCHED_JOINER = 2  # cohort members that joined since the last advance
SCHED_PREFILLING = 3  # running requests outside the cohort, in admission order
SCHED_NEW_BLOCKS = 4  # a speculative iteration's blocks for each running row (scheduler.py)
SCHED_FINISHING = 5  # cohort members that finish at an advance, then retire (fast/cohort.py; no cohort under speculation)
N_SCHED_ROWS = 7
# A speculative run's per-request state (simcore/fast/spec_run.py), entry j for running request j,
# kept in the schedule rows while the run lasts (without a cohort no schedule row outlives a step).
RUN_COMPUTED = 0  # tokens computed
RUN_GENERATED = 1  # output tokens emitted
RUN_OUTPUT = 2  # output tokens to generate
RUN_CAPACITY = 3  # tokens its KV blocks hold
RUN_HASH = 4  # its acceptance draws' hash (speculative.request_hash_nb)
RUN_NEED = 5  # the step being planned: the tokens it schedules (its last and its drafts) ...
RUN_NEXT_CAPACITY = 6  # ... and what its KV blocks hold after it
RUN_DONE = -1  # RUN_NEED of a row that ended in the step taken (the run drops it)

# Slots of the counters all replicas share (int64, ``glob``): another thread may read
# GLOBAL_ENDED while the kernel runs.
GLOBAL_ENDED = 0  # requests finished, rejected or timed out
GLOBAL_NEXT_SEND = 1  # closed loop: next request to hand to a free client
GLOBAL_NEXT_ARRIVAL = 2  # next request to reach the engine (those before it have arrived)
GLOBAL_HANDOFFS = 3  # disaggregated serving: prefilled requests listed at N_GLOBALS + 0, 1, ... (the
#                      prefill pool's EngineSettings.handoff), drained after every prefill step
GLOBAL_ROUTED = 4  # requests routed to a replica so far (round robin's turn)
GLOBAL_BASE = 5  # a streamed run (simcore.stream): rows dropped so far; row r is request GLOBAL_BASE + r
N_GLOBALS = 6

# Columns of a disaggregated run's per-request transfer state (``xfer``, float64, shape (n, N_XF);
# simcore.disagg).
XF_OUTPUT = 0  # output tokens the request generates in all (the prefill pool sees 1)
XF_BYTES = 1  # KV-cache bytes its prompt sends to the decode pool
XF_PREFILL_DONE = 2  # out: when the prefill pool produced its first token (-1: never)
XF_START = 3  # out: when its KV cache started to move (after the link latency; -1: never)
XF_DONE = 4  # out: when its KV cache reached the decode pool (-1: never)
XF_LEFT = 5  # scratch: bytes still to move
N_XF = 6

# Columns of a lockstep iteration's plan (engine.lockstep_step_nb; float64, one row per replica).
PLAN_SCHED = 0  # requests the replica scheduled (0: it sits the step out)
PLAN_FLOPS = 1  # its iteration's FLOPs ...
PLAN_BYTES = 2  # ... and memory bytes
PLAN_USED = 3  # its KV blocks in use
PLAN_FAST = 4  # how the rank's step was scheduled: one of PLAN_EXPLICIT, PLAN_COHORT, PLAN_PREFILL_ONLY
N_PLAN = 5
# Values of PLAN_FAST: the explicit scheduler (its requests materialised), its decode cohort in
# aggregate (fast/cohort.py) or a v0 prefill-only step beside the cohort (fast_schedule_nb's
# FAST_PREFILL_ONLY).
PLAN_EXPLICIT = 0.0
PLAN_COHORT = 1.0
PLAN_PREFILL_ONLY = 2.0
