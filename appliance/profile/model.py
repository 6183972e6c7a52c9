"""The serve profile: typed, bounded, unknown keys rejected. Cross-field checks live in rules/."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from appliance.canary.config import Canary

GpuKind = Literal["rtx-pro-6000", "rtx-5090", "gb10", "cpu"]
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
# The engine's own default at -O2/-O3: not rendered, so the reference command stays flag for flag.
DEFAULT_CUDAGRAPH_MODE: CudagraphMode = "FULL_AND_PIECEWISE"
DEFAULT_PORT = 8000
DEFAULT_HEALTH_PORT = 9400


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Hardware(Section):
    gpu: GpuKind
    """GPU model the profile targets; `cpu` is the CPU smoke target."""
    nodes: int = Field(1, ge=1, le=16)
    """Machines in the serve. GB10 has one GPU per machine, so TP=2 there means two nodes."""
    gpus_per_node: int = Field(1, ge=1, le=8)
    """GPUs used on each machine (engine ranks per node on the cpu target)."""

    @property
    def target(self) -> Literal["gpu", "cpu"]:
        """The image and stack this hardware runs (versions.json targets)."""
        return "cpu" if self.gpu == "cpu" else "gpu"


class Model(Section):
    checkpoint: str = Field(min_length=1)
    """Hugging Face repository id of the checkpoint (its facts come from profiles/catalogue.yaml or its config.json)."""
    revision: str | None = None
    """Pinned revision (commit) of the checkpoint; null = whatever the cache holds."""
    quantization: Literal["mxfp4", "nvfp4", "none"]
    """Expert weight format: MXFP4 (0731 / original), NVFP4 (NVIDIA checkpoints), none (tiny test models)."""
    trust_remote_code: bool = False
    """Pass --trust-remote-code (DeepSeek-V4 needs it)."""


class Parallel(Section):
    tensor: int = Field(1, ge=1, le=16)
    """--tensor-parallel-size."""
    pipeline: int = Field(1, ge=1, le=16)
    """--pipeline-parallel-size."""
    expert: bool = False
    """--enable-expert-parallel."""


class Speculative(Section):
    method: Literal["dspark", "mtp"]
    """DSpark (draft weights inside the 0731 checkpoint) or MTP (heads of the original / NVFP4 checkpoint)."""
    num_tokens: int = Field(ge=1, le=16)
    """num_speculative_tokens; for DSpark equal to the checkpoint's dspark_block_size."""
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    """How draft tokens are sampled; the validated DSpark config uses probabilistic."""


class Cache(Section):
    kv_dtype: Literal["auto", "fp8", "fp8_ds_mla", "fp8_e4m3", "bfloat16"] = "auto"
    """--kv-cache-dtype; DeepSeek-V4 needs fp8."""
    block_size: int | None = Field(None, ge=1, le=4096)
    """--block-size; null = the engine's default."""
    prefix_caching: bool = True
    """--enable-prefix-caching / --no-enable-prefix-caching."""
    guard: Literal["auto", 0, 1, 2] = "auto"
    """Same-step ghost-block guard: auto = leave unset (engine picks 2 with prefix caching + spec decode)."""


class Engine(Section):
    runner: Literal["v1", "v2"] = "v2"
    """Model runner; VLLM_USE_V2_MODEL_RUNNER=1/0."""
    cudagraph_mode: CudagraphMode = DEFAULT_CUDAGRAPH_MODE
    """compilation_config.cudagraph_mode; the default is not rendered."""
    enforce_eager: bool = False
    """--enforce-eager: no torch.compile, no CUDA graphs (fast start, slower serve)."""
    sm120_decode: bool = True
    """Expect and enable the FlashInfer SM120 packed sparse-MLA decode path."""
    sm120_prefill: bool = True
    """Enable the FlashInfer SM120 prefill path (only active when decode is)."""
    eager_scratch_pool: bool = False
    """DSv4 eager scratch pool: corrupts output under concurrent mixed prefill+decode. Off."""
    accept_scratch_pool_corruption_risk: bool = False
    """The explicit acknowledgement K6 demands before eager_scratch_pool may be on."""
    kv_offload_gib: float = Field(0, ge=0, le=4096)
    """--kv-offloading-size in GiB; 0 = off."""
    fp4_indexer_cache: bool = False
    """attention_config.use_fp4_indexer_cache; needs DeepGEMM kernels SM12x lacks."""
    logits_processors: list[str] = Field(default_factory=list, max_length=8)
    """--logits-processors (module:Class); the canary's corruption injector is one (tests only)."""


class Limits(Section):
    max_model_len: int = Field(ge=16, le=1_048_576)
    """--max-model-len."""
    max_num_seqs: int | None = Field(None, ge=1, le=4096)
    """--max-num-seqs."""
    max_num_batched_tokens: int | None = Field(None, ge=16, le=1_048_576)
    """--max-num-batched-tokens."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=0.98)
    """--gpu-memory-utilization (GPU targets only)."""
    kv_cache_memory_gib: float | None = Field(None, gt=0, le=1024)
    """--kv-cache-memory-bytes: a fixed KV size instead of profiling for it (the cpu-smoke start skips warmup)."""


class Server(Section):
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    """The OpenAI-compatible API port (rank 0)."""
    health_port: int = Field(DEFAULT_HEALTH_PORT, ge=1, le=65535)
    """Port of the appliance's health exporter (/live, /ready, /status, /metrics)."""
    host: str | None = None
    """Bind address; null = the engine's default (all interfaces)."""
    served_model_name: str | None = None
    """Name clients use; null = the checkpoint id."""
    tokenizer_mode: str | None = None
    """--tokenizer-mode (deepseek_v4 for DeepSeek-V4)."""
    tool_call_parser: str | None = None
    """--tool-call-parser; also turns on --enable-auto-tool-choice."""
    reasoning_parser: str | None = None
    """--reasoning-parser (deepseek_v4 for DeepSeek-V4, K19)."""


class Distributed(Section):
    backend: Literal["mp", "ray"] = "mp"
    """--distributed-executor-backend for multi-node serves: vLLM's own launcher (mp) or Ray."""
    master_port: int = Field(29501, ge=1024, le=65535)
    """Rendezvous port on the head's fabric address."""
    nccl_ib_hca: str | None = None
    """NCCL_IB_HCA (e.g. the ConnectX device); null = NCCL's choice."""
    nccl_ib_disable: bool = False
    """NCCL_IB_DISABLE; the seed measured 15.1 vs 21.9 tok/s with IB disabled."""


class Provenance(Section):
    status: Literal["validated", "community", "unvalidated", "test"]
    """validated = the seed's battery passed on this hardware; community = reports only."""
    hardware: str | None = None
    """The hardware the status refers to."""
    source: str
    """Where the claim comes from."""
    date: dt.date | None = None
    """When it was validated."""


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
    canary: Canary | None = None
    """The correctness canary while serving (appliance/canary); null = off."""
    provenance: Provenance

