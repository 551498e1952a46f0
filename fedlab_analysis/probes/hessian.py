"""``probe hessian``: the extreme eigenvalues of the Hessian of the mean training loss (maths: curvature.py,
lanczos.py, hvp.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .curvature import Curvature, plot, run  # noqa: F401  (plot: this probe's figure)
from .options import opt

HELP = "extreme Hessian eigenvalues (Lanczos), per layer too"
DESCRIBE = ("The largest (--which LA), most negative (SA) or largest-magnitude (LM) eigenvalues of the Hessian of "
            "the mean training loss at the checkpoint, by Lanczos with full re-orthogonalisation, each with its "
            "residual bound; the normalised top eigenvalue lambda_max(T H T), T = diag(|w| + eta), sits beside "
            "the raw one (Kwon et al. 2021, ASAM): at --eta 0 a rescaling of the weights that keeps the function "
            "(a ReLU layer pair W1 * c, W2 / c) leaves it unchanged, at the default eta = 0.01 only "
            "approximately; every parameter is normalised, biases too (ASAM's released code leaves biases at "
            "T = 1). Eigenvalues within round-off of zero (relative to lambda_max and the dtype) are reported as "
            "zero. Serves FedSMOO (Sun et al. 2023) Table 2 and FedLESAM (Fan et al. 2024) Fig. 2.")
COST = ("cost: Lanczos uses ~20-100 HVPs for the top eigenvalue (at most --max-iter, default max(100, "
        "10 * top-k)); the power method up to 1000 per eigenvalue. --per-layer: that for every layer, plus "
        "--products HVPs per layer for its trace. The JSON gives seconds_per_product.")


@dataclass
class Options(Curvature):
    top_k: int = opt(1, "number of eigenvalues", lo=1)
    which: str = opt("LA", "LA: largest, SA: most negative, LM: largest magnitude", choices=["LA", "SA", "LM"])
    method: str = opt("lanczos", "eigenvalue solver: lanczos (full re-orthogonalisation), power (deflated "
                      "power iteration, PyHessian's method, one eigenvalue at a time) or eigsh (scipy's "
                      "implicitly restarted Lanczos, ARPACK)", choices=["lanczos", "power", "eigsh"])
    tol: float = opt(1e-3, "relative residual at which an eigenvalue is accepted")
    max_iter: int | None = opt(None, "Lanczos steps (default max(100, 10 top-k)), power steps per eigenvalue (1000) "
                               "or eigsh restarts", lo=1)
    products: int | None = opt(None, "with --per-layer: trace products per layer (default: 60)", lo=1)
    normalised: str | None = opt(None, "also the normalised top eigenvalue lambda_max(T H T), T = diag(|w| + "
                                 "eta) (ASAM, Kwon et al. 2021), scale-invariant at --eta 0; default on for --which "
                                 "LA on the whole model (one more Lanczos run)", choices=["on", "off"])
    eta: float | None = opt(None, "eta of --normalised (default: 0.01, ASAM's; 0: exactly invariant to rescalings "
                            "that keep the function, 0.01 only approximately)", lo=0)


def compute(bundle, opts: Options) -> dict:
    """The ``top_k`` eigenvalues of H at ``which`` end, each with its residual bound, and the normalised top one.

    Args:
        bundle: the rebuilt checkpoint (``common.rebuild``): H is the Hessian of its mean loss over ``bundle.X``.
        opts: the options above (``--per-layer``: one result per layer's diagonal block).
    Returns:
        ``top_eigenvalues``' dict (eigenvalues, residuals, zero_tol, n_products, ...) with ``summary``, or
        ``{layers: {label: ...}}`` per layer.

    The eigenvalue solver against the exact answer (a diagonal operator):

    >>> import torch
    >>> from fedlab_analysis.probes.curvature import MatrixOperator, top_eigenvalues
    >>> H = torch.diag(torch.tensor([5.0, -2.0, 1.0, 0.5], dtype=torch.float64))
    >>> [round(v, 8) for v in top_eigenvalues(MatrixOperator(H), k=2, tol=1e-10)["eigenvalues"]]
    [5.0, 1.0]
    """
    return run("hessian", opts, bundle)
