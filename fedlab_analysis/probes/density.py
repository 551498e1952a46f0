"""``probe density``: the Hessian's spectral density by stochastic Lanczos quadrature (maths: lanczos.density)."""
from __future__ import annotations

from dataclasses import dataclass

from .curvature import Curvature, plot, run  # noqa: F401  (plot: this probe's figure)
from .options import opt

HELP = "Hessian spectral density (stochastic Lanczos)"
DESCRIBE = ("The Hessian's spectral density by stochastic Lanczos quadrature (Ghorbani et al. 2019), smoothed "
            "with Gaussians; its trace estimate is printed with its standard error over the start vectors. "
            "Serves the spectrum plots of FedSMOO and FedLESAM.")
COST = "cost: --steps x --vectors HVPs (default 80 x 4 = 320)."


@dataclass
class Options(Curvature):
    steps: int = opt(80, "Lanczos steps per vector", lo=1)
    vectors: int = opt(4, "number of SLQ start vectors", lo=1)
    sigma: float | None = opt(None, "Gaussian width (default: 1%% of the node range)")


def compute(bundle, opts: Options) -> dict:
    """The smoothed spectral density of H on a grid, from ``vectors`` Lanczos runs of ``steps`` steps.

    Args:
        bundle: the rebuilt checkpoint (``common.rebuild``): H is the Hessian of its mean loss over ``bundle.X``.
        opts: the options above (``--per-layer``: one density per layer's diagonal block).
    Returns:
        ``lanczos.density``'s dict (grid, density, sigma, nodes, weights, trace, trace_stderr, moments, ...) with
        ``summary``, or per layer.

    The SLQ trace against the exact answer (a diagonal H: every Rademacher start vector gives v'Hv = tr H):

    >>> import torch
    >>> from fedlab_analysis.probes.curvature import MatrixOperator, density
    >>> H = torch.diag(torch.tensor([3.0, 1.0, -2.0, 0.5], dtype=torch.float64))
    >>> r = density(MatrixOperator(H), n_steps=4, n_vectors=3)
    >>> round(r["trace"], 9), r["trace_stderr"]
    (2.5, 0.0)
    """
    return run("density", opts, bundle)
