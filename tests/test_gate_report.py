"""`appliance gate report RECEIPT... --html FILE` on real receipts: three gate runs on a real CPU serve (bench, recall
over 3 runs, structured output, GSM8K on the local task; trimmed of their per-reply details) and a DSpark serve's
receipt whose engagement a head exporter read from the DeepSeek fixture log (the only test double here: no SM12x serve
runs in CI). tests/fixtures/gate/receipts/make_receipts.py writes them.
The page is opened in headless Chromium (Debian's package) for a screenshot, which must show the page drawn.

APPLIANCE_REPORT_SCREENSHOT=FILE keeps the screenshot (docs/evidence/gate-report/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "gate" / "receipts"
RECEIPTS = sorted(FIXTURES.glob("*/receipt.json"))
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1")


def report(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", "gate", "report", *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert [p.parent.name for p in RECEIPTS] == [*(f"cpu-smoke-run{i}" for i in (1, 2, 3)), "gb10-tp2-dspark-fixture"]
    out = tmp_path_factory.mktemp("report") / "report.html"
    done = report(*RECEIPTS, "--html", out, "--title", "CPU serves and a DSpark fixture")
    assert done.returncode == 0, done.stderr
    return out


def test_the_page_draws_every_section_from_the_receipts(page: Path) -> None:
    html = unescape(page.read_text())
    for name in ("cpu-smoke-run1", "cpu-smoke-run2", "cpu-smoke-run3", "gb10-tp2-dspark-fixture"):
        assert name in html
    assert html.count("<svg") >= 4
    assert "recall per serve (needles found per run)" in html and "GSM8K strict match" in html
    assert "draft acceptance per position" in html and "mean length" in html
    assert re.search(r"bench pp\d+", html) and "the seed's noise band" in html
    for fetch in (r"<script", r"<link", r"<img", r"\bsrc=", r"\bhref=", r"url\(", r"@import"):
        assert not re.search(fetch, html, re.I), fetch


def test_headless_chromium_renders_the_page_to_a_screenshot(page: Path, tmp_path: Path, chromium_exe: str) -> None:
    from PIL import Image

    shot = tmp_path / "report.png"
    done = subprocess.run([chromium_exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           "--window-size=1440,2400", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1440, 2400)
    colors = image.getcolors(maxcolors=1 << 20) or []
    # Drawn, not blank: many colours (text, the verdict cells, bars, bands), and the pass green among them.
    assert len(colors) > 500
    assert any(abs(r - 0x2F) < 8 and abs(g - 0x85) < 8 and abs(b - 0x5A) < 8 for _, (r, g, b) in colors)
    if os.environ.get("APPLIANCE_REPORT_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["APPLIANCE_REPORT_SCREENSHOT"])


def test_bad_input_is_exit_2_and_leaves_no_page(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    not_a_receipt = tmp_path / "x.json"
    not_a_receipt.write_text('{"schema": "something else"}')
    for args in ([not_a_receipt, "--html", out], [RECEIPTS[0], "--html", tmp_path / "no" / "such" / "dir.html"],
                 [RECEIPTS[0], "--html", tmp_path], [tmp_path / "missing.json", "--html", out]):
        done = report(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [not_a_receipt]
