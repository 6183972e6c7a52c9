"""Host memory safety: reading the host (procfs, kernel log), admission from the profile's need (K23) and
the runtime watchdog that stops the engine before unified memory runs out (K24)."""
