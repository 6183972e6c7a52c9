"""Beyond one machine: this rank's identity and the cross-node rendezvous before any engine starts
(K15: NCCL hangs instead of failing when nodes differ).

After launch, the head's exporter compares the NCCL each rank loaded (`appliance.health.peers`), and a
worker's readiness follows its head through the exporter, which asks the head's API (K22).
"""
