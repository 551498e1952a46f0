"""Claims of the five papers that the toy checks do not test, each with the reason, so the claim table
says what is NOT verified as plainly as what is. Rows carry the verdict ``not checked``; none is a finding.

Reasons, in short:
- "needs image-scale training": an accuracy / speed / landscape result on CIFAR, SVHN or MNIST with deep
  networks. The trainer (``python -m fedlab_analysis.train``) and the probes can run scaled-down versions;
  a convex toy has nothing to say about them.
- "constant not given": the theorem hides its constants in O(.), so LHS <= RHS cannot be evaluated.
"""
from __future__ import annotations

from .claims import NOT_CHECKED, Claim

IMAGE = "needs image-scale training (deep network, real data): run it with the trainer, not a toy"

ROWS = {
    "fedsmoo": [
        ("acc-ranking", "FedSMOO > MoFedSAM > {FedDyn, FedCM, SCAFFOLD} > FedSAM ~ FedAvg > FedAdam", "Table 1", IMAGE),
        ("gain-vs-het", "FedSMOO's margin over MoFedSAM grows with heterogeneity", "Table 1", IMAGE),
        ("rounds-to-acc", "FedSMOO reaches the target accuracy in the fewest rounds", "Tables 3, 6, 7", IMAGE),
        ("ablation", "each module (DR, local SAM, SAM correction) adds accuracy", "Table 8", IMAGE),
        ("landscape", "FedSMOO's 2-D loss surface is lower and flatter than the baselines'", "Fig. 3", IMAGE),
    ],
    "fedlesam": [
        ("het-sharpens", "heterogeneity sharpens the global minimum (lambda_max, trace grow with skew)", "Fig. 1",
         IMAGE),
        ("acc-orderings", "FedLESAM(-S, -D) at or near the top of the accuracy tables", "Tables 2-4", IMAGE),
        ("scale-robust", "100@10% -> 200@5% costs every method 1-5 points; FedLESAM-S/-D stay on top",
         "Table 2", IMAGE),
        ("lemma1", "Lemma 1 (inner product of the update with grad F(w~^t))", "Lemma 1",
         "w~^t (the perturbed global iterate) is never defined in the paper: the inequality has no fixed "
         "left-hand side to evaluate"),
        ("lemma5", "Lemma 5 (bounded update difference)", "Lemma 5",
         "w~_{i,k} undefined (as Lemma 1); with sigma_l = 0 it reduces to an equality of the update"),
        ("lemma6", "Lemma 6 (one-round descent)", "Lemma 6",
         "statement and proof differ in their eta_g factors and conditions, and F(w~^t) is undefined"),
    ],
    "fedcm": [
        ("fedadam-oscillates", "FedAdam's test-accuracy curves oscillate more than FedCM's (Dir-0.6)",
         "Figs. 2-3", IMAGE),
        ("thm51-whole", "Theorem 5.1: the suboptimality bound as a whole (LHS <= RHS)", "Thm 5.1",
         "constant not given: the rates hide their constants in O(.); the App. B constants are used for the "
         "alpha and K*S readings above, with the O(.) constants set to 1, which cannot judge LHS <= RHS"),
    ],
    "fedals": [
        ("C1-layer-CD", "per-layer consensus distance is lower for early layers than for the head", "Fig. 1",
         IMAGE),
        ("C2-accuracy", "FedALS (alpha = 10) beats FedAvg (tau = 5) on non-iid data", "Table 1", IMAGE),
        ("C3-alpha", "accuracy vs alpha is an inverted U (peak at alpha in [5, 10])", "Table 2", IMAGE),
        ("C5-scaffold", "SCAFFOLD gains little over FedAvg at 2x communication; FedALS+SCAFFOLD ~ FedALS",
         "Sec. 7.3", IMAGE),
        ("C6-phi-depth", "the depth of phi matters (first 16 of 20 layers best)", "Table 3", IMAGE),
        ("bound9", "Theorem 4.3's multi-round bound (9) as a whole", "Thm 4.3 / Eq. (9)",
         "constant not given: A and B in (9) are O~(sqrt(C(M)/|Z_k,r|) + sigma^2/(mu tau) + L/mu) and "
         "O~(E delta_k + sigma^2/(mu tau) + L/mu), hidden constants and log factors, and the model-class "
         "complexity C(M) is not defined for a number; its tau trend and its proof's explicit line, Eq. (57), "
         "are checked above"),
    ],
    "fedinit": [
        ("optimal-K", "accuracy is non-monotone in the local steps K", "Fig. 1a", IMAGE),
        ("acc-gain", "FedInit beats FedAvg by 3.4-5.8 points at no communication cost", "Table 4", IMAGE),
        ("plug-in", "+RI helps FedAvg, FedSAM, FedAdam, SCAFFOLD but not FedDyn or FedCM", "Table 6", IMAGE),
        ("overhead", "RI's wall-clock overhead <= 5%", "Tables 7, 8", IMAGE),
    ],
}


def rows(paper: str) -> list[Claim]:
    return [Claim(paper, f"untested-{cid}", claim, where, "-", f"not checked: {why}", NOT_CHECKED)
            for cid, claim, where, why in ROWS.get(paper, [])]
