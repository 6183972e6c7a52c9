"""Every rule id (K…, C…, P…) with its title, reason, fix and where it is enforced, built from the registries
themselves: the validate registry (rules/), the version lock's pins (versions.json), the log-check table
(healthchecks/logchecks.yaml) and the gate's checks (each check module's RULES). `appliance rules` prints it
and docs/rules.md is rendered from it, so a user who meets "K15" anywhere can look it up offline.

Ids enforced nowhere in validate carry their title and reason in DEFINED_HERE: the one place they are stated.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from appliance.jsonstrict import JsonObject
from appliance.rules import REGISTRY
from appliance.rules.upgrade import RULES as UPGRADE_RULES

DEFINED_HERE: dict[str, tuple[str, str, str]] = {
    # id: (title, reason, fix)
    "K12": ("engagement is read back from the serve log, never assumed",
            "features are availability-gated and fall back silently; only the engine's own log line proves them",
            "read `appliance logscan` / the exporter's /status; each expectation names its fix"),
    "K13": ("flashinfer-python and flashinfer-cubin are the same version",
            "FlashInfer rejects a python/cubin mismatch at import",
            "install both at the locked version (appliance versions --check)"),
    "K14": ("apache-tvm-ffi stays at the locked version",
            "0.1.13.post0 satisfies FlashInfer's range but is ABI-incompatible with the tilelang build "
            "(double-registration abort); an unpinned resolve takes it. The seed names that release only: others "
            "are not known to be bad, nor known to be good",
            "reinstall the locked apache-tvm-ffi after everything else"),
    "K15": ("the locked NCCL on every node",
            "a rebuild silently reverts NCCL to torch's bundled one, and a per-node mismatch hangs the NCCL "
            "handshake without an error",
            "install nvidia-nccl-cu13 at the locked version last, on every node"),
    "K16": ("versions.json is the only place a version is written",
            "the fork keeps FlashInfer's version in three places ('All three places that carry the version move "
            "together ... which is easy to half-do': requirements/cuda.txt, docker/Dockerfile's FLASHINFER_VERSION, "
            "docker/versions.json); forkcheck holds all three to the lock",
            "change versions.json and regenerate; never restate a version"),
    "K17": ("fatal log signatures turn the serve unhealthy at once",
            "these lines mean the engine cannot serve (or is about to hang): waiting for /health to notice loses "
            "minutes", "read the matched line and its message; the root cause is usually above it"),
    "K18": ("/health can be green while the engine is stuck",
            "the API server answers while the engine core is dead or wedged in NCCL; readiness also needs "
            "engine progress under load", "the exporter's /ready says why; restart the serve"),
    "K19": ("reasoning efforts and </think> handling on both endpoints",
            "with no reasoning field the tokenizer thought while the parser did not, so reasoning with a bare "
            "</think> came back as the answer — on the default path of a stock OpenAI SDK",
            "run the engine the lock pins (it carries the fix); the gate's reasoning check shows the failure"),
    "K30": ("the engine log has no NameError or AttributeError",
            "a name read and never defined is a broken code path: the seed's merges left a NameError at "
            "draft-model construction that no conflict marker pointed at, and an AttributeError on every "
            "offload-handler shutdown that its caller swallowed into tracebacks; jasl/vllm-ds4-sm120-harness "
            "(which expects the seed's head) refuses "
            "a build whose engine log has either (acceptance check C4)",
            "read the traceback above the line: it names the file; check the stack with appliance versions --check"),
    "K35": ("the GB10 kernel release is one NCCL over RoCE works on",
            "on kernel 7.0.0-1019-nvidia NCCL's `ibv_reg_mr_iova2` fails with ENOMEM at start-up while "
            "6.17.0-1032-nvidia works (MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks#14; HWE 7.0.0-31 likewise, "
            "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259); the cause found is Kexec HandOver on by default "
            "in those kernels (NVIDIA/NV-Kernels#591)",
            "boot 6.17.0-1032-nvidia, or add kho=off to the kernel command line"),
    "K39": ("each rank of a multi-node serve names its own fabric interface, address and RDMA device",
            "without a concrete interface torch's Gloo binds what gethostname() resolves to, which a host's "
            "/etc/hosts often maps to loopback (127.0.1.1; a host-network pod's carries only 127.0.0.1), and its "
            "full mesh fails there (aws-samples/aws-do-eks#69; #51: GLOO_SOCKET_IFNAME takes one concrete name, not "
            "NCCL's exclusion list); NCCL's out-of-band sockets and VLLM_HOST_IP "
            "then miss the fabric. NVIDIA's dgx-spark-playbooks set VLLM_HOST_IP, NCCL_SOCKET_IFNAME, "
            "GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME and UCX_NET_DEVICES on both nodes",
            "set APPLIANCE_FABRIC_IFNAME (or --fabric-ifname) and APPLIANCE_MASTER_ADDR to the head's fabric "
            "address; `appliance run` otherwise resolves the interface on the node (the route to the master "
            "address, or the RDMA device's netdev) and refuses one that is missing or loopback; `appliance "
            "profiles --host` lists RDMA device -> netdev -> address"),
    "K22": ("a worker rank notices that its head is gone",
            "observed on the CPU build: the headless worker kept running after the head died and ignored "
            "SIGTERM", "stop a rank with a group kill and a SIGKILL fallback; worker readiness follows its head"),
    "K23": ("the serve's memory need fits what the host can give",
            "gpu_memory_utilization is not a ceiling and Docker/cgroup limits do not see CUDA allocations: on GB10's "
            "unified memory an over-committed serve ends in a hung or hard-reset host",
            "lower limits.gpu_memory_utilization, max_model_len or max_num_seqs as doctor names, or free memory"),
    "K27": ("an RDMA serve runs with an unlimited memlock",
            "NCCL's IB/RoCE transport registers (pins) its buffers with ibv_reg_mr, bounded by RLIMIT_MEMLOCK; "
            "IPC_LOCK grants nothing to the image's non-root user, so the container runtime's limit (8 MiB is "
            "common) is what NCCL gets, and registration fails or the handshake hangs",
            "memlock unlimited: compose `ulimits: memlock: -1`, `docker run --ulimit memlock=-1`, containerd "
            "LimitMEMLOCK=infinity for Kubernetes (docs/kubernetes.md)"),
    "K28": ("a multi-node group keeps its caches per rank and waits out the slower rank's download",
            "one claim in both pods cannot attach ReadWriteOnce storage on two nodes (and with ReadWriteMany both "
            "ranks would write one JIT cache); an emptyDir with RecreateGroupOnPodRestart downloads ~2 x 160 GB on "
            "every restart; and downloads that finish further apart than the rendezvous wait restart the group in "
            "a loop",
            "per-rank PVCs (the default; --storage-class), host folders (--host-cache, --prestaged), or one "
            "ReadWriteMany claim; the rendezvous wait is sized for the download (--download-mbps)"),
    "W3": ("a checkpoint is served only when its snapshot is complete on disk",
           "an interrupted download looks complete (a config.json, most shards): the engine fails to load it, or "
           "loads a truncated or corrupt shard, and is restarted in a loop",
           "run `appliance fetch-model` (it keeps complete files and fetches the rest again) or `appliance "
           "sync-model` from a rank whose copy is complete; `appliance fetch-model --check` lists every problem"),
    "W5": ("a warm start loads its compile caches instead of compiling again",
           "torch.compile, FlashInfer JIT and autotuning cost minutes per start on GPU (about 100 s on the CPU "
           "build); a cache that does not load makes every start cold, silently",
           "keep APPLIANCE_HOME/cache (keyed by lock digest + engine digest) across starts, or carry it in a bundle; "
           "the log check names the engine's reason when a cache does not load"),
    "W6": ("a one-rank CPU serve runs its worker inside the engine core",
           "vLLM's CPU platform turns a one-rank serve's `uni` executor into `mp` while V1 multiprocessing is on, "
           "which spawns a third Python process: its imports alone cost ~15 s of each start on 2 cores (57.8 s to "
           "healthy against 42.9 s without it, the medians of benchmarks/time_to_ready.py --engine-default; decode "
           "the same)",
           "nothing: the CPU plan renders VLLM_ENABLE_V1_MULTIPROCESSING=0 for one rank; a serve of several ranks "
           "keeps the `mp` executor its ranks need"),
    # The doctor's own checks (appliance/doctor/report.py names them): what a host must give the serve that no
    # profile rule can judge, since only the machine in front of the doctor knows it.
    "H1": ("the profile's GPUs are visible: as many as hardware.gpus_per_node",
           "an engine that sees fewer GPUs than the profile's ranks fails at start, or on a container without its "
           "GPUs passed falls back to nothing at all",
           "pass every GPU to the container (compose: deploy.resources.reservations.devices; docker run --gpus "
           "all), or choose a profile for the GPUs here (appliance profiles --host)"),
    "H2": ("the GPUs are the architecture the image is built for (SM120/SM121)",
           "the image's kernels are compiled for SM12x only and the DeepSeek-V4 SM12x paths run nowhere else: on "
           "another architecture the engine fails to load its kernels or falls back without a word",
           "run on SM12x hardware, or choose a profile for this GPU (appliance profiles --host)"),
    "H3": ("the GPU is the model the profile's memory figures are for",
           "the memory rules (K20, K23) are calibrated on the profile's GPU; another card of the same architecture "
           "may hold less", "use the profile of this card, or check its limits against the card's memory"),
    "H4": ("the API port is free",
           "an engine whose port is taken dies at bind, after loading its weights (minutes on a GPU)",
           "stop what holds the port (the doctor's line names it), or set server.port"),
    "H5": ("no other vLLM engine runs on this host",
           "on a GPU a second engine holds the memory this one needs (it fails to load, or K23's figures no longer "
           "hold); on the CPU target they compete for the cores",
           "stop the other engine first (`appliance run` supervises its own)"),
    "H6": ("the installed stack is the profile's channel of versions.json",
           "a profile is validated against its channel's engine and pins; another channel's image, or a stack that "
           "drifted from the pins, serves it with code its rules were not judged for",
           "run the image of the profile's channel (appliance channels), or `appliance versions --check --channel "
           "CHANNEL` for each package to reinstall"),
    "K25": ("the fabric between ranks is qualified before launch",
            "a fabric that fell back to sockets, or nodes with different NCCL binaries, HCAs or MTU, make NCCL slow "
            "or hang minutes into the serve instead of failing at start",
            "make NCCL use the RDMA fabric (NCCL_IB_HCA, cabling, MTU) and the same NCCL build on every node"),
}

Where = str
"""validate | lock | log | gate | health | doctor | run | upgrade"""


@dataclass
class Enforcement:
    where: Where
    what: str


@dataclass
class RuleEntry:
    id: str
    title: str
    reason: str
    fix: str
    enforced: list[Enforcement] = field(default_factory=list)


def _key(rule_id: str) -> tuple[str, int]:
    m = re.match(r"([A-Z]+)(\d+)", rule_id)
    return (m[1], int(m[2])) if m else (rule_id, 0)


def build() -> list[RuleEntry]:
    from appliance.gate.runner import CHECK_RULES
    from appliance.health.table import load_table
    from appliance.lock import load_lock

    entries: dict[str, RuleEntry] = {}

    def entry(rule_id: str) -> RuleEntry:
        if rule_id not in entries:
            if rule_id in REGISTRY:
                r = REGISTRY[rule_id]
                entries[rule_id] = RuleEntry(rule_id, r.title, r.reason, r.fix)
            elif rule_id in DEFINED_HERE:
                entries[rule_id] = RuleEntry(rule_id, *DEFINED_HERE[rule_id])
            elif rule_id in UPGRADE_RULES:
                u = UPGRADE_RULES[rule_id]
                entries[rule_id] = RuleEntry(rule_id, u.title, u.reason, u.fix)
            else:
                raise KeyError(f"rule {rule_id} is cited but defined nowhere (add it to appliance/rulebook.py)")
        return entries[rule_id]

    for rule_id in REGISTRY:
        entry(rule_id).enforced.append(Enforcement("validate", "appliance validate / run refuse or warn"))
    # A package some channel pins under a rule (an image channel lists its wheels for the record, with no rule).
    for pin in {p.name: p for ch in load_lock().channels.values() for p in ch.pins() if p.rule}.values():
        # The name only: a version is written in versions.json and nowhere else (K16).
        entry(pin.rule).enforced.append(Enforcement("lock", f"versions --check / doctor: {pin.name} as locked"))
    table = load_table()
    for fact in table.facts:
        if fact.rule:
            entry(fact.rule).enforced.append(Enforcement("log", f"fact {fact.id}: {', '.join(fact.produces())}"))
        if fact.same_on_every_rank:
            entry(fact.same_on_every_rank).enforced.append(
                Enforcement("log", f"fact {fact.id} must agree on every rank"))
    for fatal in table.fatal:
        entry(fatal.rule).enforced.append(Enforcement("log", f"fatal {fatal.id}: {fatal.message}"))
    for e in table.expectations:
        sev = "" if e.severity == "error" else f" ({e.severity})"
        entry(e.rule).enforced.append(Enforcement("log", f"expectation {e.id}{sev}" + (f": {e.fix}" if e.fix else "")))
    for name, rule_ids in CHECK_RULES.items():
        for rule_id in rule_ids:
            entry(rule_id).enforced.append(Enforcement("gate", f"appliance gate --checks {name}"))
    for rule_id in DEFINED_HERE:
        entry(rule_id)
    for rule_id, u in UPGRADE_RULES.items():
        entry(rule_id).enforced.extend(Enforcement(where, what) for where, what in u.enforced)
    entry("K18").enforced.append(Enforcement("health", "the exporter's /ready: engine progress while requests run"))
    entry("K22").enforced.append(Enforcement("health", "a worker's readiness follows its head's API"))
    entry("K23").enforced.append(Enforcement("doctor", "doctor / run preflight: the profile's need vs MemAvailable "
                                                       "or free GPU memory"))
    entry("K35").enforced.append(Enforcement("doctor", "doctor / run preflight on multi-node GB10: the kernel "
                                                       "release (and kho=off) against the known-bad releases"))
    entry("K25").enforced.append(Enforcement("run", "appliance run: NCCL library hash, HCAs and MTU compared at the "
                                                    "rendezvous; bandwidth and latency to the head against the floor"))
    entry("K39").enforced.append(Enforcement("run", "appliance run on a multi-node GPU rank, before the "
                                                    "rendezvous: the interface, address and RDMA device resolved from "
                                                    "this host's routes and /sys, refused when missing or loopback"))
    entry("K39").enforced.append(Enforcement("render", "appliance render: a worker rank without --fabric-ifname is "
                                                       "refused; the head's is warned"))
    entry("K16").enforced.append(Enforcement("lock", "compose, bake, Dockerfile args generated from versions.json"))
    entry("K16").enforced.append(Enforcement("lock", "versions --check / doctor: the image's engine-source.json names "
                                                     "the pinned commit"))
    entry("K27").enforced.append(Enforcement("doctor", "doctor / run preflight: RLIMIT_MEMLOCK on RDMA profiles"))
    for rule_id, what in (("H1", "the GPUs visible (NVML) against hardware.gpus_per_node"),
                          ("H2", "each GPU's compute capability against the profile's target"),
                          ("H3", "the GPU's name against the profile's card (a warning)"),
                          ("H4", "the API port free on this rank (a headless worker has none)"),
                          ("H5", "no vLLM process already running (fail on a GPU, warn on the CPU)"),
                          ("H6", "the image's channel and the installed packages against the profile's channel")):
        entry(rule_id).enforced.append(Enforcement("doctor", f"doctor / run preflight: {what}"))
    entry("K28").enforced.append(Enforcement("k8s", "appliance k8s: per-rank cache claims (or host folders), the "
                                                    "rendezvous wait and startup budget sized for the download"))
    entry("W3").enforced += [
        Enforcement("run", "appliance run: every file of the hub's listing present with its size and sha256/git-sha1 "
                           "before anything starts"),
        Enforcement("fetch-model", "appliance fetch-model: damaged files fetched again; --check lists every problem"),
        Enforcement("sync", "appliance sync-model: the sender's copy checked before sending, the receiver's on "
                            "arrival")]
    entry("W4").enforced.append(Enforcement("run", "appliance run: a worker fetches what it lacks from the head's "
                                                   "snapshot (rsync, master port + 3) before the rendezvous"))
    entry("W5").enforced += [
        Enforcement("run", "the CPU plan compiles with VLLM_USE_AOT_COMPILE=0 (the CPU build's AOT artefact never "
                           "loads); the caches are keyed by lock + engine digest under APPLIANCE_HOME/cache"),
        Enforcement("bundle", "appliance bundle carries the keyed caches to another machine")]
    entry("W6").enforced.append(Enforcement("run", "the one-rank CPU plan renders VLLM_ENABLE_V1_MULTIPROCESSING=0 "
                                                   "(render/plan.py)"))
    return sorted(entries.values(), key=lambda r: _key(r.id))


def to_json(entries: list[RuleEntry]) -> list[JsonObject]:
    return [asdict(e) for e in entries]


def render_text(entries: list[RuleEntry]) -> str:
    lines = []
    for e in entries:
        wheres = ", ".join(dict.fromkeys(x.where for x in e.enforced))
        lines += [f"{e.id:<4} {e.title}  [{wheres}]", f"     why: {e.reason}", f"     fix: {e.fix}"]
    return "\n".join(lines)


def render_markdown(entries: list[RuleEntry]) -> str:
    out = ["# Rules", "",
           "<!-- GENERATED by `appliance rules --markdown > docs/rules.md`; tests/test_rules_reference.py fails "
           "when it is stale. -->", "",
           "Every rule id the appliance cites, where it is enforced (validate = `appliance validate`/`run`, "
           "lock = `appliance versions --check`/doctor, log = the health exporter reading the serve log, "
           "gate = `appliance gate`, health = the exporter's readiness, doctor = `appliance doctor` and `run`'s "
           "preflight, run = `appliance run`, k8s = `appliance k8s`, upgrade = `appliance upgrade`), why, and what "
           "to do.", ""]
    for e in entries:
        out += [f"## {e.id}: {e.title}", "", f"- why: {e.reason}", f"- fix: {e.fix}", "- enforced:"]
        out += [f"  - {x.where}: {x.what}" for x in e.enforced]
        out.append("")
    return "\n".join(out)
