"""`appliance gate --battery seed`: the final acceptance battery of jasl/vllm-ds4-sm120-harness, run against serves.
The seed names no harness repository (it says "the harness turns it on at serve time" and "harness artifacts"); the
link is the harness's own word: its acceptance script expects the seed's published head (EXPECT=d44e224ab9)."""
