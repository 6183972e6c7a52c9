"""Checkpoint weights: pinned revisions, verification on disk, one download shared with every rank.

    pins       the lock's pinned revision of each checkpoint (versions.json `checkpoints`)
    hub        where huggingface_hub keeps its cache (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE)
    snapshot   what is on disk, checked against the hub's own metadata (huggingface_hub's cache API)
    stamps     which files were hashed already, so a start does not re-read 160 GB
    fetch      download, verify, re-fetch what is damaged
    rsync      the transfer tool (rsync) and what it reports
    sync       a verified snapshot to other ranks: `appliance sync-model` and the multi-node launch step
"""
