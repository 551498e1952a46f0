"""The trainer half of the package: the round engine (engine.py), the algorithm specs (algorithms.py,
parts.py) and the run loop with metrics and checkpoints (loop.py)."""
from .algorithms import ALGORITHMS, Algorithm  # noqa: F401
