"""Free cards for a second engine on a discrete-GPU node (appliance/hostmem/cards.py): what U3 admits side by side,
and what a promote's bridge and a side-by-side candidate are pinned to.

No GPU and no NVML here. The NVML reads themselves run on a real driver in tests/test_gpu_cards_nvml.py (it skips
where NVML does not answer). Here the cards are values; where the mode is chosen, `read_cards` is replaced by
NVML_STAND_IN, a stand-in for NVML on a 4-card RTX PRO 6000 box, because no card can be read on this machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.hostmem.cards import Card, pick_free, visible
from appliance.profile.loader import load_profile

GPU_TOTAL = 95.6
"""An RTX PRO 6000's memory in GiB, as the catalogue has it (budget_base_gib)."""


def box(*busy: int, free: float = 94.9, unknown: tuple[int, ...] = ()) -> tuple[Card, ...]:
    """Four cards; the `busy` ones run a serve's engine (one process, most of the memory taken)."""
    return tuple(Card(i, f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", 12.0 if i in busy else free, GPU_TOTAL,
                      None if i in unknown else (1 if i in busy else 0)) for i in range(4))


def test_the_pick_takes_the_lowest_cards_that_run_nothing_and_have_the_need_free() -> None:
    pick, found = pick_free(box(0, 1), 2, 81.3)
    assert pick is not None and pick.indices == "2,3"
    assert pick.env() == {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert found == "NVML: GPU(s) 2,3 run nothing, 94.9 GiB free"
    # a serve on the middle cards: the bridge takes the outer ones
    assert pick_free(box(1, 2), 2, 81.3)[0].indices == "0,3"  # type: ignore[union-attr]
    # one card is enough for one rank: the lowest free one
    assert pick_free(box(0), 1, 81.3)[0].indices == "1"  # type: ignore[union-attr]


def test_no_pick_where_too_few_cards_are_free_and_every_card_is_named() -> None:
    pick, found = pick_free(box(0, 1, 2), 2, 81.3)
    assert pick is None
    assert found.startswith("NVML: 1 of 4 GPU(s) run nothing and have 81.3 GiB free, and a second engine "
                            "needs 2 of its own (GPU 0: 12.0 of 95.6 GiB free, 1 compute process(es); ")
    assert "GPU 3: 94.9 of 95.6 GiB free, 0 compute process(es))" in found
    # a card whose processes NVML would not list counts as taken, and says so
    pick, found = pick_free(box(0, 1, unknown=(3,)), 2, 81.3)
    assert pick is None and "GPU 3: 94.9 of 95.6 GiB free, compute processes unknown" in found
    # idle cards without the need free (a display holds memory, or a smaller card) are not taken either
    assert pick_free(box(0, 1, free=60.0), 2, 81.3)[0] is None


def test_a_card_whose_memory_is_in_use_is_taken_though_nvml_lists_no_process() -> None:
    """In a container NVML lists only the processes of its own PID namespace: another container's engine shows as
    memory in use alone. A display's desktop (under IDLE_USED_GIB) leaves a card free."""
    other_container = Card(2, "GPU-2", GPU_TOTAL - 20.0, GPU_TOTAL, 0)
    desktop = Card(3, "GPU-3", GPU_TOTAL - 1.5, GPU_TOTAL, 0)
    assert other_container.taken and not desktop.taken
    pick, found = pick_free((*box(0, 1)[:2], other_container, desktop), 1, 20.0)
    assert pick is not None and pick.indices == "3", found
    assert pick_free((*box(0, 1)[:2], other_container, desktop), 2, 20.0)[0] is None


def test_the_visible_cards_follow_cuda_visible_devices() -> None:
    cards = box()
    assert visible(cards, {}) == cards
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": f"{cards[3].uuid},{cards[1].uuid}"})] == [3, 1]
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": "2, 3"})] == [2, 3]  # NVML's indices, as vLLM
    assert visible(cards, {"CUDA_VISIBLE_DEVICES": ""}) == ()  # no card for this process
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": "1,1,2"})] == [1, 2]  # named twice, once
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": "3,-1,0"})] == [3]  # -1 hides what follows
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": "02"})] == [2]
    assert [c.index for c in visible(cards, {"CUDA_VISIBLE_DEVICES": "GPU-00000001"})] == [1]  # a unique prefix
    for value in ("MIG-1234", "7", "2,GPU-unknown", "GPU-0000000"):  # the last: a prefix of all four
        with pytest.raises(ApplianceError, match="names no single GPU that NVML has") as refused:
            visible(cards, {"CUDA_VISIBLE_DEVICES": value})
        assert refused.value.field == "CUDA_VISIBLE_DEVICES" and "whole cards" in (refused.value.fix or "")


def test_the_doctor_judges_device_memory_on_the_cards_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bridge's own `appliance run` (pinned to free cards) must not be refused for the incumbent's full cards."""
    from appliance.hostmem.admission import nvml_free_gib

    monkeypatch.setattr("appliance.hostmem.cards.read_cards", lambda: (box(0, 1), "NVML, 4 GPU(s)"))  # NVML_STAND_IN
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_free_gib() == (12.0, "NVML free memory, least of 4 GPU(s)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert nvml_free_gib() == (94.9, "NVML free memory, least of 2 GPU(s) named by CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    assert nvml_free_gib() == (12.0, "NVML free memory, least of 4 GPU(s)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml_free_gib() == (None, "NVML: no GPU named by CUDA_VISIBLE_DEVICES")
    # the profile's own pin is what its engine gets (exec_program: the launch's env over the process's)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_free_gib({"CUDA_VISIBLE_DEVICES": "3"}) == (94.9, "NVML free memory, least of 1 GPU(s) named by "
                                                                   "CUDA_VISIBLE_DEVICES")


def nvml_stand_in(monkeypatch: pytest.MonkeyPatch, cards: tuple[Card, ...]) -> None:
    """NVML_STAND_IN: what NVML would report on the box (no GPU here)."""
    monkeypatch.setattr("appliance.upgrade.mode.read_cards", lambda: (cards, f"NVML, {len(cards)} GPU(s)"))


def test_side_by_side_on_discrete_gpus_takes_free_cards_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.upgrade.mode import choose_mode

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    profile = load_profile("rtx-pro-6000-tp2").profile
    nvml_stand_in(monkeypatch, box(0, 1))
    choice = choose_mode(profile, "auto", Path("/proc"))
    assert choice.mode == "side-by-side" and choice.cards is not None and choice.cards.indices == "2,3"
    assert choice.to_json()["cards"] == "2,3" and choice.to_json()["available_gib"] == 94.9
    # before, the least free memory of any card decided: the incumbent's own (12 GiB) refused every 4-card box
    nvml_stand_in(monkeypatch, box(0, 1, 2))
    crowded = choose_mode(profile, "auto", Path("/proc"))
    assert crowded.mode == "window" and crowded.cards is None
    assert "the candidate needs 2 GPU(s) of its own with 81.3 GiB free each" in crowded.why
    with pytest.raises(ApplianceError, match="U3 --mode side-by-side: the host cannot hold"):
        choose_mode(profile, "side-by-side", Path("/proc"))
    # the process may use only two cards, both the incumbent's: nothing is free for a second engine
    nvml_stand_in(monkeypatch, box(0, 1))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    narrowed = choose_mode(profile, "auto", Path("/proc"))
    assert narrowed.mode == "window"
    assert "among the cards CUDA_VISIBLE_DEVICES=0,1 lets this process use" in narrowed.why
    assert narrowed.admission is not None and "widen CUDA_VISIBLE_DEVICES" in (narrowed.admission.fix or "")


def test_a_profile_that_names_its_cards_gets_no_second_engine_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.upgrade.mode import choose_mode

    nvml_stand_in(monkeypatch, box(0, 1))
    pinned = load_profile("rtx-pro-6000-tp2", cli_overrides=["engine.extra_env.CUDA_VISIBLE_DEVICES=0,1"]).profile
    choice = choose_mode(pinned, "auto", Path("/proc"))
    assert choice.mode == "window" and "engine.extra_env.CUDA_VISIBLE_DEVICES=0,1" in choice.why
    assert choice.admission is not None
    assert "the appliance gives a second engine free cards" in (choice.admission.fix or "")


def test_a_mig_instance_leaves_the_candidate_in_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.upgrade.mode import choose_mode

    nvml_stand_in(monkeypatch, box(0, 1))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    choice = choose_mode(load_profile("rtx-pro-6000-tp2").profile, "auto", Path("/proc"))
    assert choice.mode == "window" and "entry 'MIG-1234' names no single GPU that NVML has" in choice.why
