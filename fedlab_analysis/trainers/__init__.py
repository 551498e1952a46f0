"""The trainer half of the package: the round engine (engine.py) with client sampling and minibatches
(sampling.py), the algorithm specs (algorithms.py, parts.py) with each part's own state (state.py), the read-only
views hooks and callbacks get (views.py), and the run loop with metrics and checkpoints (loop.py)."""
from .algorithms import ALGORITHMS, Algorithm  # noqa: F401
