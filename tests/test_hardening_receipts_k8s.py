"""Issue 11, classes 5 and 6: receipts are checked against their schema when read back, so `gate compare` never
tracebacks or calls NaN an improvement; Kubernetes names, quantities and image references follow Kubernetes'
rules and are refused before any manifest is printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.cli import main
from tests.test_gate_compare import receipt


def _write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _broken(change: str) -> dict[str, Any]:
    r = receipt()
    if change == "nan-tg":
        r["checks"][0]["metrics"]["rows"][1]["t_s"] = float("nan")
    elif change == "inf-pp":
        r["checks"][0]["metrics"]["rows"][0]["t_s"] = float("inf")
    elif change == "negative-tg":
        r["checks"][0]["metrics"]["rows"][1]["t_s"] = -1.0
    elif change == "found>total":
        r["checks"][1]["metrics"]["found"] = 30
    elif change == "valid>total":
        r["checks"][2]["metrics"]["valid"] = 9
    elif change == "count-as-text":
        r["checks"][1]["metrics"]["found"] = "23"
    elif change == "checks-not-a-list":
        r["checks"] = {"bench": {}}
    elif change == "check-not-a-dict":
        r["checks"][0] = "bench"
    elif change == "rows-not-a-list":
        r["checks"][0]["metrics"]["rows"] = 5
    elif change == "engagement-a-list":
        r["engagement"] = []
    elif change == "expectation-without-rule":
        del r["engagement"]["expectations"][0]["rule"]
    elif change == "min-found-over-one":
        r["checks"][1]["params"]["min_found"] = 2
    elif change == "complete-as-text":
        r["complete"] = "yes"
    elif change == "unknown-verdict":
        r["verdict"] = "great"
    elif change == "check-twice":
        r["checks"].append(r["checks"][0])
    return r


@pytest.mark.parametrize("change", ["nan-tg", "inf-pp", "negative-tg", "found>total", "valid>total", "count-as-text",
                                    "checks-not-a-list", "check-not-a-dict", "rows-not-a-list", "engagement-a-list",
                                    "expectation-without-rule", "min-found-over-one", "complete-as-text",
                                    "unknown-verdict", "check-twice"])
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_malformed_receipt_is_exit_2_naming_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       change: str, side: str) -> None:
    good, bad = _write(tmp_path, "good.json", receipt()), _write(tmp_path, "bad.json", _broken(change))
    code = main(["gate", "compare", *((bad, good) if side == "a" else (good, bad))])
    err = capsys.readouterr().err
    assert code == 2 and "bad.json" in err and "Traceback" not in err
    assert "not a valid receipt" in err or "is no JSON number" in err  # NaN/Infinity: no JSON, named where


@pytest.mark.parametrize("text", ["[" * 100_000, '{"schema": ' + "1" * 5000 + "}", "\udcff", "", "null"])
def test_what_is_not_json_or_not_a_receipt_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     text: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert main(["gate", "compare", _write(tmp_path, "good.json", receipt()), str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_nan_is_never_an_improvement(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a = _write(tmp_path, "a.json", receipt())
    b = _write(tmp_path, "b.json", _broken("nan-tg"))
    assert main(["gate", "compare", a, b, "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "NaN at checks[0].metrics.rows[1].t_s" in err


# --- class 6 -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag,value,needle", [
    ("--name", "Appliance", "RFC 1035 label"),
    ("--name", "9lives", "RFC 1035 label"),
    ("--name", "a" * 60, "at most 59"),
    ("--name", "x_y", "RFC 1035 label"),
    ("--namespace", "Prod", "RFC 1123 label"),
    ("--namespace", "a" * 64, "RFC 1123 label"),
    ("--secret", "my_secret", "DNS subdomain"),
    ("--secret", "a..b", "DNS subdomain"),
    ("--hf-cache-pvc", "PVC", "DNS subdomain"),
    ("--cache-pvc", "x" * 254, "DNS subdomain"),
    ("--shm-size", "16GB", "quantity"),
    ("--shm-size", "0", "quantity"),
    ("--shm-size", "-1Gi", "quantity"),
    ("--image", "appliance:gpu latest", "image reference"),
    ("--image", "Appliance/Engine:1", "image reference"),
    ("--image", "appliance@sha256:abc", "image reference"),
    ("--image", "reg.example:5000/a//b:1", "image reference"),
    ("--fabric-ifname", "eth0/1", "interface name"),
])
def test_a_kubernetes_name_that_kubernetes_would_refuse_is_exit_2_before_any_output(
        capsys: pytest.CaptureFixture[str], flag: str, value: str, needle: str) -> None:
    assert main(["k8s", "cpu-smoke", f"{flag}={value}"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and "Traceback" not in err


def test_a_leaderworkerset_name_leaves_room_for_the_statefulset_revision_label(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["k8s", "cpu-smoke-2node", "--name", "a" * 53]) == 2
    assert "at most 52" in capsys.readouterr().err
    assert main(["k8s", "cpu-smoke-2node", "--name", "a" * 52]) == 0


@pytest.mark.parametrize("image", ["appliance:gpu-0123456789ab", "ghcr.io/org/appliance:v1.2",
                                   "localhost:5000/appliance@sha256:" + "a" * 64, "registry.example/a/b_c/d-e:tag"])
def test_good_image_references_are_accepted(capsys: pytest.CaptureFixture[str], image: str) -> None:
    assert main(["k8s", "cpu-smoke", "--image", image, "--shm-size", "2.5Gi", "--namespace", "serve-1"]) == 0
    assert f"image: {image}" in capsys.readouterr().out
