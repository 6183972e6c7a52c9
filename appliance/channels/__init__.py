"""Engine channels: each a complete lock of one engine line (versions.json) known by facts read from the engine
itself (channels/facts/), with the capabilities the rules consult instead of assuming the fork."""
