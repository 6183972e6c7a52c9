"""The serve profile: typed, bounded, unknown keys rejected. Cross-field checks live in rules/.

Conventions every section keeps (a new field follows them):
- strict types: `1` is no boolean, `'off'` no boolean, `"2048"` no number (YAML already refuses yes/no/on/off and
  1.1-only numbers such as `34:08`, appliance/yamlstrict.py); a float field takes an integer;
- a string that becomes an argv word of the engine is an `ArgWord`: never empty, never starting with `-` (vLLM's
  parser would read `--trust-remote-code` given as a value as the flag itself; tests/test_argv_words.py proves
  with the engine's own parser that what it parses equals the profile);
- every number bounded so that what is rendered is meaningful (no 1e-300 GiB that renders as 0 bytes).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from appliance.bounds import CHANNEL_MAX_CHARS, CHANNEL_PATTERN, MAX_MASTER_PORT, MAX_NODES, PORT_MAX, PORT_MIN, is_host
from appliance.profile.canary import Canary

GpuKind = Literal["rtx-pro-6000", "rtx-5090", "gb10", "cpu"]
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
# The engine's own default at -O2/-O3: not rendered, so the reference command stays flag for flag.
DEFAULT_CUDAGRAPH_MODE: CudagraphMode = "FULL_AND_PIECEWISE"
DEFAULT_PORT = 8000
DEFAULT_HEALTH_PORT = 8470
"""The exporter's default port: free on a GPU node, where host networking (compose, RDMA pods) puts it beside the
node's own agents. Not 9400 (dcgm-exporter's default; NVIDIA's GPU Operator runs it on every GPU node, and this was
the appliance's default before issue 33), and outside Prometheus' exporter range 9100-9999, which its default-port
allocations page lists as fully taken (node-exporter 9100, dcgm-exporter 9400, nvidia_gpu_exporter 9835, Cilium
9962-9965, ...). Also clear of vLLM and Triton (8000-8002), cAdvisor/kube-state-metrics (8080-8081), Consul and
VictoriaMetrics (8400), the kubelet and kube-proxy (10248-10256), torch's rendezvous (29500 and up), Kubernetes'
NodePorts (30000-32767) and Linux's ephemeral ports (32768 and up)."""
MIN_KV_CACHE_GIB = 1 / 1024


def _argv_word(value: str) -> str:
    if not value.strip():
        raise ValueError("empty: give a value, or null to leave the flag out")
    if value.lstrip().startswith("-"):
        raise ValueError("starts with '-': the engine's parser would read it as a flag of its own (a value "
                         "`--trust-remote-code` would turn that on); a name, parser or revision never starts so")
    return value


ArgWord = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_argv_word)]
"""A profile string the renderer puts on the engine's command line as a word of its own."""


class Section(BaseModel):
    # The docstrings under the fields are for readers: nothing reads them as descriptions, and pydantic's
    # use_attribute_docstrings re-reads and tokenizes the source on every import (~60 ms of each CLI call).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Hardware(Section):
    gpu: GpuKind
    """GPU model the profile targets; `cpu` is the CPU smoke target."""
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    """Machines in the serve. GB10 has one GPU per machine, so TP=2 there means two nodes."""
    gpus_per_node: int = Field(1, ge=1, le=8)
    """GPUs used on each machine (engine ranks per node on the cpu target)."""

    @property
    def target(self) -> Literal["gpu", "cpu"]:
        """The image and stack this hardware runs (versions.json targets)."""
        return "cpu" if self.gpu == "cpu" else "gpu"


class Model(Section):
    checkpoint: ArgWord
    """Hugging Face repository id of the checkpoint (its facts come from profiles/catalogue.yaml or its config.json)."""
    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    """Hub commit (40 lowercase hex) overriding the lock's pin (versions.json `checkpoints`); null = the lock's.
    A branch or tag is refused: it moves (and so no revision can be dash-led). Overriding the locked pin is a
    warning (W1)."""
    quantization: Literal["mxfp4", "nvfp4", "none"]
    """Expert weight format: MXFP4 (0731 / original), NVFP4 (NVIDIA checkpoints), none (tiny test models)."""
    trust_remote_code: bool = False
    """Pass --trust-remote-code (DeepSeek-V4 needs it)."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """--dtype of the weights and activations; auto = the checkpoint's own (bfloat16 for every shipped model). A CPU
    without native bfloat16 (AVX2 only) emulates it: cpu-smoke sets float32 there (measured 5.5x faster prefill)."""


class Parallel(Section):
    tensor: int = Field(1, ge=1, le=16)
    """--tensor-parallel-size."""
    pipeline: int = Field(1, ge=1, le=16)
    """--pipeline-parallel-size."""
    expert: bool = False
    """--enable-expert-parallel."""

    @property
    def ranks(self) -> int:
        """Engine ranks of the serve: tensor x pipeline (K10 holds it to nodes x GPUs per node)."""
        return self.tensor * self.pipeline


class Speculative(Section):
    method: Literal["dspark", "mtp"]
    """DSpark (draft weights inside the 0731 checkpoint) or MTP (heads of the original / NVFP4 checkpoint)."""
    num_tokens: int = Field(ge=1, le=16)
    """num_speculative_tokens; for DSpark equal to the checkpoint's dspark_block_size."""
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    """How draft tokens are sampled; the seed's Running DSpark example uses probabilistic."""


class Cache(Section):
    kv_dtype: Literal["auto", "fp8", "fp8_ds_mla", "fp8_e4m3", "bfloat16", "nvfp4_ds_mla"] = "auto"
    """--kv-cache-dtype; DeepSeek-V4 needs fp8. `nvfp4_ds_mla` is accepted here only so that K34 can say why it is
    refused on SM12x."""
    block_size: int | None = Field(None, ge=1, le=4096)
    """--block-size; null = the engine's default."""
    prefix_caching: bool = True
    """--enable-prefix-caching / --no-enable-prefix-caching."""
    guard: Literal["auto", 0, 1, 2] = "auto"
    """Same-step ghost-block guard: auto = leave unset (engine picks 2 with prefix caching + spec decode)."""

    @field_validator("guard", mode="before")
    @classmethod
    def _guard_is_no_boolean(cls, value: object) -> object:
        if isinstance(value, bool):  # True == 1 in Python: `guard: true` would silently mean guard 1
            raise ValueError("a boolean is no guard level; write auto, 0, 1 or 2")
        return value


class Engine(Section):
    channel: str | None = Field(None, pattern=CHANNEL_PATTERN, max_length=CHANNEL_MAX_CHARS)
    """The engine line (a channel of versions.json: `appliance channels`); the loader fills the lock's default
    (default_channel, default_cpu_channel on the cpu target) when the profile names none."""
    accept_unguarded_prefix_cache: bool = False
    """K4: the named acknowledgement that lets prefix caching + speculative decoding run on a channel without the
    same-step ghost-block guard (recall can collapse for the life of the serve). Prefer cache.prefix_caching: false."""
    runner: Literal["auto", "v1", "v2"] = "v2"
    """Model runner; VLLM_USE_V2_MODEL_RUNNER=1/0. auto = not rendered: the engine's own routing (the fork routes
    dspark to V2), what the seed battery's default arm judges (C2)."""
    cudagraph_mode: CudagraphMode = DEFAULT_CUDAGRAPH_MODE
    """compilation_config.cudagraph_mode; the default is not rendered."""
    enforce_eager: bool = False
    """--enforce-eager: no torch.compile, no CUDA graphs (fast start, slower serve)."""
    sm120_decode: bool = True
    """Expect and enable the FlashInfer SM120 packed sparse-MLA decode path."""
    sm120_prefill: bool = True
    """Enable the FlashInfer SM120 prefill path (its own switch: the seed, "set either=0 to fall back")."""
    eager_scratch_pool: bool = False
    """DSv4 eager scratch pool: corrupts output under concurrent mixed prefill+decode. Off."""
    accept_scratch_pool_corruption_risk: bool = False
    """The explicit acknowledgement K6 demands before eager_scratch_pool may be on."""
    kv_offload_gib: float = Field(0, ge=0, le=4096)
    """--kv-offloading-size in GiB; 0 = off."""
    fp4_indexer_cache: bool = False
    """attention_config.use_fp4_indexer_cache; needs DeepGEMM kernels SM12x lacks."""
    moe_backend: Annotated[ArgWord, Field(max_length=64, pattern=r"^[a-z0-9_]+$")] | None = None
    """--moe-backend: a MoE kernel backend asked for by name (e.g. b12x), opt-in; null = the engine's own choice (not
    rendered). E2 checks the value against the channel's engine, E11 that its lock installs the kernels."""
    flashinfer_autotune: bool | None = None
    """--enable-flashinfer-autotune / --no-enable-flashinfer-autotune; null = the engine's default (on at -O1
    and above). Ranks that tune apart can desynchronize and hang a TP launch (K31)."""
    cudagraph_capture_sizes: Literal["engine", "profile"] = "engine"
    """engine = vLLM's own capture list; profile = computed from the profile so that every uniform decode batch
    (n x (speculative tokens + 1) for n up to max_num_seqs) has a graph (K32), rendered in --compilation-config."""
    logits_processors: list[ArgWord] = Field(default_factory=list, max_length=8)
    """--logits-processors (module:Class); the canary's corruption injector is one (tests only)."""
    execute_model_timeout_s: int | None = Field(None, ge=30, le=86_400)
    """VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: how long the multiproc executor waits for one step; null = the
    engine's 300 s, which a mid-serve CuTe DSL / TileLang JIT on SM12x can exceed (K26)."""
    extra_args: list[Annotated[str, Field(min_length=1, max_length=8192)]] = Field(default_factory=list,
                                                                                  max_length=64)
    """Passthrough: engine flags the profile does not model (e.g. [--chat-template, /models/tpl.jinja]), rendered
    last as given. Unmodelled and unvalidated: rules X1-X5 refuse a flag the channel's engine lacks or the
    appliance manages (naming its key), and `-- ARGS` of render and run adds to it."""
    extra_env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)],
                    Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=64)
    """Passthrough: env vars for every rank (compose and Kubernetes too), e.g. {NCCL_IB_GID_INDEX: "3"}; a
    variable the appliance sets is refused naming its key (X3). A number is taken as its text."""

    @field_validator("extra_env", mode="before")
    @classmethod
    def _env_values_are_text(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool):  # YAML true would be "True": not what any tool reads as on
                raise ValueError(f"{key}: a boolean is no env value; write the text the program reads, e.g. \"1\"")
            out[key] = str(item) if isinstance(item, int | float) else item
        return out


class Limits(Section):
    max_model_len: int = Field(ge=16, le=1_048_576)
    """--max-model-len."""
    max_num_seqs: int | None = Field(None, ge=1, le=4096)
    """--max-num-seqs."""
    max_num_batched_tokens: int | None = Field(None, ge=16, le=1_048_576)
    """--max-num-batched-tokens."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=0.98)
    """--gpu-memory-utilization (GPU targets only)."""
    kv_cache_memory_gib: float | None = Field(None, ge=MIN_KV_CACHE_GIB, le=1024)
    """--kv-cache-memory-bytes: a fixed KV size instead of profiling for it (the cpu-smoke start skips warmup).
    At least 1 MiB: rendered in whole bytes, a smaller value would be 0 (the engine would profile after all)."""


class Server(Section):
    port: int = Field(DEFAULT_PORT, ge=PORT_MIN, le=PORT_MAX)
    """The OpenAI-compatible API port (rank 0)."""
    health_port: int = Field(DEFAULT_HEALTH_PORT, ge=PORT_MIN, le=PORT_MAX)
    """Port of the appliance's health exporter (/live, /ready, /status, /metrics)."""
    host: ArgWord | None = None
    """Bind address; null = the engine's default (all interfaces)."""
    served_model_name: Annotated[ArgWord, Field(pattern=r"^[^-\s]")] | None = None
    """Name clients use; null = the checkpoint id. Not empty, not starting like a flag."""
    tokenizer_mode: ArgWord | None = None
    """--tokenizer-mode (deepseek_v4 for DeepSeek-V4)."""
    tool_call_parser: ArgWord | None = None
    """--tool-call-parser; also turns on --enable-auto-tool-choice."""
    reasoning_parser: ArgWord | None = None
    """--reasoning-parser (deepseek_v4 for DeepSeek-V4, K19)."""
    front: bool = False
    """The appliance's HTTP front owns `port` and forwards each request to the engine, which listens on loopback at
    `engine_port` behind it: `appliance upgrade promote --beside` then moves the traffic to a bridge serve while the
    engine restarts on the new channel, with no time out of service (appliance/run/front.py). Single node only."""
    engine_port: int | None = Field(None, ge=PORT_MIN, le=PORT_MAX)
    """With `front`: the engine's own port on loopback; null = `port` + 1."""

    @field_validator("host")
    @classmethod
    def _host_is_an_address(cls, value: str | None) -> str | None:
        if value is not None and not is_host(value):
            raise ValueError("neither an IP address nor a host name")
        return value

    @model_validator(mode="after")
    def _two_ports(self) -> Server:
        if self.health_port == self.port:
            raise ValueError(f"health_port {self.health_port} is the API port too; give the exporter another port")
        if self.engine_port is not None and not self.front:
            raise ValueError(f"engine_port {self.engine_port} without front: the engine listens on `port` itself; "
                             f"set front: true, or drop engine_port")
        if self.front and self.engine_port is None and self.port == PORT_MAX:
            raise ValueError(f"port {self.port} with front: the engine's default port (port + 1) is past {PORT_MAX}; "
                             f"give engine_port")
        if self.front and self.behind_front_port in (self.port, self.health_port):
            raise ValueError(f"engine_port {self.behind_front_port} is the front's or the exporter's port too; give "
                             f"the engine a port of its own")
        return self

    @property
    def behind_front_port(self) -> int:
        """With `front`, where the engine listens on loopback."""
        return self.engine_port if self.engine_port is not None else self.port + 1


class Fabric(Section):
    min_bandwidth_gbps: float | None = Field(None, gt=0, le=10_000)
    """Floor on the measured rank<->head bandwidth in GB/s (10^9 bytes/s); null = measure and report only."""
    max_latency_us: float | None = Field(None, gt=0, le=1_000_000)
    """Ceiling on the measured small-message round trip / 2, in microseconds; null = report only."""
    on_fail: Literal["refuse", "warn"] = "refuse"
    """Below the floor: refuse the serve on every rank, or start with a warning."""
    transfer_mib: int = Field(64, ge=1, le=4096)
    """Size of the bandwidth transfer (MiB); a few are enough to leave TCP slow start and NCCL warm-up behind."""


class Distributed(Section):
    backend: Literal["mp", "ray"] = "mp"
    """--distributed-executor-backend for multi-node serves: vLLM's own launcher (mp) or Ray."""
    master_port: int = Field(29501, ge=1024, le=MAX_MASTER_PORT)
    """Rendezvous port on the head's fabric address (the consistency exchange uses the next one, the fabric
    qualification the one after, the model sync master port + 3)."""
    nccl_ib_hca: str | None = None
    """NCCL_IB_HCA (e.g. the ConnectX device); null = NCCL's choice."""
    nccl_ib_merge_nics: bool | None = None
    """NCCL_IB_MERGE_NICS; null = 1 when nccl_ib_hca names two or more devices (GB10's QSFP port is two
    virtual NICs: one alone runs at about half the port, K36), else NCCL's default."""
    nccl_ib_gid_index: int | None = Field(None, ge=0, le=255)
    """NCCL_IB_GID_INDEX; null = NCCL picks the RoCEv2 GID per device. A pinned index can drift on one of two HCAs
    and hang the handshake (K36)."""
    nccl_ib_disable: bool = False
    """NCCL_IB_DISABLE; keep IB on: 15.1 vs 21.9 tok/s decode with IB disabled, recorded from the harness baselines
    on GB10 in an earlier round (not a figure of the seed itself, and not re-found in the public harness since:
    a lead)."""
    fabric: Fabric = Fabric()
    """Fabric qualification before launch (K25): a short transfer from each rank to the head."""
    sync_model: bool = False
    """Workers take the head's verified snapshot over the fabric (rsync on master port + 3) before the ranks meet,
    instead of each downloading the checkpoint itself (W4). The head's copy must be complete."""


class Measured(Section):
    """What the seed actually ran for this claim: which engine head, which runner, which checks."""
    quote: str = Field(min_length=1)
    """The seed's own line the claim rests on."""
    head: str | None = None
    """Engine commit (short SHA) the checks ran on; null = the seed does not say."""
    tag: str | None = None
    """The fork's tag for that head, where the seed names one."""
    runner: Literal["v1", "v2"] | None = None
    """Model runner of that measurement; null = the seed does not say."""
    guard: Literal["absent", "on"] | None = None
    """Whether the same-step ghost-block guard existed and was on (K4)."""
    checks: list[str] = []
    """Which checks ran (gsm8k, recall, bench, reasoning, tests/v1/core, ...); empty = the seed does not list them."""
    max_model_len: int | None = Field(None, ge=16)
    """max_model_len of the measurement, where it differs from what the profile serves (P1 says so)."""
    tensor: int | None = Field(None, ge=1, le=16)
    """Tensor-parallel size of the measurement (heads per rank follow from it; P1)."""
    unverified: list[str] = []
    """Coverage the seed ran but could not turn into a verdict (a suite that wedged): named, never a pass."""
    figures: str | None = None
    """The measured figures, named as the seed names them."""


class Memory(Section):
    """Host-memory admission (K23) and the runtime watchdog's ladder (K24), in GiB of MemAvailable.

    GB10 shares its 128 GB between the GPU and the OS and can hang or hard-reset when it runs out, so
    its base sets watchdog: stop; elsewhere the watchdog warns."""

    watchdog: Literal["stop", "warn", "off"] = "warn"
    """stop = take the serve out of traffic, then stop the engine cleanly before `stop_below_gib` and start it
    again once memory recovers; warn = report in /status, metrics and the log only; off = do not watch."""
    os_reserve_gib: float = Field(4.0, ge=0, le=256)
    """MemAvailable the OS keeps besides the serve (page cache floor, sshd, container runtime): admission adds it."""
    overhead_gib: float | None = Field(None, ge=0, le=256)
    """Memory per rank outside weights and KV (activations, CUDA graphs, torch.compile/JIT workers, the API
    server); null = the target's estimate (GPU 4 GiB, CPU 1.5 GiB)."""
    not_ready_below_gib: float = Field(8.0, ge=0, le=1024)
    """Under this much MemAvailable the serve stops taking new traffic (/ready 503)."""
    stop_below_gib: float = Field(4.0, ge=0, le=1024)
    """The floor: the engine is stopped before MemAvailable falls under it (also when the fall rate will cross
    it within `lead_s`)."""
    resume_above_gib: float = Field(16.0, ge=0, le=1024)
    """A stopped engine is started again once MemAvailable has stayed above this for `recover_s`."""
    lead_s: float = Field(2.0, ge=0, le=60)
    """How far ahead the rate of fall is projected: stop when MemAvailable would cross the floor this soon."""
    recover_s: float = Field(10.0, ge=0, le=3600)
    """How long memory must stay recovered before the engine is started again."""
    psi_some_not_ready: float = Field(40.0, ge=0, le=100)
    """Memory PSI `some` avg10 (%) at which the serve stops taking new traffic."""
    psi_full_stop: float = Field(30.0, ge=0, le=100)
    """Memory PSI `full` avg10 (%) at which the engine is stopped: every task stalls on memory (thrashing)."""


class Provenance(Section):
    status: Literal["validated", "partial", "community", "unvalidated", "test"]
    """The harness's definition (its acceptance rule: anything not PASS is a blocker). validated = every check of
    the battery PASSed on this hardware, on measured.head, at the shape this profile ships (runner, guard,
    checkpoint, speculative method, max_model_len, tensor size); partial = accepted with blockers: something was
    measured, and `blockers` names each check that did not PASS and each way the shipped shape differs from the
    measured one; community = reports only; unvalidated = nothing measured."""
    hardware: str | None = None
    """The hardware the status refers to."""
    source: str
    """Where the claim comes from."""
    date: dt.date | None = None
    """When it was measured: the date of the seed's update that reports it."""
    measured: Measured | None = None
    """Structured: head, runner, checks. `appliance validate` warns when the profile runs what this did not (P1)."""
    blockers: list[str] = []
    """Why the status is not `validated`: each check that did not PASS, each check that never ran, each difference
    between the measured shape and the shipped one. Required (non-empty) for partial, refused for validated."""


class Profile(Section):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Profile name (the file's stem)."""
    description: str = ""
    """One line for `appliance profiles`."""
    hardware: Hardware
    model: Model
    parallel: Parallel = Parallel()
    speculative: Speculative | None = None
    """Speculative decoding; null = off."""
    cache: Cache = Cache()
    engine: Engine = Engine()
    limits: Limits
    server: Server = Server()
    distributed: Distributed = Distributed()
    memory: Memory = Memory()
    canary: Canary | None = None
    """The correctness canary while serving (appliance/canary); null = off."""
    provenance: Provenance
    caveats: dict[str, str] = {}
    """Warnings this profile accepts, each with why: `"RULE field": reason` (e.g. `"K38 engine.runner": ...`).
    Shown by `appliance profiles show` and `appliance config`, not on every command (appliance/rules/caveats.py)."""

    @field_validator("caveats")
    @classmethod
    def _caveats_name_a_rule_and_a_field_and_say_why(cls, value: dict[str, str]) -> dict[str, str]:
        for key, why in value.items():
            if not re.fullmatch(r"[A-Z]{1,3}[0-9]{1,3} [a-z_][a-z0-9_.]*", key):
                raise ValueError(f"caveat {key[:80]!r} is not `RULE field` (e.g. `K38 engine.runner`): a caveat "
                                 "accepts one rule's warning on one field")
            if not why.strip() or len(why) > 1000:
                raise ValueError(f"caveat {key!r} needs its reason (1 to 1000 characters): why it is accepted")
        return value

    @model_validator(mode="after")
    def _a_front_serves_one_node(self) -> Profile:
        if self.server.front and self.hardware.nodes > 1:
            raise ValueError(f"server.front on {self.hardware.nodes} nodes: the front serves a single-node profile "
                             f"(a bridge beside a multi-node group would need a second set of nodes); set front: false")
        return self

    @model_validator(mode="after")
    def _validated_means_every_check_passed_at_this_shape(self) -> Profile:
        prov = self.provenance
        if prov.status == "partial" and not prov.blockers:
            raise ValueError("provenance.status partial needs provenance.blockers: name each check that did not "
                             "PASS and each difference from the measured shape (the harness: anything not PASS "
                             "is a blocker)")
        why = validated_blockers(self) if prov.status == "validated" else []
        if why:
            raise ValueError("provenance.status validated needs every check of the battery PASSed at the shape "
                             f"this profile ships; here: {'; '.join(why)}. Set status partial and list these in "
                             "provenance.blockers")
        return self


def validated_blockers(profile: Profile) -> list[str]:
    """What stops `profile` being `validated` in the harness's sense: its named blockers, the measurement's
    unverified coverage, and each way its shipped shape (max_model_len, tensor size, runner, the guard switched off)
    differs from the measured one."""
    prov, m = profile.provenance, profile.provenance.measured
    out = list(prov.blockers)
    if m is None:
        return [*out, "nothing measured"]
    out += [f"not PASS: {u}" for u in m.unverified]
    if m.max_model_len is not None and m.max_model_len != profile.limits.max_model_len:
        out.append(f"measured at max_model_len {m.max_model_len}, ships {profile.limits.max_model_len}")
    if m.tensor is not None and m.tensor != profile.parallel.tensor:
        out.append(f"measured at tensor size {m.tensor}, ships {profile.parallel.tensor}")
    if m.runner is not None and m.runner != profile.engine.runner:
        out.append(f"measured with runner {m.runner}, ships {profile.engine.runner}")
    if m.guard == "on" and profile.cache.guard == 0:
        out.append("measured with the ghost-block guard on, ships it off (cache.guard: 0)")
    return out
