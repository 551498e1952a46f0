"""Every claim a paper_figures row tests: the paper's own words, where they stand, and how the effect is read.

A claim's ``effect`` says what each seed's paired effect is, signed so that > 0 is the paper's direction; ``kind``:
  greater     the paper says the effect is > 0; ``size`` is the lower end of a size it states, in the effect's
              units, and the verdict asks the mean to reach ``target`` = size * fraction (verdict.SIZE_FRACTION,
              one half, for a number the paper prints; 1 for a verbal size such as "much smaller", whose reading
              in ``size`` is already the least the words allow)
  equivalent  a null claim ("changes little"): |effect| <= the margin
  at_most     a one-sided null claim ("is not flatter than"): effect <= the margin
  exact       an identity, a count or a printed column: holds or is violated
A null claim's margin is ``margin`` where the paper's words give one ("paper" in its row); where they do not,
``margin`` is None and the verdict derives it from the seeds' noise (verdict.NOISE_MULTIPLE, "ours" in its row).
``measure`` is the curve the convergence gate reads (verdict.flag): test accuracy for accuracy claims, the training
loss for claims about the trained model's curvature, flatness or other state; none for a claim about the course of
training (``at_convergence`` False). ``predicts_failure``: the paper predicts that the effect's second arm fails to
train, so its runs diverging or collapsing to chance are evidence for the claim (verdict.decide). A claim whose
``where`` starts with "Control" is the toolkit's control of a component the paper credits (its quote is the credit).
``regime`` names a restriction the paper attaches. Quotes are verbatim (whitespace, ligatures, dashes and line-break
hyphens aside: tests/test_claims_quoted.py checks each against the paper's text).
"""
from __future__ import annotations

from dataclasses import dataclass

SIZE_FRACTION = 0.5   # the verdict rule's share of a stated size the mean effect must reach (paper_figures/verdict.py)
# the scripts that train no tier runs (an identity, a count or a convex toy): the same in every tier
TOY = ("fedcm_identities", "fedlesam_cost", "fedals_table2_comm", "stability_gap")

PAPERS = {
    "fedsmoo": "Sun et al., Dynamic Regularized Sharpness Aware Minimization in Federated Learning (ICML 2023)",
    "fedlesam": "Fan et al., Locally Estimated Global Perturbations are Better than Local Perturbations for "
                "Federated Sharpness-aware Minimization (ICML 2024)",
    "fedcm": "Xu et al., FedCM: Federated Learning with Client-level Momentum (2021)",
    "fedals": "Gholami & Seferoglu, Improved Generalization Bounds for Communication Efficient Federated Learning",
    "fedinit": "Sun, Shen, Tao, Understanding How Consistency Works in Federated Learning via Stage-wise Relaxed "
               "Initialization",
}
# the paper's text under shared/papers/ (the file's number: 000 FedSMOO ... 004 FedInit)
TEXT = {"fedsmoo": "000", "fedlesam": "001", "fedcm": "002", "fedals": "003", "fedinit": "004"}
KINDS = ("greater", "equivalent", "at_most", "exact")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    where: str
    quote: str
    effect: str
    kind: str = "greater"
    size: float | None = None
    fraction: float = SIZE_FRACTION
    margin: float | None = None
    regime: str | None = None
    # False for claims about the course of training (a per-round dispersion, drift, consensus, oscillation, the
    # divergence term along the rounds), which
    # hold or fail along the way; True for claims about the trained model, which need converged runs
    at_convergence: bool = True
    predicts_failure: bool = False
    # whose seeds set a margin of ours: "baseline" (the arm the effect is measured against), "effect" (a statistic
    # of one arm, e.g. a slope, whose own seeds are the noise)
    noise: str = "baseline"

    @property
    def null(self) -> bool:
        return self.kind in ("equivalent", "at_most")

    @property
    def margin_from(self) -> str | None:
        """"paper" (its words give the margin), "ours" (derived from the seeds' noise), None for other kinds."""
        return None if not self.null else "paper" if self.margin is not None else "ours"

    @property
    def measure(self) -> str | None:
        """The curve the convergence gate reads: "test_acc" for a test-accuracy effect, "train_loss" for any other
        claim about the trained model (curvature, flatness, divergence term), None for one about training's course."""
        if not self.at_convergence or self.kind == "exact":
            return None
        return "test_acc" if "test accuracy" in self.effect else "train_loss"

    @property
    def target(self) -> float | None:
        return None if self.size is None else self.size * self.fraction

    def cite(self) -> str:
        return f'{self.where}: "{self.quote}"'


_MUCH = dict(size=0.5, fraction=1.0)          # "much smaller/flatter": at most half the other's value
_FLAT_MARGIN = dict(kind="at_most")    # "not (desirably) flat": no flatter than FedAvg beyond the seeds' noise
_BEST_MARGIN = dict(kind="at_most")    # "best at about x": no other setting better beyond the seeds' noise
REL = "relative gap (baseline - method) / baseline"

_ALL = [
    # ---- FedSMOO ---------------------------------------------------------------------------------------------
    Claim("fedsmoo.t2.consistency", "fedsmoo", "Sec. 5.2, Table 2 (consistency row, FedSAM 0.6 0.1 | FedSMOO 0.6 0.1)",
          "0.866 1.245 0.821 1.061", f"consistency, {REL}, FedSAM baseline"),
    Claim("fedsmoo.t2.lam1", "fedsmoo", "Sec. 5.2 (Hessian), Table 2",
          "FedSMOO approaches the flat minimal with a lower Hessian top eigenvalue than the FedSAM method",
          f"top Hessian eigenvalue, {REL}, FedSAM baseline"),
    Claim("fedsmoo.t2.trace", "fedsmoo", "Sec. 5.2 (Hessian), Table 2", "The Hessian trace also decreases effectively",
          f"Hessian trace, {REL}, FedSAM baseline"),
    Claim("fedsmoo.t2.flat", "fedsmoo", "Sec. 5.2 (Hessian)", "the proposed FedSMOO approaches the flat minimal",
          f"adaptive sharpness (scale-invariant), {REL}, FedSAM baseline"),
    Claim("fedsmoo.t2.lam1_dir", "fedsmoo", "Table 2 (top eigenvalue, FedSAM 0.6 0.1 | FedSMOO 0.6 0.1)",
          "Hessian Top Eigenvalue 142.65 177.18 91.46 107.44",
          "top eigenvalue (Dir-0.1 - Dir-0.6) / Dir-0.6, same seed"),
    Claim("fedsmoo.t2.trace_dir", "fedsmoo", "Table 2 (trace, FedSAM 0.6 0.1 | FedSMOO 0.6 0.1)",
          "Hessian Trace 3104.1 3842.3 1783.3 2689.4", "Hessian trace (Dir-0.1 - Dir-0.6) / Dir-0.6, same seed"),
    Claim("fedsmoo.fig3.lower", "fedsmoo", "Sec. 5.2 (Loss landscape), Fig. 3",
          "the global minima approached by our method has not only a lower loss value",
          f"centre loss of the plane, {REL}"),
    Claim("fedsmoo.fig3.flatter", "fedsmoo", "Sec. 5.2 (Loss landscape), Fig. 3",
          "but also a smoother loss landscape, than the other three benchmarks",
          f"flatness measure (mean rise over the plane, or adaptive sharpness), {REL}"),
    Claim("fedsmoo.t8.dynreg", "fedsmoo", "App. B.7, Table 8 (74.08 -> 77.63)",
          "After introducing the above three modules, the performance improvements are",
          "test accuracy (+ dynamic regularisation) - FedAvg", size=0.0355),
    Claim("fedsmoo.t8.sam", "fedsmoo", "App. B.7, Table 8 (77.63 -> 80.13)",
          "After introducing the above three modules, the performance improvements are",
          "test accuracy (+ local SAM) - (+ dynamic regularisation)", size=0.0250),
    Claim("fedsmoo.t8.samcorr", "fedsmoo", "App. B.7, Table 8 (80.13 -> 81.58)",
          "After introducing the above three modules, the performance improvements are",
          "test accuracy (+ SAM correction) - (+ local SAM)", size=0.0145),
    Claim("fedsmoo.ctrl.feddyn", "fedsmoo", "Control (the toolkit's): FedSMOO against FedDyn, its base (Abstract)",
          "which is meanwhile revised by the global Sharpness Aware Minimization (SAM) optimizer",
          "test accuracy FedSMOO - FedDyn (the global SAM's share of FedSMOO's gain)"),
    # ---- FedLESAM --------------------------------------------------------------------------------------------
    Claim("fedlesam.fig2.drift", "fedlesam", "Sec. 4.1 (Reasonableness), Fig. 2 left",
          "the PD value and global sharpness of our FedLESAM are much smaller than others",
          f"mean perturbation drift, {REL}; 'much smaller' read as at most half", **_MUCH, at_convergence=False),
    Claim("fedlesam.fig2.sharpness", "fedlesam", "Sec. 4.1 (Reasonableness), Fig. 2 right",
          "the PD value and global sharpness of our FedLESAM are much smaller than others",
          f"global sharpness (late rounds, or adaptive), {REL}; 'much smaller' read as at most half", **_MUCH),
    Claim("fedlesam.fig2.fedsam_not_flat", "fedlesam", "Sec. 3.2 (Verification and Motivation), Fig. 2 right",
          "compared to FedAvg, FedSAM could not achieve satisfactory global flatness",
          "how much flatter FedSAM is than FedAvg: (FedAvg - FedSAM) / FedAvg", **_FLAT_MARGIN),
    Claim("fedlesam.fig3.flattest", "fedlesam", "Sec. 6.3 (Visualization of Global Loss Surface), Fig. 3",
          "FedSMOO achieves much flatter loss landscape while our FedLESAM-D further minimizes the global sharpness",
          f"flatness measure, {REL}, FedLESAM-D the method"),
    Claim("fedlesam.fig3.smoo_much_flatter", "fedlesam", "Sec. 6.3, Fig. 3",
          "FedSMOO achieves much flatter loss landscape",
          f"flatness measure, {REL}, FedSMOO against FedAvg; 'much flatter' read as at most half", **_MUCH),
    Claim("fedlesam.fig3.sam_gamma_not_flat", "fedlesam", "Sec. 6.3, Fig. 3",
          "Compared to FedAvg, FedSAM and FedGAMMA can not achieve desirable flatness",
          "how much flatter the method is than FedAvg: (FedAvg - method) / FedAvg", **_FLAT_MARGIN),
    Claim("fedlesam.t7.cost", "fedlesam", "App. D, Table 7",
          "Stored memory, backpropagation in each local step and communication at each round compared to FedAvg",
          "the counted multiplier equals the table's", kind="exact"),
    Claim("fedlesam.fig4.beats_fedavg", "fedlesam", "Sec. 6.3 (Ablation of rho), Fig. 4",
          "our FedLESAM-S outperforms FedAvg across a broad range of", "test accuracy FedLESAM-S - FedAvg",
          regime="from random initialisation the range is not given; 10^-2 .. 10^2 is stated for the pre-trained "
                 "models (OfficeHome, DomainNet)"),
    Claim("fedlesam.fig4.rise", "fedlesam", "Sec. 6.3, Fig. 4",
          "benefiting from minimizing global sharpness, but then sharply declines as larger perturbations hinder "
          "convergence", "test accuracy at the best interior rho - at the smallest rho"),
    Claim("fedlesam.fig4.drop", "fedlesam", "Sec. 6.3, Fig. 4",
          "but then sharply declines as larger perturbations hinder convergence",
          "test accuracy at the best interior rho - at the largest rho; a largest-rho run that ends at chance is "
          "the hindered convergence the paper predicts", predicts_failure=True),
    Claim("fedlesam.fig4.best", "fedlesam", "Sec. 6.3, Fig. 4 left two panels",
          "when starting with a randomly initialized model",
          "test accuracy of the best other rho/eta_l - at rho/eta_l = 0.1 (rho about 0.1 eta_l is best)",
          **_BEST_MARGIN),
    Claim("fedlesam.ctrl.s_scaffold", "fedlesam", "Control (the toolkit's): FedLESAM-S against SCAFFOLD, its base "
          "(App. B, Algorithm 3)", "FedLESAM-S locally estimates the global perturbation and incorporates variance "
          "reduction of Scaffold into the local training", "test accuracy FedLESAM-S - SCAFFOLD"),
    Claim("fedlesam.ctrl.d_feddyn", "fedlesam", "Control (the toolkit's): FedLESAM-D against FedDyn, its base "
          "(App. B, Algorithm 4)", "we provide the procedure of our FedLESAM-D based on the framework of FedDyn",
          "test accuracy FedLESAM-D - FedDyn"),
    # ---- FedCM -----------------------------------------------------------------------------------------------
    Claim("fedcm.t3.beats_fedavg", "fedcm", "Sec. 6.3, Table 3",
          "consistently outperforms FedAvg corresponding to", "test accuracy FedCM(alpha) - FedCM(alpha = 1)"),
    Claim("fedcm.t3.too_small", "fedcm", "Sec. 6.3, Table 3",
          "too small or too large will harm the convergence and generalization of FedCM",
          "test accuracy at the best interior alpha - at alpha = 0.01"),
    Claim("fedcm.t3.too_large", "fedcm", "Sec. 6.3, Table 3",
          "too small or too large will harm the convergence and generalization of FedCM",
          "test accuracy at the best interior alpha - at alpha = 1"),
    Claim("fedcm.t3.best", "fedcm", "Sec. 6.3, Table 3", "Empirically, we find that performance is best when setting",
          "test accuracy of the best alpha outside 0.05..0.1 - of the better of 0.05 and 0.1", **_BEST_MARGIN),
    Claim("fedcm.fig1.oscillation", "fedcm", "Sec. 6.3, Fig. 1",
          "FedCM will suffer from oscillation and slow convergence when",
          "back-and-forth of the accuracy curve, alpha = 0.01 - alpha = 0.1", at_convergence=False),
    Claim("fedcm.fig23.fedadam", "fedcm", "App. C.3, Figs. 2-3",
          "The convergence curves of FedAdam suffer a lot of oscillation, especially in the Dirichlet-0.6 setting",
          "back-and-forth of the accuracy curve, FedAdam - FedCM", at_convergence=False),
    Claim("fedcm.lemma41", "fedcm", "Sec. 4, Lemma 4.1",
          "is the exponential moving average of past client gradients", "relative error below 1e-12", kind="exact"),
    Claim("fedcm.alpha1", "fedcm", "Sec. 6.3 (alpha = 1 is FedAvg)", "outperforms FedAvg corresponding to",
          "max |w difference| below 1e-12", kind="exact"),
    Claim("fedcm.b8", "fedcm", "App. B, Lemma B.8 (drift bound: heterogeneity terms 6 alpha K sigma_g^2 + "
          "6 alpha K G^2 linear in alpha, noise alpha^2 sigma_l^2)", "can be upper bounded by the following lemma",
          "1 - (log-log slope of the clients' dispersion in alpha): the bound's order is alpha^1, so the slope "
          "should be at least 1 (margin: the slopes' own seed noise)", kind="at_most", at_convergence=False,
          noise="effect"),
    # ---- FedInit ---------------------------------------------------------------------------------------------
    Claim("fedinit.fig1.k", "fedinit", "Sec. 5.3, Fig. 1(a)",
          "As local interval K increases, test accuracy rises first and then decreases",
          "late test accuracy at the best interior K - at the better end of the grid"),
    Claim("fedinit.fig1.stable", "fedinit", "Sec. 5.3, Fig. 1(b)", "is stable within its valid range",
          "late test accuracy beta = 0 - beta (no loss beyond the seeds' noise)", kind="at_most"),
    Claim("fedinit.fig1.diverges", "fedinit", "Sec. 5.3, Fig. 1(b)",
          "it is larger than the threshold, the training process will diverge quickly",
          "late test accuracy beta = 0 - beta; a run of that beta that goes non-finite or ends at chance is the "
          "divergence the paper predicts",
          predicts_failure=True),
    Claim("fedinit.fig2.lowers", "fedinit", "Sec. 5.4, Fig. 2",
          "effectively reduces the divergence term and improves the test accuracy",
          "late divergence beta = 0 - beta = 0.1", at_convergence=False),
    Claim("fedinit.fig2.lowers_delta", "fedinit", "Sec. 5.4, Fig. 2; Delta^t as Thm 1 defines it (below Eq. (3))",
          "effectively reduces the divergence term and improves the test accuracy",
          "late Delta^t = (1/C) sum over all C clients of ||w_i^last - w^t||^2, beta = 0 - beta = 0.1",
          at_convergence=False),
    Claim("fedinit.fig2.gain", "fedinit", "Sec. 5.4, Fig. 2",
          "the test accuracy achieves at least 2% improvement on each setup",
          "late test accuracy beta = 0.1 - beta = 0", size=0.02),
    Claim("fedinit.fig2.negative", "fedinit", "Sec. 5.4, Fig. 2",
          "in most cases it will result in greater divergence and worse test accuracy",
          "late divergence beta = -0.1 - beta = 0", at_convergence=False),
    Claim("fedinit.fig2.negative_delta", "fedinit", "Sec. 5.4, Fig. 2; Delta^t as Thm 1 defines it (below Eq. (3))",
          "in most cases it will result in greater divergence and worse test accuracy",
          "late Delta^t = (1/C) sum over all C clients of ||w_i^last - w^t||^2, beta = -0.1 - beta = 0",
          at_convergence=False),
    Claim("fedinit.t6.fedavg", "fedinit", "Sec. 5.2, Table 6 (FedAvg)",
          "whose improvement achieves about over 3% on each setup", "late test accuracy +RI - vanilla", size=0.03),
    Claim("fedinit.t6.scaffold", "fedinit", "Sec. 5.2, Table 6 (SCAFFOLD)",
          "it helps the classical SCAFFOLD method to improve about 2% ~ 3%", "late test accuracy +RI - vanilla",
          size=0.02),
    Claim("fedinit.t6.improves", "fedinit", "Sec. 5.2, Table 6 (FedAdam, FedSAM)",
          "RI does not hinder other algorithms and significantly improves their performance",
          "late test accuracy +RI - vanilla"),
    Claim("fedinit.t6.feddyn", "fedinit", "Table 6 (FedDyn, 10%-100 Dir-0.1: 75.08 -> 75.11)", "75.08 75.11",
          "late test accuracy +RI - vanilla; 'changes little': within the seeds' noise (Table 6's FedDyn "
          "changes, at most 0.52 points of CIFAR-10, do not transfer)", kind="equivalent"),
    Claim("fedinit.t6.fedcm", "fedinit", "Table 6 (FedCM, 10%-100 Dir-0.1: 73.93 -> 73.71)", "73.93 73.71",
          "late test accuracy +RI - vanilla; 'changes little': within the seeds' noise (Table 6's FedCM "
          "changes, at most 0.23 points of CIFAR-10, do not transfer)", kind="equivalent"),
    Claim("fedinit.ctrl.ri", "fedinit", "Control (the toolkit's): FedAvg +RI against FedAvg at equal rounds and local "
          "steps (Sec. 5.2, Table 6)", "the relaxed initialization holds the promising potential to further enhance "
          "the performance", "late test accuracy +RI - vanilla, FedAvg"),
    Claim("fedinit.remark14", "fedinit", "Sec. 4.4, Remark 14", "It effectively improves the stability",
          "final loss difference of coupled neighbours, FedAvg - mean over beta > 0"),
    # ---- FedALS ----------------------------------------------------------------------------------------------
    Claim("fedals.fig1.cd", "fedals", "Sec. 1 (Example 1), Fig. 1",
          "The early layers responsible for extracting representations exhibit lower levels of consensus distance",
          "log10 (time-averaged CD of the head / of the first layer)", at_convergence=False),
    Claim("fedals.t2.beats", "fedals", "Sec. 7.4, Table 2",
          "we initially witness an enhancement in accuracy owing to improved generalization",
          "test accuracy alpha = 10 - alpha = 1 (FedAvg)"),
    Claim("fedals.t2.ceases", "fedals", "Sec. 7.4, Table 2",
          "ceases to contribute to performance improvement",
          "test accuracy of the best alpha in 25..50 - of the best in 5..10 (no gain beyond the threshold)",
          **_BEST_MARGIN),
    Claim("fedals.t2.comm", "fedals", "Sec. 7.4, Table 2 (last column)",
          "The accuracy and communication overhead per client after training",
          "(T/tau)(|h| + |phi|/alpha) equals the printed column at its 3 decimals", kind="exact"),
]

CLAIMS: dict[str, Claim] = {}
for _c in _ALL:
    assert _c.id not in CLAIMS and _c.paper in PAPERS and _c.kind in KINDS, _c.id
    assert _c.margin is None or _c.null, _c.id
    CLAIMS[_c.id] = _c
