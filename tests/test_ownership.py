"""One owner per concern (docs/ownership.md): each row of the table is held here by a scan of appliance/'s source,
so a second reader of the lock, a second default of the channel or a second read of server.port fails a test."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "appliance"
TREE = {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))}
_NODES = {id(tree): list(ast.walk(tree)) for tree in TREE.values()}


def _walk(tree: ast.AST) -> list[ast.AST]:
    """Every node of a module's tree (walked once: each row scans the whole package several times)."""
    return _NODES[id(tree)]


def _who(found: object) -> list[str]:
    """The modules for which `found(tree)` is true."""
    return sorted(name for name, tree in TREE.items() if found(tree))  # type: ignore[operator]


def _names_from(tree: ast.AST, module: str, names: set[str]) -> bool:
    """`from MODULE import NAME` (one of `names`), or `MODULE_TAIL.NAME` after `from appliance import MODULE_TAIL`."""
    tail = module.rsplit(".", 1)[-1]
    for node in _walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module and {a.name for a in node.names} & names:
            return True
        if (isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
                and node.value.id == tail):
            return True
    return False


def _mentions(tree: ast.AST, words: set[str]) -> bool:
    """An attribute, a keyword or a string constant that is one of `words`."""
    for node in _walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in words:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words:
            return True
    return False


def test_the_lock_is_found_and_read_by_its_owner_alone() -> None:
    """lockfile finds and reads versions.json (stdlib: the image build runs it); appliance.lock types what it read;
    paths.versions_path asks the finder. Everyone else asks lock (load_lock, lock_document, image_tag), except the
    lock's own command line for the image build."""
    assert _who(lambda t: _names_from(t, "appliance.lockfile", {"load"})) == ["container/lockcli.py", "lock.py"]
    assert _who(lambda t: _names_from(t, "appliance.lockfile", {"find_versions"})) == [
        "container/lockcli.py", "paths.py"]
    reads_text = _who(lambda t: any(
        isinstance(n, ast.Attribute) and n.attr in ("read_text", "read_bytes") and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name | ast.Attribute)
        and getattr(n.value.func, "id", getattr(n.value.func, "attr", "")) == "versions_path"
        for n in _walk(t)))
    assert reads_text == []


def test_the_default_channel_is_one_rule_and_one_filler() -> None:
    """Which key names a target's default is lockfile.default_key (the typed Lock declares the two fields); a
    profile that names no channel gets it from profile.loader.default_channel alone."""
    keys = {"default_channel", "default_cpu_channel"}
    assert _who(lambda t: _mentions(t, keys)) == ["lock.py", "lockfile.py"]
    fills = _who(lambda t: _names_from(t, "appliance.profile.loader", {"default_channel"}))
    assert fills == ["channels/capabilities.py"]


def _reads_server_port(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "port" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "server" for n in _walk(tree))


def _calls(tree: ast.AST, name: str) -> int:
    return sum(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
               for n in _walk(tree))


def test_the_api_port_is_read_from_the_profile_in_one_place() -> None:
    """placement.api_port_of reads server.port; the argv, the exporter, the doctor, the manifests and the upgrade's
    probe read it from there (a resolved placement's api_port, or api_port_of where none is held)."""
    assert _who(_reads_server_port) == ["placement.py"]


def test_a_placement_is_resolved_by_the_resolved_serve_alone() -> None:
    """resolve_placement's one caller outside its owner is appliance/serve/resolve.py: every program that stands
    somewhere (render, the launch, the exporter, the rendezvous, the gate's target, sync-model's port) takes its
    placement from there; a render of every rank on no node asks the owner's rank_placements. A new caller is a new
    owner, so it fails here until it takes a resolved placement instead."""
    calls = {name: _calls(tree, "resolve_placement") for name, tree in TREE.items()}
    assert {name: n for name, n in calls.items() if n and name != "placement.py"} == {"serve/resolve.py": 1}


def test_a_serve_is_resolved_by_serve_resolve_and_read_back_from_launch_json_alone() -> None:
    """A ResolvedServe is made by resolve() (appliance/serve/resolve.py) and by launch.json read back
    (run/launch_profile.py), nowhere else; a rank's network identity is resolved there alone; a plan is built there,
    or by a render of every rank on no node (the rules' E2-E4, the manifests, `upgrade plan`, `appliance profiles`),
    each from the placement owner's rank_placements. A module that builds a piece of a serve again fails here."""
    assert _who(lambda t: _calls(t, "ResolvedServe") > 0) == ["run/launch_profile.py", "serve/resolve.py"]
    assert _who(lambda t: _calls(t, "with_identity") > 0) == ["serve/resolve.py"]
    nowhere = ["channel_report.py", "commands/profiles.py", "render/k8s.py", "rules/channel.py", "upgrade/plan.py"]
    assert _who(lambda t: _calls(t, "build_plan") > 0) == sorted([*nowhere, "serve/resolve.py"])
    assert _who(lambda t: _calls(t, "rank_placements") > 0) == sorted([*nowhere, "render/plan.py"])


def test_no_module_reads_server_port_from_a_profile_dumped_as_json() -> None:
    """`["server"]["port"]` of a stored profile is server.port read again: launch.json's placement holds api_port."""
    def subscripts_server_port(tree: ast.AST) -> bool:
        nodes = _NODES.get(id(tree)) or list(ast.walk(tree))
        return any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "port"
                   and isinstance(n.value, ast.Subscript) and isinstance(n.value.slice, ast.Constant)
                   and n.value.slice.value == "server" for n in nodes)

    assert _who(subscripts_server_port) == []
    assert subscripts_server_port(ast.parse("launch.profile['server']['port']"))  # the scan sees one


def test_the_profile_is_loaded_by_the_loader_and_a_running_serve_reads_launch_json() -> None:
    """`appliance exec`, the exporter's launch.json path, the crash guard, the health readers, the canary's watch and
    its ladder never load the YAML: each reads the profile `appliance run` stored in launch.json (a rung goes on top
    of it, appliance/canary/ladder.py)."""
    loads = _who(lambda t: _names_from(t, "appliance.profile.loader", {"load_profile"}))
    assert "cliargs.py" in loads  # the scan sees the loader's callers at all
    serve_programs = [m for m in loads if m.startswith(("run/", "health/", "canary/", "commands/exec"))]
    assert serve_programs == []
    defined = _who(lambda t: any(isinstance(n, ast.FunctionDef) and n.name == "load_profile" for n in _walk(t)))
    assert defined == ["profile/loader.py"]


def test_an_engines_facts_are_read_by_channels_facts_alone() -> None:
    paths = _who(lambda t: _calls(t, "facts_path") + _calls(t, "facts_dir") > 0)
    assert paths == ["channels/facts.py"]
    loaders = _who(lambda t: any(isinstance(n, ast.FunctionDef) and n.name == "load_facts" for n in _walk(t)))
    assert loaders == ["channels/facts.py"]


def test_receipts_have_one_writer_and_one_typed_reader() -> None:
    """gate.receipt.write and gate.receipt.load; validate_receipt is called by that reader alone (the upgrade's
    verdict takes a Receipt), and only receipt_model validates a Receipt."""
    validators = _who(lambda t: _calls(t, "validate_receipt") > 0)
    assert "gate/receipt.py" in validators and set(validators) <= {"gate/receipt.py", "upgrade/verdict.py"}
    assert validators == ["gate/receipt.py"]
    assert _who(lambda t: any(isinstance(n, ast.Attribute) and n.attr == "model_validate"
                              and getattr(n.value, "id", None) == "Receipt" for n in _walk(t))) == [
        "gate/receipt_model.py"]
    assert _who(lambda t: _names_from(t, "appliance.gate.receipt", {"write", "finalize"})) == ["gate/runner.py"]
