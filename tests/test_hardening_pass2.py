"""Issue 22 items 6-9 (the smaller classes): `extends` amplification, supervisor's double `%(ENV_X)s` expansion,
symlink loops, terminal escapes, format characters, strict profile types, render bounds, Kubernetes flag values,
FIFO and huge numbers in procfs and versions.json, two profiles with one name, a launch.json without an argv."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from tests.data_copy import copy_data_root
from tests.in_process import CliRun, run_main, time_limit

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None, limit_s: float = 30) -> tuple[int, str, str]:
    """`appliance ARGS` in-process under a hard time limit (tests/in_process.py: SIGALRM interrupts a blocking open
    or read), so a regression that reads a FIFO fails the test instead of hanging the suite."""
    run = run_main(args, env=env, limit_s=limit_s)
    return run.returncode, run.stdout, run.stderr


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """A copy of the data root (versions.json, profiles/, healthchecks/, channels/) a test may break; APPLIANCE_ROOT
    points there for each call (tests/in_process.py empties the caches that would keep the first root)."""
    return copy_data_root(tmp_path)


def run_in(root: Path, *args: str, timeout: float = 60, **env: str) -> CliRun:
    """`appliance ARGS` in-process on the data root `root`."""
    return run_main(args, env={"APPLIANCE_ROOT": str(root), **env}, cwd=ROOT, limit_s=timeout)


# --- item 7: extends amplification ------------------------------------------------------------------------------------

def _base(root: Path, name: str, extends: list[str], body: str = "") -> None:
    (root / "profiles" / "bases" / f"{name}.yaml").write_text(f"extends: {json.dumps(extends)}\n{body}")


class TooMany(Exception):
    pass


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the profile loader reads; past 1,000 reads the load is stopped (an exponential expansion would
    otherwise run for ever instead of failing the test)."""
    import appliance.profile.loader as loader

    seen: list[Path] = []
    real = loader.load_file

    def counting(path: Path) -> object:
        seen.append(path)
        if len(seen) > 1000:
            raise TooMany(f"{len(seen)} reads")
        return real(path)

    monkeypatch.setattr(loader, "load_file", counting)
    return seen


def test_nineteen_thousand_entries_of_one_base_read_it_once(data_root: Path, reads: list[Path]) -> None:
    from appliance.profile.loader import load_profile

    profile = (data_root / "profiles" / "cpu-smoke.yaml").read_text()
    many = json.dumps(["bases/amp"] * 19_000)
    _base(data_root, "amp", [], "distributed: {nccl_ib_disable: true}\n")
    (data_root / "profiles" / "many.yaml").write_text(f"extends: {many}\n{profile}".replace("\nextends:", "\n#"))
    loaded = load_profile("many", root=data_root / "profiles")
    assert loaded.origin("distributed.nccl_ib_disable") == "base:bases/amp"
    assert sorted(p.name for p in reads) == ["amp.yaml", "many.yaml"]  # once each, not 19,000 times


def test_bases_listing_each_other_a_hundred_times_is_a_cycle_refused_at_once(data_root: Path) -> None:
    _base(data_root, "ping", ["bases/pong"] * 100)
    _base(data_root, "pong", ["bases/ping"] * 100)
    (data_root / "profiles" / "cyc.yaml").write_text("extends: [bases/ping]\n")
    began = time.monotonic()
    r = run_in(data_root, "validate", "cyc")
    assert r.returncode == 2 and "extends itself" in r.stderr and time.monotonic() - began < 30, r.stderr


def test_a_fan_out_graph_reads_each_file_once_and_too_many_files_are_refused(data_root: Path,
                                                                            reads: list[Path]) -> None:
    from appliance.profile.loader import load_profile

    for i in range(12):  # each base lists the next one a hundred times, and the one after: 100^12 paths, 12 files
        nxt = [f"bases/lvl{i + 1}", f"bases/lvl{min(i + 2, 11)}"] * 50 if i < 11 else []
        _base(data_root, f"lvl{i}", nxt, f"limits: {{max_num_seqs: {i + 1}}}\n")
    profile = (data_root / "profiles" / "cpu-smoke.yaml").read_text().replace("  max_num_seqs: 8\n", "")
    (data_root / "profiles" / "fan.yaml").write_text("extends: [bases/lvl0]\n" + profile.replace("extends:", "#"))
    loaded = load_profile("fan", root=data_root / "profiles")
    assert loaded.profile.limits.max_num_seqs == 1  # lvl0 applied last, over everything it builds on
    assert len(reads) == 13 and len(set(reads)) == 13
    for i in range(40):
        _base(data_root, f"chain{i}", [f"bases/chain{i + 1}"] if i < 39 else [])
    (data_root / "profiles" / "deep.yaml").write_text("extends: [bases/chain0]\n")
    r = run_in(data_root, "validate", "deep")
    assert r.returncode == 2 and "more than 32 files" in r.stderr, r.stderr


def test_a_repeated_base_merges_exactly_as_applying_it_each_time(tmp_path: Path) -> None:
    """Keeping a layer's last application only is exact: [A, B, A] gives what A, B, A applied in turn give."""
    from appliance.profile.loader import _merge

    a = {"cache": {"block_size": 64}, "speculative": {"method": "mtp", "num_tokens": 1}, "description": "a"}
    b = {"cache": {"block_size": 128, "kv_dtype": "fp8"}, "speculative": None, "description": "b"}
    full: dict = {}
    for layer in (a, b, a):
        _merge(full, layer, "x", {}, "")
    kept: dict = {}
    for layer in (b, a):
        _merge(kept, layer, "x", {}, "")
    assert full == kept


# --- item 8: supervisor expands %(ENV_X)s twice -------------------------------------------------------------------

@pytest.mark.parametrize("folder", ["p%(ENV_HOME)s", "p%(ENV_HF_TOKEN)s", "50%", "a;b", "a#b"])
@pytest.mark.parametrize("source", ["--run-dir", "APPLIANCE_LOG_DIR", "APPLIANCE_HOME"])
def test_a_run_folder_supervisor_would_read_otherwise_is_refused_naming_its_source(
        tmp_path: Path, smoke_model_dir: Path, folder: str, source: str) -> None:
    place = tmp_path / folder
    args = ["run", "cpu-smoke", "--dry-run", "--skip-doctor", "--model-dir", str(smoke_model_dir)]
    env = {"APPLIANCE_HOME": str(tmp_path / "home"), "HF_TOKEN": "SxTokenInPath42"}
    if source == "--run-dir":
        args += ["--run-dir", str(place)]
    elif source == "APPLIANCE_LOG_DIR":
        env["APPLIANCE_LOG_DIR"] = str(place)
    else:
        env["APPLIANCE_HOME"] = str(place)
    code, _, err = cli(*args, env=env)
    assert code == 2 and source in err and "supervisor" in err, err
    assert not any("SxTokenInPath42" in str(p) for p in tmp_path.rglob("*"))  # no secret became a file name
    assert not (place / "supervisord.conf").exists()


def test_verify_conf_compares_every_path_supervisor_opens_with_the_plan(tmp_path: Path) -> None:
    from appliance.render.plan import ServePlan
    from appliance.render.supervisord import RunFiles, render_conf
    from appliance.run.launch import verify_conf

    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    conf = real / "supervisord.conf"
    conf.write_text(render_conf(ServePlan(["vllm", "serve", "m"], {}, "single"), RunFiles(real, tmp_path / "s.sock"),
                                {}, ["exporter"]))
    planned = {"vllm": ["vllm", "serve", "m"], "exporter": ["exporter"], "logtail": None, "crashguard": None}
    verify_conf(conf, planned, RunFiles(real, tmp_path / "s.sock"))  # what it wrote is what it reads
    with pytest.raises(ApplianceError, match=r"supervisor reads the .* as"):
        verify_conf(conf, planned, RunFiles(other, tmp_path / "s.sock"))  # a log elsewhere than planned


# --- item 9: the smaller classes --------------------------------------------------------------------------------------

def test_a_symlink_loop_in_profiles_is_listed_invalid_and_refused_without_a_traceback(data_root: Path) -> None:
    profiles = data_root / "profiles"
    (profiles / "loop.yaml").symlink_to("loop.yaml")
    (profiles / "bases" / "bloop.yaml").symlink_to("bloop.yaml")
    (profiles / "usesloop.yaml").write_text("extends: [bases/bloop]\n")
    listing = run_in(data_root, "profiles", "--all")
    assert listing.returncode == 0 and "loop  INVALID" in listing.stdout and "Traceback" not in listing.stderr
    assert "cpu-smoke " in listing.stdout  # the others are still listed
    for name in ("loop", "usesloop"):
        r = run_in(data_root, "validate", name)
        assert r.returncode == 2 and "leads nowhere" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_two_profiles_cannot_answer_to_one_name(data_root: Path) -> None:
    text = (data_root / "profiles" / "cpu-smoke.yaml").read_text()
    (data_root / "profiles" / "copy.yaml").write_text(f"name: cpu-smoke\n{text}")
    r = run_in(data_root, "validate", "copy")
    assert r.returncode == 2 and "is not the file's name" in r.stderr, r.stderr
    _base(data_root, "named", [], "name: stolen\n")
    (data_root / "profiles" / "inherits.yaml").write_text("extends: [bases/named, cpu-smoke]\n")
    r = run_in(data_root, "validate", "inherits")
    assert r.returncode == 2 and "a base names no profile" in r.stderr, r.stderr
    assert run_in(data_root, "validate", "cpu-smoke").returncode == 0


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\u200d", "\ufeff"])
def test_unicode_format_characters_are_no_printable_text(char: str) -> None:
    code, _, err = cli("validate", "cpu-smoke", "--set", f"description=a{char}b")
    assert code == 2 and "control character" in err and char not in err


@pytest.mark.parametrize("override,needle", [
    ("cache.prefix_caching=1", "valid boolean"), ("cache.prefix_caching='off'", "valid boolean"),
    ("cache.prefix_caching='yes'", "valid boolean"), ("engine.enforce_eager=0", "valid boolean"),
    ("limits.max_model_len=34:08", "ambiguous number"), ("limits.max_model_len=010", "ambiguous number"),
    ("limits.max_model_len='2048'", "valid integer"), ("cache.guard=true", "no guard level"),
    ("limits.kv_cache_memory_gib=1e-300", "greater than or equal to 0.0009765625"),
    ("limits.max_num_seqs=1_000", "ambiguous number"),
])
def test_profile_fields_are_strict(override: str, needle: str) -> None:
    code, _, err = cli("validate", "cpu-smoke", "--set", override)
    assert code == 2 and needle in err, err


def test_numbers_yaml_1_2_and_json_agree_on_are_read_as_before() -> None:
    code, out, err = cli("render", "cpu-smoke", "--format", "json", "--set", "limits.kv_cache_memory_gib=1e-1",
                         "--set", "limits.max_model_len=0x800")
    argv = json.loads(out)["argv"]
    assert code == 0 and argv[argv.index("--kv-cache-memory-bytes") + 1] == str(int(0.1 * 1024**3)), err
    assert argv[argv.index("--max-model-len") + 1] == "2048"


@pytest.mark.parametrize("flag,value", [("--rdma", "not a resource"), ("--rdma", "kubernetes.io/x"),
                                        ("--gpu-product", "NVIDIA GB10"), ("--gpu-product", "x\x1b[2J"),
                                        ("--shm-size", "1e999"), ("--shm-size", "0.5"), ("--shm-size", "9" * 30)])
def test_kubernetes_flag_values_are_checked_before_any_manifest(flag: str, value: str) -> None:
    code, out, err = cli("k8s", "gb10-tp2", f"{flag}={value}")
    assert code == 2 and flag in err and out == "" and "\x1b" not in err, err


def _doctor(procfs: Path) -> tuple[CliRun, float]:
    began = time.monotonic()
    r = run_main(["doctor", "cpu-smoke", "--json"], cwd=ROOT, limit_s=60,
                 env={"APPLIANCE_PROCFS": str(procfs), "APPLIANCE_KMSG": str(procfs / "kmsg")})
    return r, time.monotonic() - began


def test_doctor_reads_a_fifo_meminfo_and_a_5000_digit_memtotal_as_unknown(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    (procfs / "pressure").mkdir(parents=True)
    os.mkfifo(procfs / "meminfo")
    os.mkfifo(procfs / "kmsg")
    r, took = _doctor(procfs)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and took < 30, r.stderr
    (procfs / "meminfo").unlink()
    (procfs / "meminfo").write_text(f"MemTotal: {'9' * 5000} kB\nMemAvailable: {'9' * 5000} kB\n")
    r, _ = _doctor(procfs)
    memory = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "memory")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and "unknown" in json.dumps(memory).lower(), r.stdout


@pytest.mark.parametrize("kind", ["fifo", "deep", "dup-keys", "huge-number"])
def test_a_hostile_versions_json_is_exit_2_for_every_command_never_a_hang(data_root: Path, kind: str) -> None:
    lock = data_root / "versions.json"
    text = lock.read_text()
    lock.unlink()
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "deep":
        lock.write_text("[" * 50_000 + "]" * 50_000)
    elif kind == "dup-keys":
        assert '"schema": 2' in text
        lock.write_text(text.replace("{", '{"schema": 2, ', 1))  # the lock's own first key, given twice
    else:
        lock.write_text(text.replace('"schema": 2', '"schema": 2' + "0" * 400, 1))
        assert "0" * 400 in lock.read_text()
    for command in (["render", "cpu-smoke"], ["validate", "cpu-smoke"], ["versions"]):
        r = run_in(data_root, *command, timeout=30)
        assert r.returncode == 2 and "version lock" in r.stderr and "Traceback" not in r.stderr, (command, r.stderr)


def test_a_launch_file_without_an_argv_is_exit_2_in_exec(tmp_path: Path) -> None:
    from appliance.placement import resolve_placement
    from appliance.profile.loader import load_profile
    from appliance.run.launchfile import ExporterSection, LaunchFile, Program

    path = tmp_path / "launch.json"
    place = resolve_placement(load_profile("cpu-smoke").profile)
    section = ExporterSection(log=tmp_path / "vllm.log", port=8470, host="0.0.0.0", role="single", engine_url=None)
    LaunchFile("p", "d", "s", {}, place, {"vllm": Program([])}, section).write(path)
    code, _, err = cli("exec", "--launch", str(path), "vllm")
    assert code == 2 and "argv must be a non-empty list" in err
    os.unlink(path)
    os.mkfifo(path)
    code, _, err = cli("exec", "--launch", str(path), "vllm", limit_s=10)
    assert code == 2 and "FIFO" in err  # a FIFO as launch.json is refused, not read (a read would hang: Hang)


def test_terminal_escapes_from_a_log_are_shown_escaped(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO vLLM API server version 0.32.0\x1b]0;owned\x07\n"
                   "ERROR EngineDeadError: boom \x1b[2J\x1b[31mred\n")
    code, out, _ = cli("logscan", str(log), "--profile", "cpu-smoke")
    assert code == 1 and "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out


def test_gate_compare_and_serves_show_receipt_names_escaped(tmp_path: Path) -> None:
    from tests.test_gate_compare import receipt

    a = receipt()
    a["provenance"]["profile"]["name"] = "cpu\x1b[2Jsmoke"
    a["checks"][0]["name"] = "bench"
    (tmp_path / "a.json").write_text(json.dumps(a))
    code, out, _ = cli("gate", "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"))
    assert code in (0, 1) and "\x1b" not in out and "\\x1b[2J" in out


@pytest.mark.parametrize("kind", ["fifo", "dup-keys", "deep"])
def test_a_checkpoint_config_that_is_no_json_file_is_refused_without_reading_it_all(tmp_path: Path, kind: str) -> None:
    from appliance.catalogue import CheckpointFacts
    from appliance.run.model_location import read_facts

    config = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dup-keys":
        config.write_text('{"dspark_block_size": 1, "dspark_block_size": 2}')
    else:
        config.write_text("[" * 60_000 + "]" * 60_000)
    fallback = CheckpointFacts.model_construct()
    with time_limit(10), pytest.raises(ApplianceError) as err:
        read_facts(tmp_path, fallback)
    assert err.value.field == "model_dir" and "config.json" in str(err.value)
