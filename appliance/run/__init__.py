"""The run path: model location, keyed caches, supervisord config, and the `appliance run` sequence."""
