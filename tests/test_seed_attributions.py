"""Every "the seed" attribution in shipped text is held to the seed's own words (issue 21 item 5).

docs/seed-attributions.yaml lists each such line with the quotes it rests on (or the patterns the seed must not
contain, for a claim that it does not say something, or `about` for a line that only names the seed as a
document). The seed itself lives outside the repository (shared/seeds/, beside the clone here and in CI); the
test finds it or fails saying where it looked: a missing seed is a failure, never a skip.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
LEDGER = ROOT / "docs" / "seed-attributions.yaml"
ATTRIBUTION = re.compile(r"(?i)\bthe seed\b|\bseed's\b|(?<![\w.])seed:\s(?!int\b)"
                         r"|\bseed (?:acceptance|update|nvfp4|figures?|section|bands?|lines?)\b")
"""How shipped text attributes to the seed: "the seed", "seed's", "Seed: ..." and "seed Update/NVFP4/..."; a random
seed (`seed: int`, `seed=`, "fixed seed") is none of these."""
SHIPPED = re.compile(r"^(appliance/|profiles/|healthchecks/|README\.md$|versions\.json$"
                     r"|docs/(?!rules\.md$|evidence/|seed-attributions\.yaml$)"
                     r"|Dockerfile$|compose\.yaml$|docker-bake\.hcl$|scripts/)")
"""Shipped text: the package, profiles, health tables, the lock, the docs (docs/rules.md is generated from the
package; docs/evidence/ is recorded output; the ledger is the ledger) and the build files."""


def flat(text: str) -> str:
    """Whitespace removed: the seed is a page scrape whose formatting ran words together ("=0returns you")."""
    return "".join(text.split())


def find_seed(name: str) -> Path:
    env = os.environ.get("APPLIANCE_SEED_FILE")
    candidates = [Path(env)] if env else []
    candidates += [parent / "shared" / "seeds" / name for parent in (ROOT, *ROOT.parents)]
    for path in candidates:
        if path.is_file():
            return path
    pytest.fail(f"the seed {name} was not found: looked in {', '.join(str(c) for c in candidates)}; set "
                f"APPLIANCE_SEED_FILE to it (the attributions cannot be checked without it)")


def attribution_lines(root: Path, files: list[str]) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for rel in files:
        if not SHIPPED.match(rel):
            continue
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        hits = [(n, line) for n, line in enumerate(text.splitlines(), 1) if ATTRIBUTION.search(line)]
        if hits:
            out[rel] = hits
    return out


def unbacked(root: Path, files: list[str], ledger: dict) -> list[str]:
    """Every problem: an attribution line no entry covers, an entry whose line is gone, an entry backed by
    nothing, a quote or pattern id that does not exist."""
    problems = []
    lines = attribution_lines(root, files)
    entries = ledger.get("attributions") or {}
    for rel, hits in lines.items():
        says = [e["says"] for e in entries.get(rel, [])]
        for number, line in hits:
            if not any(s in line for s in says):
                problems.append(f"{rel}:{number} attributes to the seed and is not in {LEDGER.name}: {line.strip()}")
    for rel, listed in entries.items():
        texts = [line for _, line in lines.get(rel, [])]
        for e in listed:
            if not any(e["says"] in line for line in texts):
                problems.append(f"{rel}: the entry {e['says']!r} matches no attribution line (stale)")
            if not (e.get("quotes") or e.get("absent") or e.get("about")):
                problems.append(f"{rel}: the entry {e['says']!r} names no quote, absent pattern or `about`")
            for q in e.get("quotes") or []:
                if q not in ledger["quotes"]:
                    problems.append(f"{rel}: the entry {e['says']!r} names the unknown quote {q!r}")
            for a in e.get("absent") or []:
                if a not in ledger["absent"]:
                    problems.append(f"{rel}: the entry {e['says']!r} names the unknown absent pattern {a!r}")
    return problems


LEDGER_DATA = yaml.safe_load(LEDGER.read_text(encoding="utf-8"))


def tracked() -> list[str]:
    import subprocess

    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def test_the_seed_is_found_and_is_the_one_the_quotes_were_taken_from():
    seed = find_seed(LEDGER_DATA["seed"]["file"])
    assert hashlib.sha256(seed.read_bytes()).hexdigest() == LEDGER_DATA["seed"]["sha256"], seed


def test_every_quote_is_in_the_seed_and_every_absent_pattern_is_not():
    text = flat(find_seed(LEDGER_DATA["seed"]["file"]).read_text(encoding="utf-8"))
    missing = [k for k, q in LEDGER_DATA["quotes"].items() if flat(q) not in text]
    assert missing == [], f"quotes the seed does not hold: {missing}"
    present = [k for k, pattern in LEDGER_DATA["absent"].items() if re.search(pattern, text)]
    assert present == [], f"patterns claimed absent but in the seed: {present}"


def test_every_attribution_in_shipped_text_is_backed_by_the_ledger():
    assert unbacked(ROOT, tracked(), LEDGER_DATA) == []


def test_every_quote_and_pattern_of_the_ledger_is_used():
    used = {q for entries in LEDGER_DATA["attributions"].values() for e in entries
            for q in [*(e.get("quotes") or []), *(e.get("absent") or [])]}
    assert sorted((set(LEDGER_DATA["quotes"]) | set(LEDGER_DATA["absent"])) - used) == []


def test_a_new_unquoted_attribution_or_a_stale_entry_is_caught(tmp_path: Path):
    # The mutants this test guards against: shipped text that claims the seed without a quote, and a ledger entry
    # whose line was edited away.
    (tmp_path / "appliance").mkdir()
    (tmp_path / "appliance" / "x.py").write_text('"""The seed measured 30 tok/s here."""\nseed: int = 12\n')
    ledger = {"quotes": {"q": "x"}, "absent": {}, "attributions": {}}
    assert unbacked(tmp_path, ["appliance/x.py"], ledger) == [
        'appliance/x.py:1 attributes to the seed and is not in seed-attributions.yaml: '
        '"""The seed measured 30 tok/s here."""']
    ledger["attributions"] = {"appliance/x.py": [{"says": "The seed measured 30", "quotes": ["q"]},
                                                 {"says": "the seed said 40", "quotes": ["q"]}]}
    assert unbacked(tmp_path, ["appliance/x.py"], ledger) == [
        "appliance/x.py: the entry 'the seed said 40' matches no attribution line (stale)"]


def test_a_random_seed_is_not_an_attribution():
    for line in ("seed: int = 12", "body['seed'] = seed", "Every probe is greedy (temperature 0, fixed seed).",
                 "rng = random.Random(seed)", '"seed": 12'):
        assert not ATTRIBUTION.search(line), line
    for line in ("the seed measured", "Seed: \"10 blocks\"", "the seed's design", "seed Update 2026-08-04"):
        assert ATTRIBUTION.search(line), line


VERDICTS = ("supports", "partial", "does not")
"""A review's verdict on whether the entry's quotes support the claim; only `supports` passes (a claim larger than
its quote is fixed in the shipped text, not recorded as partial)."""


def review_problems(ledger: dict) -> list[str]:
    """An entry without a review; a malformed one: a verdict not one of VERDICTS, a claim or why missing or not one
    line; an entry whose verdict is not `supports` (a claim larger than its quote must be fixed, not recorded)."""
    problems = []
    for rel, listed in (ledger.get("attributions") or {}).items():
        for e in listed:
            r = e.get("review")
            if r is None:
                problems.append(f"{rel}: {e['says']!r}: no review: name the claim the line makes, the verdict on "
                                "whether its quotes support it, and why (one line each)")
                continue
            if not isinstance(r, dict) or r.get("verdict") not in VERDICTS:
                problems.append(f"{rel}: {e['says']!r}: review.verdict must be one of {', '.join(VERDICTS)}")
                continue
            for key in ("claim", "why"):
                if not isinstance(r.get(key), str) or not r[key].strip() or "\n" in r[key]:
                    problems.append(f"{rel}: {e['says']!r}: review.{key} must be one non-empty line")
            if r["verdict"] != "supports":
                problems.append(f"{rel}: {e['says']!r}: the verdict is {r['verdict']!r}, not supports: {r.get('why')} "
                                "(reword the shipped text to say no more than its quote)")
    return problems


def test_every_review_is_well_formed_and_supports_its_claim():
    assert review_problems(LEDGER_DATA) == []


def test_the_reviews_cover_the_whole_ledger():
    # review_problems counts a missing review; this holds that the ledger it reads is the whole one, not a stub.
    entries = [e for listed in LEDGER_DATA["attributions"].values() for e in listed]
    assert len(entries) > 200 and all(e["review"]["verdict"] == "supports" for e in entries)


def test_a_bad_review_is_caught():
    says = {"says": "x", "quotes": ["q"]}
    ledger = {"attributions": {"a.md": [says,
                                        {**says, "review": {"verdict": "yes", "claim": "c", "why": "w"}},
                                        {**says, "review": {"verdict": "supports", "claim": "", "why": "w"}},
                                        {**says, "review": {"verdict": "partial", "claim": "c", "why": "too big"}},
                                        {**says, "review": {"verdict": "does not", "claim": "c", "why": "wrong"}},
                                        {**says, "review": {"supports": True, "claim": "c", "why": "w"}},
                                        {**says, "review": {"verdict": "supports", "claim": "c", "why": "w"}}]}}
    assert review_problems(ledger) == [
        "a.md: 'x': no review: name the claim the line makes, the verdict on whether its quotes support it, and why "
        "(one line each)",
        "a.md: 'x': review.verdict must be one of supports, partial, does not",
        "a.md: 'x': review.claim must be one non-empty line",
        "a.md: 'x': the verdict is 'partial', not supports: too big (reword the shipped text to say no more than "
        "its quote)",
        "a.md: 'x': the verdict is 'does not', not supports: wrong (reword the shipped text to say no more than its "
        "quote)",
        "a.md: 'x': review.verdict must be one of supports, partial, does not"]
