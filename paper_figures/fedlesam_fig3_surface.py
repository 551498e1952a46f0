"""FedLESAM Fig. 3: loss surfaces of FedAvg, FedSAM, FedGAMMA, FedSMOO and FedLESAM-D.

Paper: Fan et al., "Locally Estimated Global Perturbations are Better than Local Perturbations for Federated
Sharpness-aware Minimization" (ICML 2024), Sec. 6.2, Fig. 3 (CIFAR-10, Dirichlet 0.1, 10% of 100 clients):
FedSAM and FedGAMMA are not flat, FedSMOO is much flatter, FedLESAM-D is the flattest.

Measured as in the FedSMOO Fig. 3 script (one shared function, ``fedsmoo_fig3_surface.surfaces``): centre loss
and mean rise over a random filter-normalised plane, FedLESAM-D against each other method, seed by seed.

    python paper_figures/fedlesam_fig3_surface.py [--full --data-dir DIR] [--seeds 3]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paper_figures import common as C                                   # noqa: E402
from paper_figures.fedsmoo_fig3_surface import per_algo, surfaces, tier_algos                 # noqa: E402

NAME = "fedlesam_fig3_surface"
ALGOS = {"fedavg": "FedAvg", "fedsam": "FedSAM", "fedgamma": "FedGAMMA", "fedsmoo": "FedSMOO",
         "fedlesam-d": "FedLESAM-D"}
HP = dict(dir_alpha=0.1, rho=0.1, lamb=0.1)      # the paper's rho = 0.1 for FedGAMMA, FedSMOO and FedLESAM-D
# mnist tier: FedLESAM Sec. 6.1's rho per method (FedSAM 0.01, the others 0.1; lamb 0.1), Dirichlet 0.1; FedGAMMA
# (two gradients a step) dropped to fit the budget; FedAvg, FedSAM, FedSMOO are the FedLESAM Fig. 2 runs
MNIST = {"fedavg": {}, "fedsam": dict(rho=0.01), "fedsmoo": dict(rho=0.1, lamb=0.1),
         "fedlesam-d": dict(rho=0.1, lamb=0.1)}


def run_list(tier, seeds) -> list:
    return [(ov, s, C.main_tag(tier)) for ov in per_algo(tier_algos(ALGOS, tier, MNIST), HP, tier, MNIST).values()
            for s in C.seed_list(seeds)]


def compute(seeds=3, tier="quick"):
    return surfaces(NAME, tier_algos(ALGOS, tier, MNIST), HP, "fedlesam-d", seeds, tier, mnist=MNIST,
                    claim="FedLESAM Fig. 3: FedLESAM-D's final model is the flattest, flatter than FedSMOO's, "
                          "FedGAMMA's, FedSAM's and FedAvg's (CIFAR-10, Dirichlet 0.1)")


def main(argv=None):
    return C.run_script(NAME, compute, __doc__, argv)


if __name__ == "__main__":
    main()
