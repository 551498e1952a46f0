"""The generalization gap of a model: train/test loss and accuracy (FedInit App. B). The coupled retraining that
measures uniform stability (FedInit Definition 11) is a study: fedlab_analysis/studies/stability.py, which
also serves ``probe stability`` and the ``gap``/``stability`` training hooks."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


from ..errors import UserError
from .common import generalization_gap, loss_acc, refuse, sample_losses, select_data  # noqa: F401
from .options import Common, opt


# ---- the probe: options, compute, plot ----------------------------------------------------------------
HELP = "generalisation gap, stability by retraining"
DESCRIBE = ("Retrains the run on a neighbouring data set (one sample replaced) with coupled randomness and "
            "reports the parameter distance and loss differences (FedInit App. B, Definition 11), and the "
            "train/test generalisation gap.")
COST = ("cost: retrains from round 0: --pairs x 2 coupled runs x --rounds rounds (the pairs one after "
        "the other, so memory is that of two runs), each round about the trainer's round time; plus one "
        "pass over the train and test data.")
IGNORES = (("data", "samples"), "with the stability probe (it retrains on the clients' data and evaluates the full "
                                "train and test sets)")
NEEDS_RUN = True      # a plain state_dict is refused (probes/foreign.py): this probe reads the federation
HOOK_NAMES = ("gap", "stability")


@dataclass
class Options(Common):
    rounds: int | None = opt(None, "rounds of the neighbouring retraining (default: the checkpoint's round; 0 = only "
                             "the train-test gap)")
    pairs: int | None = opt(None, "neighbouring data sets (client i*, sample j*) to draw (default: 1)")
    client: int | None = opt(None, "client i* whose sample is replaced (default: random)")
    pool: int | None = opt(None, "test points over which |f(w;z) - f(w~;z)| is taken (default: 1000)", lo=1)


def compute(b, opts: Options) -> dict:
    """The checkpoint's train/test gap and, with ``rounds`` > 0, the uniform stability of its training.

    Args:
        b: the rebuilt checkpoint (``common.rebuild``); its config is retrained from round 0.
        opts: ``rounds`` (default the checkpoint's round; 0 = the gap only), ``pairs``, ``client``, ``pool``,
            ``seed`` (the pairs' draws), ``data_dir``.
    Returns:
        ``{gap, summary}`` and ``stability`` (``uniform_stability``'s dict, with
        ``base_matches_checkpoint_max_abs`` when the retrained base run should equal the checkpoint).
    """
    from ..config import RunConfig
    from ..data import load_dataset
    pairs = 1 if opts.pairs is None else opts.pairs
    pool = 1000 if opts.pool is None else opts.pool
    if opts.rounds == 0:                              # refusals first: the sweep checks a line with b = None
        refuse(opts, ["pairs", "client", "pool"], "with --rounds 0 (no neighbouring run is trained)")
    if (opts.rounds or 0) < 0 or pairs < 1:
        raise UserError(f"--rounds must be >= 0 and --pairs >= 1 (got {opts.rounds}, {pairs})")
    ds = load_dataset(b.config["dataset"], data_dir=opts.data_dir or b.config.get("data_dir"), seed=b.config["seed"])
    (Xtr, ytr), (Xte, yte) = (select_data(ds, b.ckpt, s, by_client=b.bn_mode == "train") for s in ("train", "test"))
    to = {"device": b.theta.device, "dtype": b.theta.dtype}
    gap = generalization_gap(b.f, b.theta, Xtr.to(**to), ytr.to(b.theta.device), Xte.to(**to), yte.to(b.theta.device))
    R = int(b.ckpt["round"]) if opts.rounds is None else opts.rounds
    out = {"gap": gap, "summary": {"gap_loss": gap["gap_loss"], "gap_acc": gap["gap_acc"], "n_train": gap["n_train"],
                                   "n_test": gap["n_test"]}}
    if R > 0:
        cfg = dataclasses.replace(RunConfig.from_dict(b.config), device=str(b.theta.device),
                                  data_dir=opts.data_dir or b.config.get("data_dir"))
        from ..studies.stability import uniform_stability
        st = uniform_stability(cfg, R, pairs, seed=opts.seed, client=opts.client, pool=pool,
                               dataset=ds, keep_runs=True)
        base = st.pop("base")
        st.pop("shadow")
        if R == int(b.ckpt["round"]):
            st["base_matches_checkpoint_max_abs"] = float((base.w.cpu().double() - b.theta.cpu().double()).abs().max())
        out["stability"] = st
        out["summary"].update({k: st["summary"].get(k) for k in ("delta_T_mean", "delta_T_stderr", "eps_pool_mean",
                                                                  "eps_pool_stderr", "pairs", "r_init_max",
                                                                  "paper_r_init_bound")})
        out["summary"]["r_init_max_is"] = ("max over rounds of delta_0^t / delta_last^(t-1), the growth of the "
                                           "neighbouring runs' distance at the relaxed initialisation (FedInit "
                                           "App. B; the paper bounds it by 1 + 2 beta); null before the replaced "
                                           "sample is used; stderr needs --pairs >= 2")
    out["_title"] = b.title(f"generalization gap and uniform stability ({R} coupled rounds)")
    return out


def plot(result: dict, path) -> None:
    """``draw`` of ``compute``'s result, saved at ``path``."""
    from ..plots import save
    save(draw(result, result.get("_title")), path)


def draw(result: dict, title: str | None = None):
    from ..plots import figure
    st = result.get("stability")
    fig, ax = figure(ncols=2 if st else 1)
    g = result["gap"]
    ax[0, 0].bar(["train", "test"], [g["train_loss"], g["test_loss"]], color=["C0", "C1"])
    ax[0, 0].set(ylabel="loss", title=f"gap: loss {g['gap_loss']:.3g}, acc {g['gap_acc']:.3g}")
    if st:
        for p in range(len(st["pairs"])):
            r = [row for row in st["rows"] if row["pair"] == p]
            ax[0, 1].plot([row["round"] for row in r], [max(row["delta_w"], 1e-300) for row in r], alpha=0.7)
        n = len(st["pairs"])
        ax[0, 1].set(xlabel="round", ylabel="||w^t - w~^t||", yscale="log",
                     title=f"uniform stability ({n} neighbouring pair{'s' if n != 1 else ''})")
        from ..plots import integer_ticks
        integer_ticks(ax[0, 1].xaxis)
    fig.tight_layout()
    from ..plots import title as set_title
    set_title(fig, title)
    return fig



def make_hook(name: str = "stability", every: int = 1, steps=None, **kw):
    """The ``gap``/``stability`` training hook: the study's (studies/stability.py ``make_hook``), which retrains
    the neighbouring runs beside the run it watches."""
    from ..studies.stability import make_hook as study_hook
    return study_hook(name, every, steps, **kw)
