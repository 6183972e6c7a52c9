"""Beyond one machine: this rank's identity, the cross-node rendezvous before any engine starts
(K15: NCCL hangs instead of failing when nodes differ), and the post-launch cross-rank checks.

Nothing is imported here on purpose: `liveness` is used by the cheap probe and must not pay for
pydantic (which `identity` and `rendezvous` pull in through the lock and profile model).
"""
