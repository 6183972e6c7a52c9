"""The correctness canary: the serve keeps proving that the text it returns is right.

golden probes (healthchecks/canary.yaml) -> checks (one round, findings by signature)
  -> calibration (per-model expectations recorded on a known-good serve)
  -> watch (rounds on the profile's schedule while serving, yielding to traffic; state file)
  -> ladder (confirmed corruption: the next safer rung, validated, the engine restarted with it)
The exporter reads the watch's state file (appliance/health/canary_state.py); nothing here imports vLLM.
"""
