"""``probe trace``: the trace of the Hessian of the mean training loss, Hutchinson or Hutch++ (maths:
lanczos.trace, hvp.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .curvature import Curvature, plot, run  # noqa: F401  (plot: this probe's figure)
from .options import opt

HELP = "Hessian trace (Hutchinson/Hutch++) +- std. error"
DESCRIBE = ("The trace of the Hessian of the mean training loss, by Hutchinson's estimator or Hutch++ (Meyer et al. "
            "2021), optionally after deflating the top eigenvectors; printed as mean +- standard error with the "
            "number of random probes. Serves FedSMOO Table 2's trace column.")
COST = "cost: --products HVPs (default 100), plus the Lanczos of --deflate K (~20-100 HVPs)."


@dataclass
class Options(Curvature):
    products: int = opt(100, "Hessian-vector products in all", lo=1)
    method: str = opt("hutch++", "estimator: hutchinson (the mean of v'Hv over Rademacher vectors v) or hutch++ "
                      "(Meyer et al. 2021: two thirds of the products build a sketch of the top eigenspace, traced "
                      "exactly; the last third probes the rest; lower variance)",
                      choices=["hutchinson", "hutch++"])
    deflate: int = opt(0, "deflate a Krylov space holding the top-K eigenvectors first", metavar="K")
    tol: float | None = opt(None, "relative tolerance of the --deflate Lanczos (default 1e-3; PyHessian's trace "
                            "tolerance with --backend pyhessian)")


def compute(bundle, opts: Options) -> dict:
    """tr(H) from ``products`` Hessian-vector products, with its standard error over the random probes.

    Args:
        bundle: the rebuilt checkpoint (``common.rebuild``): H is the Hessian of its mean loss over ``bundle.X``.
        opts: the options above (``--per-layer``: the trace of each layer's diagonal block).
    Returns:
        ``lanczos.trace``'s dict (trace, stderr, n_probes, probe_values, ...) with ``summary``, or per layer.

    The estimator against the exact answer (Hutch++ with as many products as dimensions is exact):

    >>> import torch
    >>> from fedlab_analysis.probes.curvature import MatrixOperator, trace
    >>> A = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> H = A @ A.T
    >>> abs(trace(MatrixOperator(H), 6, method="hutch++")["trace"] - float(H.trace())) < 1e-9
    True
    """
    return run("trace", opts, bundle)
