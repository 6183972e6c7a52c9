"""The offline bundle: what a serve needs without a network (checkpoint, image, wheelhouse, compile caches, lock),
made on a connected machine and applied on one without (create, verify, apply, estimate)."""
