"""Health: read the serve back (KNOWLEDGE.md K12, K17, K18).

table (healthchecks/logchecks.yaml) -> facts (prefilter, extractor, tailer) -> expect (profile
expectations, verdict) -> state (starting/loading/ready/degraded/failed) -> monitor, server, metrics
(the exporter's /live /ready /startup /status /metrics). `appliance logscan` uses scan + expect.
"""
