"""Beyond one machine: this rank's identity, the cross-node rendezvous before any engine starts
(K15: NCCL hangs instead of failing when nodes differ), and the post-launch cross-rank checks.

Nothing is imported here on purpose: `liveness` is stdlib only, so a probe could use it without paying
for pydantic. Today a worker's readiness follows its head through the exporter (it asks the head's API,
K22); `liveness` is the TCP-level check and the cross-rank NCCL comparison, tested but not yet wired.
"""
