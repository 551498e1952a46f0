"""One rule for ``--device`` and ``--threads`` on every entry point (train, probe, sweep).

``--device auto`` picks CUDA when this torch sees a CUDA device, else the CPU. Asking for CUDA where there is
none is one ``UserError`` line (exit 2 at the command line), never a traceback. Checkpoints stay device-free:
they are loaded on the CPU and moved after.
"""
from __future__ import annotations

import torch

from .errors import UserError

CHOICES = "auto, cpu, cuda or cuda:N"


def resolve(spec: str | torch.device | None = "auto", flag: str = "--device") -> torch.device:
    """``auto | cpu | cuda | cuda:N`` -> a torch.device that exists on this machine."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    s = "auto" if spec is None else str(spec).strip().lower()
    if s == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if s == "cpu":
        return torch.device("cpu")
    if s == "cuda" or s.startswith("cuda:"):
        idx = s[5:]
        if s != "cuda" and not idx.isdigit():
            raise UserError(f"{flag}: {spec!r} is not a device; use {CHOICES}")
        if not torch.cuda.is_available():
            raise UserError(f"{flag}: {spec!r} asks for CUDA, but this torch ({torch.__version__}) sees no CUDA "
                            f"device; use --device cpu, or install a CUDA build of torch")
        if idx and int(idx) >= torch.cuda.device_count():
            raise UserError(f"{flag}: {spec!r} does not exist; this machine has {torch.cuda.device_count()} "
                            f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return torch.device(s)
    raise UserError(f"{flag}: {spec!r} is not a device; use {CHOICES}")


def set_threads(n: int, flag: str = "--threads") -> None:
    """torch's CPU thread count for this process (1 is fastest for the small models of CPU demos)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"{flag}: must be a whole number >= 1 (got {n!r})")
    torch.set_num_threads(n)
