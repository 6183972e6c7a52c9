"""Build-time tooling that does not ship in the wheel: the GPU-stack rehearsal and the generators of compose.yaml and
docker-bake.hcl. Run from the repository root (`python -m tooling.generate --check`); it may import the runtime
package `appliance`, which never imports it (tests/test_import_layers.py)."""
