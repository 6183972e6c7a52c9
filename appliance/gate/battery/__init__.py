"""`appliance gate --battery seed`: the final acceptance battery of jasl/vllm-ds4-sm120-harness (the harness the
seed's authors ran), run against serves."""
