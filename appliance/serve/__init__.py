"""One serve, resolved once (resolve.py) into one typed, frozen object (resolved.py), which launch.json serializes
(sections.py: what the programs of a running serve read back, in the standard library alone)."""
