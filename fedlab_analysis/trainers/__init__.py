"""The trainer half of the package: the round engine (engine.py) with client sampling and minibatches
(sampling.py), the algorithm at run time (algorithms.py: the hooks of the parts, parts.py, that its row of
fedlab_analysis/algos.py builds) with each part's own state (state.py), the read-only views hooks and callbacks
get (views.py), and the run loop with metrics and checkpoints (loop.py)."""
from .algorithms import ALGORITHMS, Algorithm, build  # noqa: F401
