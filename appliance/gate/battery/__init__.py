"""`appliance gate --battery seed`: the seed harness's final acceptance battery, run against serves."""
