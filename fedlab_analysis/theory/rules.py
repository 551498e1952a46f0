"""The update rules the theory toys apply themselves, batched over runs and clients, in one place.

The toys run thousands of tiny problems at once ([..., n, d] tensors), so their simulators (``simulate`` in
fedsmoo, fedlesam, fedcm, fedinit; ``feddyn_code``) call these batched copies instead of the trainer. Each copy
mirrors one engine Part (``fedlab_analysis/trainers/parts.py``) and is pinned to it in float64 by
``tests/test_theory_rules.py`` (the toy run through the engine, ``engine_toys.make_run``, against the simulator);
the same test breaks each copy in turn and shows the pin then fails.

=====================  =====================================  =========================================
copy                   engine Part (method)                   paper, rule
=====================  =====================================  =========================================
``sgd_step``           Plain.gradient + the engine's step     x <- x - eta g (every local step)
``sam_ascent``         SAM.ascent                             FedSAM / FedSMOO eq. (5): rho g / ||g||
``smoo_ascent``        SMOO.ascent                            FedSMOO Alg. 1 lines 8-9: corrected ascent
``smoo_server``        SMOO.server_end (--smoo-server paper)  FedSMOO Alg. 1 lines 13, 17
``dyn_direction``      Dyn.direction                          FedSMOO Alg. 1 line 11 (FedDyn, lamb=1/beta)
``lesam_estimate``     LESAM.round_start (client_old)         FedLESAM eq. (3): rho unit(w_i^old - w)
``cm_direction``       Momentum.direction                     FedCM Alg. 2 line 8
``cm_server``          Momentum.server_end                    FedCM Alg. 2 line 13
``scaffold_direction`` Scaffold.direction                     SCAFFOLD option II: g + c - c_i
``scaffold_controls``  Scaffold.client_end + server_end       SCAFFOLD option II control update
``relaxed_start``      RelaxedInit.start                      FedInit Alg. 1 line 6
=====================  =====================================  =========================================

The engine normalises by ||v|| + 1e-7 (as the authors' simulators); these copies normalise exactly, so the SAM
family agrees with the engine to O(1e-7 rho / ||v||), everything else to float64 rounding.
Not copies of an engine Part, so not here: the closed forms a theorem needs (FedSMOO's exact local solve
``local="exact"``, FedALS's one-round ERM, the fixed points of fedcm / fedinit) and FedCM's K = 1 heavy-ball
recursion (an independent reference for the engine). ``fedsmoo.feddyn_code`` writes FedDyn in FL-Simulator's h_i
form, independently of ``dyn_direction``, and is pinned to the engine's Dyn by tests/test_theory_engine.py.
"""
from __future__ import annotations

import torch

from ..linalg import unit                   # the one unit(), shared with the probes


def sgd_step(x: torch.Tensor, eta, d: torch.Tensor) -> torch.Tensor:
    """One local step along the direction d."""
    return x - eta * d


def sam_ascent(g: torch.Tensor, rho) -> torch.Tensor:
    """SAM's perturbation rho g / ||g|| (ascent is taken at x + this, on the same minibatch)."""
    return rho * unit(g)


def smoo_ascent(g: torch.Tensor, mu: torch.Tensor, s: torch.Tensor, r) -> tuple[torch.Tensor, torch.Tensor]:
    """FedSMOO's corrected ascent: s_hat = r unit(g - mu_i - s), mu_i <- mu_i + (s_hat - s).
    g, mu: [..., n, d]; s: [..., d]. Returns (s_hat, the new mu)."""
    s = s.unsqueeze(-2)
    shat = r * unit(g - mu - s)
    return shat, mu + (shat - s)


def smoo_server(mu: torch.Tensor, shat: torch.Tensor, active: torch.Tensor, r, paper: bool = True) -> torch.Tensor:
    """FedSMOO's global perturbation: s = r unit(mean_S (mu_i - s_hat_i)) (paper) or r unit(mean_S mu_i) (code);
    ``active`` [..., n, 1] is 0/1."""
    v = mu - shat if paper else mu
    return r * unit((v * active).sum(-2) / active.sum(-2))


def dyn_direction(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, lam_i: torch.Tensor, beta) -> torch.Tensor:
    """FedDyn in FedSMOO's notation: g + (x - w)/beta - lambda_i (the engine's lamb (h_i + x - w), lamb = 1/beta,
    h_i = -beta lambda_i)."""
    return g + ((x - w) / beta - lam_i)


def lesam_estimate(w_old: torch.Tensor, w: torch.Tensor, rho) -> torch.Tensor:
    """FedLESAM's perturbation estimate rho unit(w_i^old - w), constant within the round."""
    return rho * unit(w_old - w)


def cm_direction(g: torch.Tensor, Delta: torch.Tensor, alpha) -> torch.Tensor:
    """FedCM's local direction alpha g + (1 - alpha) Delta_t."""
    return alpha * g + (1 - alpha) * Delta


def cm_server(mean_dy: torch.Tensor, eta, K: int) -> torch.Tensor:
    """FedCM's Delta_{t+1} = -(mean_S Delta_i) / (K eta), in gradient units."""
    return -mean_dy / (eta * K)


def scaffold_direction(g: torch.Tensor, c_i: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """SCAFFOLD's corrected gradient g - c_i + c (c: [..., d], c_i: [..., n, d])."""
    return g - c_i + c.unsqueeze(-2)


def scaffold_controls(c_i, c, dy, active, K: int, eta, N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SCAFFOLD option II: c_i+ = c_i - c - Delta_i/(K eta) for the active clients; c += (1/N) sum_S (c_i+ - c_i).
    ``active`` [..., n, 1] is 0/1; ``eta`` broadcasts to [..., 1, 1]. Returns (c_i, c)."""
    c_new = c_i - c.unsqueeze(-2) - dy / (K * eta)
    c = c + ((c_new - c_i) * active).sum(-2) / N
    return torch.where(active.bool(), c_new, c_i), c


def relaxed_start(w: torch.Tensor, last: torch.Tensor, beta) -> torch.Tensor:
    """FedInit's relaxed initialisation x_{i,0} = w + beta (w - w_i^last); w [..., d], last [..., n, d]."""
    wc = w.unsqueeze(-2)
    return wc + beta * (wc - last)
