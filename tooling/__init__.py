"""Build-time tooling that must not ship in the appliance wheel (BOARD: the engine-facts extractor, the rehearsals).

Importable from the repository root as `tooling.*`; its tests are in tooling/tests/."""
