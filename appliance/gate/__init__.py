"""The acceptance gate: checks run against a live serve, a receipt with provenance, and `compare`.

Modules: sizing (per-profile settings), one module per check (bench, recall, reasoning, structured,
gsm8k), provenance + receipt + summary (what is written), runner (order, progress, Ctrl-C), compare.
"""
