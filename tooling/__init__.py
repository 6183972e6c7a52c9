"""Build-time tooling that must not ship in the appliance wheel (BOARD): the engine-facts extractor, the channel and
GPU-stack rehearsals, the generators of compose.yaml and docker-bake.hcl.

Importable from the repository root as `tooling.*` (`python -m tooling.generate --check`); its tests are in
tooling/tests/. It may import the runtime package `appliance`, which never imports it (tests/test_import_layers.py).
"""
