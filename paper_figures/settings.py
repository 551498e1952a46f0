"""Each paper's settings beside the MNIST tier's, per script: ``python -m paper_figures.settings [--check]``.

The paper side is written here once, as a small table per paper: a knob, the value the paper states, where it states
it (section, table, figure) and why the tier differs where it does. The tier side is read from the code: each
script's ``run_list("mnist", seeds)`` resolved by ``common.config`` (``common.MNIST_BASE``, the script's overrides,
the RunConfig defaults and ``algos.py``'s paper defaults), so a change of the tier's configuration changes the table.
Each row is marked *same*, *differs* (with why), *not stated* (the paper gives no value), or, for a form where the
authors' released code differs from the paper's text, *paper form only* / *both forms*.

The horizon rule (``horizon``): a claim is judged at the paper's horizon when the learning rate at the tier's last
round is within a factor ``HORIZON_FACTOR`` (10) of the paper's at its last round (both from the trainer's own
schedule, ``trainers.engine.Run.lr_at``); otherwise the script's claims are "horizon shorter than the paper's".

Writes ``paper_figures/out/settings/<script>.md`` (one per script that trains tier runs), ``README.md`` there (one
line per script) and ``controls.md`` (the controls computable from the committed per-seed numbers);
``--check`` writes nothing and exits 1 naming every stale file.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from fedlab_analysis import algos
from fedlab_analysis.config import EXECUTION, RunConfig
from paper_figures import common as C
from paper_figures import ledger
from paper_figures import verdict as V
from paper_figures.tier import ORDER

OUT = C.OUT / "settings"
TIER = "mnist"
HORIZON_FACTOR = 10.0
SHORT = "horizon shorter than the paper's"


@dataclass(frozen=True)
class Knob:
    """One setting as a paper states it. ``key``: a RunConfig field, an algorithm hyper-parameter (read with its
    paper default, ``RunConfig.hp``) or a name in ``DERIVED``. ``paper``: the value; ``{algo: value, "*": value}``
    per method (a method absent from the dict has no such knob); a tuple is a grid (compared as a set); None: the
    paper states none. ``code``: the authors' released code's value where it differs, ``code_note`` how, and the
    flag that gives it."""
    key: str
    label: str
    where: str
    paper: object
    why: str = ""
    code: object = None
    code_note: str = ""


_MISSING = object()
_FIELDS = set(RunConfig.__dataclass_fields__)


def _model(c):
    w = c.model_kwargs.get("widths")
    return f"{c.model} (hidden widths {', '.join(map(str, w))})" if w else c.model


def _grid(c):
    """The learning-rate grid of a FedALS Table 2 run (its script's LR_GRID), as text."""
    from paper_figures.fedals_table2 import LR_GRID
    return "{" + ", ".join(f"{x:g}" for x in LR_GRID) + "}"


def _partition(c):
    if c.partition == "dirichlet":
        return f"Dirichlet {c.dir_alpha:g}"
    if c.partition == "sorted":
        return f"label-sorted, {c.clients} clients"
    if c.partition == "pathological":
        return f"Pathological-{c.classes_per_client}"
    return c.partition


def _noise(c):
    """FedInit Sec. 5.1's heterogeneity noise as the run has it (RunConfig.het_noise, data/noise.py)."""
    if not c.het_noise:
        return "none"
    from fedlab_analysis.data.noise import FORM
    return f"{FORM}, s = {c.het_noise:g}"


DERIVED = {   # name: (RunConfig -> the value the run uses)
    "model": _model,
    "federation": lambda c: f"{c.clients} at {c.active_ratio:.0%}",
    "partition": _partition,
    "split": lambda c: f"{_partition(c)}, {c.clients} clients at {c.active_ratio:.0%}",
    "local_work": lambda c: f"{c.local_steps} steps" if c.local_steps else f"{c.local_epochs:g} epochs",
    "momentum": lambda c: c.local_momentum,
    "lr_search": lambda c: "grid of powers of 2, per experiment" if c.holdout else f"one rate, {c.lr:g}, no search",
    "holdout": lambda c: (f"grid {_grid(c)} per arm (alpha); the best mean held-out accuracy at the last round, on "
                          f"{c.holdout:,} training images drawn by the seed, on no client" if c.holdout else "none"),
    "noise": _noise,
    "rho_over_lr": lambda c: round(c.hp("rho") / c.lr, 9),
}
CODE_FORMS = ("lesam_source", "lesam_s_scale", "smoo_server", "ri_agg")   # read per algorithm (algos.uses)


def applies(key: str, c: RunConfig) -> bool:
    """Whether run ``c`` has knob ``key``: an algorithm's hyper-parameter or code form only where it reads it."""
    if key in algos.HYPER or key in CODE_FORMS:
        return key in algos.uses(c.algo, c.ri, c)
    if key == "rho_over_lr":
        return "rho" in algos.uses(c.algo, c.ri, c)
    if key == "ri_anchor":
        return c.ri and c.algo in algos.ANCHORED
    return True


def ours(key: str, c: RunConfig):
    if key in DERIVED:
        return DERIVED[key](c)
    return c.hp(key) if key in algos.HYPER else getattr(c, key)


def paper_value(knob: Knob, algo: str):
    """The paper's value for ``algo`` (None: not stated; _MISSING: the method has no such knob in this paper)."""
    if isinstance(knob.paper, dict):
        return knob.paper.get(algo, knob.paper.get("*", _MISSING))
    return knob.paper


# ---- the reasons, each written once ---------------------------------------------------------------------------
SCALE = ("data set and model scale: the MNIST tier trains every run on a CPU (paper_figures/README_TIER.md); "
         "`--tier full` runs the papers' CIFAR-10 and ResNet")
ROUNDS = ("the tier's CPU budget; the last-round learning-rate row says whether the schedule still reaches the "
          "paper's end")
DECAY = ("the tier's per-method decay (common.PER_METHOD: 0.9995 for the FedDyn family, the base's 0.998 for the "
         "others) is not the paper's here")
CLIP_WHERE = "not in the paper; the authors' released code (clip_grad_norm_, max_norm 10)"
SEEDS = "the tier's budget (common.SEEDS)"
TRIM = "trimmed to fit the tier's budget (paper_figures/README_TIER.md, \"What each script keeps\")"
FROM_CODE = "; the paper's numbers came from the released code"

CIFAR = "cifar10"
RESNET18 = "ResNet-18-GN"
FEDDYN_DECAY = {"feddyn": 0.9995, "*": 0.998}

PAPERS = {
    "fedsmoo": (
        Knob("dataset", "data set", "Sec. 5.1", CIFAR, SCALE),
        Knob("model", "model", "Sec. 5.1", RESNET18, SCALE),
        Knob("federation", "clients, participation", "Table 1", "100 at 10%"),
        Knob("replacement", "Dirichlet sampling with replacement", "Sec. 5.1, Dataset splitting", True,
             "the tier partitions without replacement (each image on one client); `--replacement` samples as the "
             "paper does"),
        Knob("batch_size", "batch size", "Sec. 5.1", 50),
        Knob("local_work", "local work per round", "Sec. 5.1", "5 epochs"),
        Knob("lr", "local learning rate eta_l", "Sec. 5.1", 0.1),
        Knob("lr_decay", "learning-rate decay per round",
             "Sec. 5.1; App. B.4 (proxy-type methods: FedSpeed, our reading)",
             {"feddyn": 0.9995, "fedspeed": 0.9995, "fedsmoo": 0.9995, "*": 0.998}, DECAY),
        Knob("wd", "weight decay", "Sec. 5.1", 1e-3),
        Knob("server_lr", "global learning rate eta_g", "Sec. 5.1", {"fedadam": 0.1, "*": 1.0}),
        Knob("rho", "SAM learning rate r", "Sec. 5.1; App. B.4, Table 5", {"fedsam": 0.01, "mofedsam": 0.01, "*": 0.1}),
        Knob("lamb", "penalised coefficient 1/beta", "App. B.4, Table 5 (beta = 10)", 0.1),
        Knob("rounds", "rounds T", "Table 1", 800, ROUNDS),
        Knob("clip", "gradient clipping (norm)", CLIP_WHERE, 10.0),
        Knob("seed", "seeds per configuration", "", None, SEEDS),
        Knob("smoo_server", "server perturbation s", "Alg. 1", "paper", code="code",
             code_note="the released code averages mu_i alone (`--smoo-server code`)" + FROM_CODE),
    ),
    "fedlesam": (
        Knob("dataset", "data set", "Sec. 6.1", CIFAR, SCALE),
        Knob("model", "model", "Sec. 6.1", RESNET18, SCALE),
        Knob("federation", "clients, participation", "Sec. 6.1, Dataset and Splits", "100 at 10%"),
        Knob("batch_size", "batch size", "Sec. 6.1", 50),
        Knob("local_work", "local work per round", "Sec. 6.1", "5 epochs"),
        Knob("lr", "local learning rate eta_l", "Sec. 6.1", 0.1),
        Knob("lr_decay", "learning-rate decay per round", "App. E.1",
             {"feddyn": 0.9995, "fedsmoo": 0.9995, "fedlesam-d": 0.9995, "*": 0.998}, DECAY),
        Knob("wd", "weight decay", "App. E.1", 1e-3),
        Knob("server_lr", "global learning rate eta_g", "Sec. 6.1", {"fedadam": 0.1, "*": 1.0}),
        Knob("rho", "perturbation magnitude rho", "Sec. 6.1", {"fedsam": 0.01, "fedlesam": 0.01, "*": 0.1}),
        Knob("lamb", "FedDyn-family coefficient", "App. E.1 (FedSMOO's settings: its Table 5, beta = 10)",
             {"fedlesam-d": None, "fedlesam-s": None, "*": 0.1},
             "the paper gives no coefficient for its own variants; the tier uses FedSMOO's 0.1"),
        Knob("rounds", "rounds T", "Sec. 6.1", 800, ROUNDS),
        Knob("clip", "gradient clipping (norm)", CLIP_WHERE, 10.0),
        Knob("seed", "seeds per configuration", "", None, SEEDS),
        Knob("lesam_source", "FedLESAM perturbation direction", "Alg. 1; Sec. 4.1", "client_old",
             code="last_global_update",
             code_note="the released code perturbs along the last global update, which Sec. 4.1 says the experiments "
                       "do not send (`--lesam-source last_global_update`; `released_code` also keeps its flat-vector "
                       "indexing)" + FROM_CODE),
        Knob("lesam_s_scale", "FedLESAM-S correction scale", "App. D.2, Alg. 3", "paper", code="code",
             code_note="the released code scales the correction by lamb (`--lesam-s-scale code`)" + FROM_CODE),
    ),
    "fedcm": (
        Knob("dataset", "data set", "Sec. 6.1", CIFAR, SCALE),
        Knob("model", "model", "Sec. 6.1", RESNET18, SCALE),
        Knob("federation", "clients, participation (Setting I)", "Sec. 6.1", "100 at 10%"),
        Knob("sampling", "client activation", "Sec. 6.1 (each client independently)", "bernoulli"),
        Knob("partition", "partition", "Sec. 6.1", "Dirichlet 0.6"),
        Knob("batch_size", "batch size", "App. C.2", 50),
        Knob("local_work", "local work per round", "App. C.2", "5 epochs"),
        Knob("lr", "local learning rate eta_l", "App. C.2", 0.1),
        Knob("lr_decay", "learning-rate decay per round", "App. C.2", FEDDYN_DECAY, DECAY),
        Knob("wd", "weight decay", "App. C.2", 1e-3),
        Knob("server_lr", "global learning rate eta_g", "App. C.2", {"fedadam": 0.1, "*": 1.0}),
        Knob("alpha", "FedCM alpha", "App. C.2 (Setting I, Dirichlet 0.6)", {"fedcm": 0.1}),
        Knob("eps", "FedAdam tau", "App. C.2", {"fedadam": 0.01}),
        Knob("rounds", "rounds T", "Sec. 6.1", 4000, ROUNDS),
        Knob("clip", "gradient clipping (norm)", "", None, "the paper states no clipping; the tier does not clip "
             "(common.REAL_UNCLIPPED)"),
        Knob("seed", "seeds per configuration", "", None, SEEDS),
    ),
    "fedinit": (
        Knob("dataset", "data set", "Sec. 5.1", CIFAR, SCALE),
        Knob("model", "model", "Sec. 5.1", "ResNet-18-GN, VGG-11", SCALE),
        Knob("federation", "clients, participation", "Sec. 5.1", "100 at 10%"),
        Knob("noise", "heterogeneity noise", "Sec. 5.1",
             "per-client RGB strength and per-class brightness, Gaussian (no magnitude stated)",
             "run, adapted: on grey images the per-client gain acts on the one channel (on CIFAR-10 one gain per RGB "
             "channel); the brightness offset is drawn per client and class, since one offset per class shared by "
             "every client writes the label into every background pixel (FedAvg then learns that shortcut: 53% "
             "test accuracy on MNIST); the paper gives no magnitude, s = 0.2 is ours (`--het-noise`, "
             "fedlab_analysis/data/noise.py); training images only"),
        Knob("batch_size", "batch size", "", None, "the paper states none; the released code's README: 50"),
        Knob("local_work", "local work per round", "Sec. 5.3 (K counted in epochs)", None,
             "the paper states no default; the released code: 5 epochs"),
        Knob("lr", "local learning rate eta_l", "Sec. 5.1", 0.1),
        Knob("lr_decay", "learning-rate decay per round", "Sec. 5.1", FEDDYN_DECAY, DECAY),
        Knob("wd", "weight decay", "", None, "the paper states none; the released code: 1e-3"),
        Knob("server_lr", "global learning rate eta_g", "Sec. 5.1", {"fedadam": 0.1, "*": 1.0}),
        Knob("beta", "relaxation coefficient beta", "", None,
             "the paper states no default (Fig. 1 sweeps it); the released code: 0.1"),
        Knob("lamb", "FedDyn coefficient", "", {"feddyn": None}, "the paper states none; FedSMOO's 0.1"),
        Knob("rounds", "rounds T (CIFAR-10)", "Sec. 5.1", 500, ROUNDS),
        Knob("clip", "gradient clipping (norm)", CLIP_WHERE, 10.0),
        Knob("seed", "seeds per configuration", "", None, SEEDS),
        Knob("ri_agg", "aggregation with RI", "Alg. 1, line 16", "final_avg", code="delta_from_init",
             code_note="the released code adds the mean update from each relaxed start (`--ri-agg "
                       "delta_from_init`)" + FROM_CODE),
        Knob("ri_anchor", "centre of FedDyn's correction with RI", "Sec. 5.2, Table 6 (FedDyn +RI)", None,
             "the paper does not say where FedDyn's correction is centred with RI; the tier's default is the global "
             "model w^t, the released code's the relaxed start (`--ri-anchor start`)" + FROM_CODE, code="start"),
    ),
    "fedals": (
        Knob("dataset", "data set", "Table 2", CIFAR, SCALE + "; the paper's Table 1 also trains on MNIST"),
        Knob("model", "model", "Sec. 7", "ResNet-20", SCALE),
        Knob("federation", "clients, participation", "Sec. 7 (five nodes)", "5 at 100%"),
        Knob("partition", "partition", "Sec. 7.1 (label-sorted)", "label-sorted, 5 clients"),
        Knob("batch_size", "batch size", "Sec. 7", 64),
        Knob("local_work", "local steps tau", "Tables 1-2", "5 steps"),
        Knob("momentum", "local momentum", "Sec. 7", 0.9, "the tier's local step is plain SGD here"),
        Knob("lr_search", "local learning rate", "Sec. 7", "grid of powers of 2, per experiment",
             "Fig. 1 illustrates FedAvg's consensus: one rate, the FedALS Table 2 probe's best, not searched"),
        Knob("holdout", "data the learning rate is chosen on", "Sec. 7", None,
             "the paper does not say on which data it chose; the tier holds out 10% of the training images "
             "(`--holdout`) and never looks at the test set"),
        Knob("lr_decay", "learning-rate decay per round", "", None, "the paper states none; the tier uses none"),
        Knob("wd", "weight decay", "Sec. 7", 1e-4),
        Knob("alpha", "FedALS alpha", "Table 1", {"fedals": 10.0}),
        Knob("rounds", "rounds", "", None, "the paper states none"),
        Knob("seed", "seeds per configuration", "Sec. 7", 20, SEEDS),
    ),
}

OWN = {   # script: the knobs its figure or table sets otherwise than its paper's protocol
    "fedsmoo_table2": (Knob("partition", "partition", "Table 2", ("Dirichlet 0.6", "Dirichlet 0.1")),),
    "fedsmoo_fig3_surface": (Knob("partition", "partition", "", None, "Fig. 3 states none; the tier uses Dirichlet "
                                  "0.1, the split of its other surface"),),
    "fedsmoo_table8_ablation": (Knob("partition", "partition", "", None, "Table 8 states none (the wall-clock study "
                                     "beside it, App. B.6, is on Pathological-3); the tier uses Dirichlet 0.1 to "
                                     "share its runs"),),
    "fedlesam_fig2_drift": (Knob("partition", "partition", "Fig. 2", "Dirichlet 0.1"),),
    "fedlesam_fig3_surface": (Knob("partition", "partition", "Fig. 3", "Dirichlet 0.1"),),
    "fedlesam_fig4_rho": (
        Knob("partition", "partition", "", None, "Fig. 4 states none; the tier uses Dirichlet 0.1"),
        Knob("rho", "perturbation magnitude rho", "Sec. 6.1", {"fedlesam-s": 0.1},
             "Fig. 4 sweeps rho; Sec. 6.1's 0.1 is the grid's rho/eta_l = 1 point"),
        Knob("rho_over_lr", "rho / eta_l grid", "Fig. 4; Sec. 6.3", None,
             "Fig. 4's values from scratch are not given in the text; Sec. 6.3 states the range 10^-2 to 10^2 for "
             "pre-trained models and advises about 0.1 from scratch")),
    "fedcm_table3_alpha": (Knob("alpha", "FedCM alpha grid", "Sec. 6.3; Table 3",
                                {"fedcm": (0.01, 0.03, 0.05, 0.1, 0.3, 1.0)}, TRIM),),
    "fedinit_table6": (Knob("partition", "partition", "Table 6 (the 10%-100 Dirichlet-0.1 column)", "Dirichlet 0.1"),),
    "fedinit_fig2_consensus": (Knob("split", "partition and population", "Fig. 2",
                                    "Dirichlet 0.6, 100 clients at 10% (a); Dirichlet 0.1, 200 clients at 5% (b)",
                                    "panel (b)'s split at panel (a)'s population: neither panel's setting"),),
    "fedinit_fig1_sensitivity": (Knob("partition", "partition", "", None,
                                      "Fig. 1 states none; the tier uses Dirichlet 0.1"),),
    "fedals_table2": (Knob("alpha", "FedALS alpha grid", "Table 2", {"fedals": (1, 5, 10, 25, 50, 100)}, TRIM),),
    "fedals_fig1_consensus": (
        Knob("dataset", "data set", "Fig. 1", CIFAR, SCALE),
        Knob("partition", "partition", "Sec. 1; Fig. 1 (2 classes per client)", "label-sorted, 5 clients"),
        Knob("local_work", "local steps tau (FedAvg)", "Sec. 1", "50 steps")),
}


# ---- the tier's side, read from the code -----------------------------------------------------------------------
def configs(script: str) -> list[RunConfig]:
    """The resolved configs of every run the script trains in the MNIST tier, at the tier's seeds."""
    mod = importlib.import_module(f"paper_figures.{script}")
    return [C.config(o, s, TIER) for o, s, _ in mod.run_list(TIER, C.SEEDS[TIER])]


def knobs(script: str) -> list[Knob]:
    """The paper's protocol (PAPERS, by the script's name: ``<paper>_<figure>``), with the script's own knobs (OWN)."""
    mine = {k.key: k for k in OWN.get(script, ())}
    out = [mine.pop(k.key, k) for k in PAPERS[script.split("_")[0]]]
    return out + list(mine.values())


def method(c: RunConfig) -> str:
    return c.algo + (" +RI" if c.ri else "") + (f" ({c.ri_agg})" if c.ri and c.ri_agg != "final_avg" else "")


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def _fmt(v) -> str:
    if v is None:
        return "not stated"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list, set, frozenset)):
        return "{" + ", ".join(_fmt(x) for x in sorted(v, key=_order)) + "}"
    return str(v)


def _order(x):
    return (0, x, "") if isinstance(x, (int, float)) else (1, 0, str(x))


def mark(knob: Knob, pv, vals: list) -> str:
    """same / differs / not stated / paper form only / both forms (module docstring)."""
    if pv is None:
        return "not stated"
    if isinstance(pv, tuple):
        ok = len({_fmt(v) for v in vals}) == len(pv) and all(any(_same(v, p) for v in vals) for p in pv)
        return "same" if ok else "differs"
    if knob.code is not None and all(_same(v, pv) or _same(v, knob.code) for v in vals):
        return "both forms" if any(_same(v, knob.code) for v in vals) else "paper form only"
    return "same" if all(_same(v, pv) for v in vals) else "differs"


def rows(script: str) -> list[dict]:
    """One row per knob and group of methods with the same paper value and the same tier values: knob, where,
    paper, ours, mark, why."""
    cfgs, out = configs(script), []
    for k in knobs(script):
        groups: dict = {}
        for c in cfgs:
            pv = paper_value(k, c.algo)
            if pv is _MISSING or not applies(k.key, c):
                continue
            g = groups.setdefault(method(c), {"pv": pv, "vals": []})
            g["vals"].append(ours(k.key, c))
        merged: dict = {}
        for name, g in groups.items():
            vals = g["vals"] if k.key != "seed" else [len(set(g["vals"]))]
            key = (_fmt(g["pv"]), _fmt(set(map(_hashable, vals))))
            merged.setdefault(key, {"names": [], "pv": g["pv"], "vals": vals})["names"].append(name)
        for m in merged.values():
            label = k.label + (f" ({', '.join(m['names'])})" if len(merged) > 1 or isinstance(k.paper, dict) else "")
            mk = mark(k, m["pv"], m["vals"])
            why = "" if mk == "same" else (k.code_note if mk in ("paper form only", "both forms") else k.why)
            if mk == "not stated" and k.code is not None and k.why:
                why = k.why
            uniq = sorted(set(map(_hashable, m["vals"])), key=_order)
            out.append({"knob": label, "where": k.where, "paper": _fmt(m["pv"]),
                        "ours": _fmt(uniq[0]) if len(uniq) == 1 else _fmt(set(uniq)), "mark": mk, "why": why})
    return out + horizon_rows(script)


def _hashable(v):
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


# ---- the horizon rule ---------------------------------------------------------------------------------------------
def _lr_last(lr, decay, rounds) -> float:
    """The learning rate at the last round by the trainer's own schedule (Run.lr_at)."""
    from fedlab_analysis.trainers.engine import Run
    return Run.lr_at(SimpleNamespace(cfg=SimpleNamespace(lr=lr, lr_decay=decay)), rounds - 1)


def horizon(script: str) -> dict:
    """{method: (paper's lr at its last round or None, the tier's, within HORIZON_FACTOR or None)}: None where the
    paper states no learning rate, decay or number of rounds."""
    paper = {k.key: k for k in knobs(script)}
    out = {}
    for c in configs(script):
        name = method(c)
        if name in out:
            continue
        pv = [paper_value(paper[k], c.algo) if k in paper else None for k in ("lr", "lr_decay", "rounds")]
        ok_values = all(isinstance(v, (int, float)) and v is not _MISSING for v in pv)
        p_last = _lr_last(*pv) if ok_values else None
        o_last = _lr_last(c.lr, c.lr_decay, c.rounds)
        ok = None if p_last is None else max(p_last / o_last, o_last / p_last) <= HORIZON_FACTOR
        out[name] = (p_last, o_last, ok)
    return out


def horizon_ok(script: str) -> bool | None:
    """True: every method's last-round learning rate in the tier is within HORIZON_FACTOR of the paper's; False:
    the script's claims are judged at a horizon shorter than the paper's (SHORT); None: the paper gives no schedule."""
    oks = [ok for _, _, ok in horizon(script).values()]
    return None if all(ok is None for ok in oks) else all(ok is not False for ok in oks)



def past_horizon(name: str, table: list[dict], tier) -> list[dict]:
    """The rows as judged at the tier's horizon. In a real tier whose script trains to a horizon shorter than the
    paper's (``settings.horizon_ok`` False: FedCM's 300 rounds against 4,000), a claim about the trained model
    (``Claim.at_convergence``) is not judged: its row keeps what was measured, its verdict is "not measured" with the
    reason. A claim about the course of training stays judged. The quick tier is not checked."""
    if C.tier_of(tier) == "quick" or horizon_ok(name) is not False:
        return table
    why = (f"{SHORT}: the tier's last-round learning rate is more than {HORIZON_FACTOR:g}x the "
           f"paper's, so a claim about the trained model is not judged here")
    return [{**r, **V.not_measured(C.CLAIMS[r["claim"]], why, r.get("n_seeds", 0))}
            if C.CLAIMS[r["claim"]].at_convergence and r["verdict"] != V.NOT_MEASURED else r for r in table]


def horizon_rows(script: str) -> list[dict]:
    merged: dict = {}
    for name, (p, o, ok) in horizon(script).items():
        key = (None if p is None else f"{p:.2g}", f"{o:.2g}", ok)
        merged.setdefault(key, []).append(name)
    out = []
    for (p, o, ok), names in merged.items():
        label = "learning rate at the last round" + (f" ({', '.join(names)})" if len(merged) > 1 else "")
        if ok is None:
            mk, why = "not stated", "the paper states no schedule to compare"
        elif ok:
            mk, why = "same", f"within a factor {HORIZON_FACTOR:g} of the paper's (the horizon rule)"
        else:
            mk, why = "differs", (f"{SHORT}: the tier's last-round learning rate is more than {HORIZON_FACTOR:g}x "
                                  f"the paper's, so its claims are judged before the paper's schedule has annealed")
        out.append({"knob": label, "where": "lr, decay and rounds above", "paper": p or "not stated", "ours": o,
                    "mark": mk if ok is not False else f"differs: {SHORT}", "why": why})
    return out


def horizon_marked() -> list[dict]:
    """The committed judged rows (not "not measured") of every script whose horizon is shorter than the paper's, in
    each real tier with a committed output, with whether the claim is about the trained model
    (``Claim.at_convergence``: the rule bites) or about the course of training. Read from the committed data.json
    files; no verdict is changed."""
    out = []
    for t in C.REAL:
        for s in ORDER:
            if horizon_ok(s) is not False or not _has(s, tier=t):
                continue
            for r in _committed(s, tier=t)["table"]:
                if r["verdict"] != V.NOT_MEASURED:
                    out.append({"tier": t, "script": s, "row": r["row"], "verdict": r["verdict"],
                                "trained model": C.CLAIMS[r["claim"]].at_convergence})
    return out


# ---- the controls, from the committed per-seed numbers ------------------------------------------------------------
def _path(script: str, root=None, tier=TIER) -> Path:
    return Path(root or C.OUT) / tier / script / "data.json"


def _committed(script: str, root=None, tier=TIER) -> dict:
    return json.loads(_path(script, root, tier).read_text())


def _has(script: str, root=None, tier=TIER) -> bool:
    return _path(script, root, tier).is_file()


def _outputs(script: str) -> str:
    """Whether each real tier's committed output of ``script`` ran under the code's settings, one clause a tier."""
    return "; ".join(f"{t}: {C.trained_under(script, t)[1]}" for t in C.REAL)


def machines(script: str, tier: str, root=None) -> str:
    """Where the runs of ``script``'s committed output in ``tier`` trained, counted from their ledger records
    (done.json's ``machine``, recorded from 30 Nov): float32 numbers differ between CPUs, so an output may mix
    machines. Runs named by curves.json; an output not trained under the current settings is not counted (its
    records may since have been replaced)."""
    from collections import Counter
    d = Path(root or C.OUT) / tier / script
    data = json.loads((d / "data.json").read_text()) if (d / "data.json").is_file() else None
    if data is None or not C.trained_under(script, tier, data)[0] or not (d / V.CURVES).is_file():
        return "not counted (no current output with curves)"
    n = Counter()
    for i in json.loads((d / V.CURVES).read_text())["runs"]:
        rec = Path(root or C.OUT) / "ledger" / tier / f"{i}.json.gz"
        done = json.loads(ledger.read(rec)["done.json"]) if rec.is_file() else {"machine": "no ledger record"}
        n[done.get("machine", "not recorded (before 30 Nov)")] += 1
    return ", ".join(f"{m}: {k}" for m, k in n.most_common())


CONTROLS = (   # (claim, what the control isolates, method arms, base arm); an arm: (script, its path, label)
    ("fedlesam.ctrl.s_scaffold", "FedLESAM-S's estimated perturbation over SCAFFOLD (FedLESAM Sec. 6.3, Table 4)",
     [("fedlesam_fig4_rho", f"fedlesam_s/{r}", f"FedLESAM-S, rho/eta_l = {r}") for r in ("0.01", "0.1", "1")],
     ("fedsmoo_fig3_surface", "runs/scaffold", "SCAFFOLD")),
    ("fedlesam.ctrl.d_feddyn", "FedLESAM-D's estimated perturbation over FedDyn (FedLESAM Sec. 6.3, Table 4)",
     [("fedlesam_fig3_surface", "runs/fedlesam-d", "FedLESAM-D")],
     ("fedsmoo_table8_ablation", "per_seed/feddyn", "FedDyn")),
    ("fedsmoo.ctrl.feddyn", "FedSMOO's corrected SAM over FedDyn (FedSMOO Table 8: SAM and its correction together)",
     [("fedsmoo_table8_ablation", "per_seed/fedsmoo", "FedSMOO")],
     ("fedsmoo_table8_ablation", "per_seed/feddyn", "FedDyn")),
    ("fedinit.ctrl.ri", "FedInit's RI over its base at equal rounds (FedInit Table 6)",
     [("fedinit_table6", f"acc/{k}", f"FedAvg +RI ({k.split('+')[1]})") for k in ("fedavg+ri", "fedavg+ri-code")],
     ("fedinit_table6", "acc/fedavg", "FedAvg")),
)


def _arm_scripts() -> set:
    return {a[0] for _, _, arms, base in CONTROLS for a in (*arms, base)}


def _arm(script: str, path: str, root, tier) -> tuple[list, list | None]:
    """An arm's per-seed test accuracies at ``path`` in ``script``'s committed data.json, and the runs they came
    from (``verdict.curve_runs``, from its curves.json, in seed order) where the file names them (``run_ids``),
    else None."""
    d = _committed(script, root, tier)
    v = d
    for k in path.split("/"):
        v = v[k]
    acc = [x["test_acc"] if isinstance(x, dict) else x for x in v]
    ids = d.get("run_ids", {}).get(path)
    if ids is None:
        return acc, None
    curves = json.loads((_path(script, root, tier).parent / V.CURVES).read_text())["runs"]
    return acc, V.curve_runs(curves, ids, f"{script}: {path}")


# What a run records, not what it computes (evaluation, checkpoints and probes leave the trajectory unchanged: the
# trainer's tests): a control's two arms may differ in these.
RECORDING = ("eval_every", "eval_train_samples", "eval_samples", "ckpt_every", "ckpt_keep", "keep_clients", "probe",
             "probe_every", "probe_steps", "quiet", "tensorboard")


def _configs(runs: list | None, root, tier) -> list | None:
    """Each run's config as its ledger record keeps it (``<root>/ledger/<tier>/<id>.json.gz``, key.json), in the
    order of ``runs``; None where a run has no record (trained before the ledger) or ``runs`` is None."""
    paths = [Path(root or C.OUT) / "ledger" / tier / f"{r['id']}.json.gz" for r in runs or ()]
    if not paths or not all(p.is_file() for p in paths):
        return None
    return [json.loads(ledger.read(p)["key.json"])["config"] for p in paths]


def unequal(a: dict, b: dict) -> list[str]:
    """The knobs on which a method's run ``a`` and its base's run ``b`` (two configs, one seed) differ beyond the
    methods themselves: every field but the algorithm, relaxed initialisation's switch, the execution and recording
    fields, and a hyper-parameter that not both read (``algos.uses``). A control isolates the method only where
    this is empty: the same seed, data, model, schedule, clipping and shared hyper-parameters."""
    reads = lambda c: set(algos.uses(c["algo"], c.get("ri", False), SimpleNamespace(**c)))   # noqa: E731
    both, skip = reads(a) & reads(b), {"algo", "ri", *EXECUTION, *RECORDING}
    return [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted({*a, *b})
            if k not in skip and (k not in algos.HYPER or k in both) and a.get(k) != b.get(k)]


def _settings_check(aruns, bruns, root, tier) -> tuple[str, list]:
    """Whether a control's arms were trained with equal settings, seed by seed, from their ledger records:
    ("same", []), ("differ", [knob a vs b, ...]) or ("not checked", []) where a run has no record."""
    ca, cb = _configs(aruns, root, tier), _configs(bruns, root, tier)
    if ca is None or cb is None or len(ca) != len(cb):
        return "not checked", []
    diff = sorted({d for x, y in zip(ca, cb) for d in unequal(x, y)})
    return ("differ", diff) if diff else ("same", [])


def _protocol(script: str, root, tier) -> int:
    """The settings protocol ``script``'s committed output in ``tier`` was trained under (1 before the record)."""
    return (_committed(script, root, tier).get("settings") or {"protocol": 1})["protocol"]


def controls(root=None, tier=TIER) -> list[dict]:
    """Each control row of ``tier`` whose arms' scripts all have a committed output there: the paired per-seed
    effect (method minus base, in points) with its 95% t interval, the relative reduction of test error
    (verdict.interval, verdict.relative) and its claim's verdict (verdict.decide), from the committed data.json and
    curves.json files under ``root`` (default paper_figures/out). Where both arms' files name their runs, the
    verdict is gated on their curves like any claim's; otherwise (outputs written before ``run_ids``) the arms are
    known only by their committed accuracies and no gate applies. Final test accuracy of the same seeds (one
    partition and client draws per seed), except FedInit's rows, which use Table 6's late-round accuracy.
    Two arms trained under different protocols are not compared: such a row has ``protocols`` and no verdict.
    Nor are two arms whose ledger records show settings that differ beyond the methods (``unequal``): such a row has
    ``unequal`` and no verdict. A compared row says under ``settings`` whether its arms' settings were checked equal
    ("same") or could not be ("not checked": a run trained before the ledger)."""
    out = []
    for cid, what, arms, (bs, bpath, blabel) in CONTROLS:
        if not all(_has(x, root, tier) for x in (bs, *(a[0] for a in arms))):
            continue
        base, bruns = _arm(bs, bpath, root, tier)
        for s, path, label in arms:
            protocols = sorted({_protocol(x, root, tier) for x in (s, bs)})
            if len(protocols) > 1:
                out.append({"control": what, "claim": cid, "row": f"{label} minus {blabel}", "from": f"{s} / {bs}",
                            "protocols": protocols, "verdict": None})
                continue
            a, aruns = _arm(s, path, root, tier)
            same, diff = _settings_check(aruns, bruns, root, tier)
            if diff:
                out.append({"control": what, "claim": cid, "row": f"{label} minus {blabel}", "from": f"{s} / {bs}",
                            "unequal": diff, "verdict": None})
                continue
            runs = [] if aruns is None or bruns is None else aruns + bruns
            eff = [x - y for x, y in zip(a, base)]
            m, lo, hi = V.interval(eff)
            side = "covers 0" if lo <= 0 <= hi else ("above 0" if lo > 0 else "below 0")
            out.append({"control": what, "claim": cid, "row": f"{label} minus {blabel}", "from": f"{s} / {bs}",
                        "n": len(eff),
                        "mean": 100 * m, "lo": 100 * lo, "hi": 100 * hi, "relative": V.relative(eff, base),
                        "interval": side, "settings": same, "arms": (list(a), list(base)),
                        "curves": {r["id"]: r["curve"] for r in runs},
                        "verdict": {**V.decide(C.CLAIMS[cid], eff, runs), "row": f"control: {label} minus {blabel}"}})
    return out


def control_data(root=None, tier=TIER) -> dict:
    """A tier's controls as a data.json holds them (``verdict.audit`` reads them into the tier's family): their
    verdict rows, for the relative size each row's two arms, and the curves of the runs the gated rows name."""
    rows = [r for r in controls(root, tier) if r["verdict"]]
    return {"table": [r["verdict"] for r in rows],
            "arms": {f"{i}{k}": v for i, r in enumerate(rows) for k, v in zip("ab", r["arms"])},
            "run_curves": {k: v for r in rows for k, v in r["curves"].items()}}


# ---- rendering ----------------------------------------------------------------------------------------------------
HEAD = ("Generated by `python -m paper_figures.settings` from the code (each run of `paper_figures.{s}.run_list` "
        "resolved by `common.config` in the {t} tier) and from the paper's stated settings "
        "(`paper_figures/settings.py`). Do not edit by hand.")


def _cell(x) -> str:
    return str(x).replace("|", "\\|")


def render(script: str) -> str:
    rs = rows(script)
    counts = {m: sum(r["mark"].split(":")[0] == m for r in rs) for m in
              ("same", "differs", "not stated", "paper form only", "both forms")}
    ok = horizon_ok(script)
    lines = [f"# {script}: the paper's settings and the {TIER} tier's", "", HEAD.format(s=script, t=TIER), "",
             "Rows: " + ", ".join(f"{n} {m}" for m, n in counts.items() if n) + ". Horizon: "
             + {True: "the tier's last-round learning rate is within a factor 10 of the paper's.",
                False: f"**{SHORT}**: the claims are judged before the paper's schedule has annealed.",
                None: "not checked (the paper states no schedule)."}[ok], "",
             "Committed outputs (`out/<tier>/" + script + "/data.json`): " + _outputs(script) + ".", "",
             "Runs of the committed outputs by machine (their ledger records): "
             + "; ".join(f"{t}: {machines(script, t)}" for t in C.REAL) + ".", "",
             "| knob | paper | where | MNIST tier | mark | why / the authors' code |", "|---|---|---|---|---|---|"]
    for r in rs:
        ours_ = r["ours"] if isinstance(r["ours"], str) else f"{r['ours']:.2g}"
        lines.append(f"| {_cell(r['knob'])} | {_cell(r['paper'])} | {_cell(r['where'] or '-')} | {_cell(ours_)} | "
                     f"{r['mark']} | {_cell(r['why'])} |")
    return "\n".join(lines) + "\n"


def render_index() -> str:
    lines = [f"# The papers' settings and the {TIER} tier's, per script", "",
             "Generated by `python -m paper_figures.settings`; one file per script that trains tier runs. A row "
             "marked \"differs\" is not run at the paper's value: the scripts' verdicts hold for the tier's settings.",
             "The fmnist tier runs the same settings on Fashion-MNIST (`tiers.protocol`).",
             "", "| script | same | differs | not stated | code forms (paper only / both) | horizon | "
             "committed outputs |",
             "|---|---|---|---|---|---|---|"]
    for s in ORDER:
        rs = rows(s)
        n = lambda m: sum(r["mark"].split(":")[0] == m for r in rs)     # noqa: E731
        hz = {True: f"within {HORIZON_FACTOR:g}x of the paper's", False: SHORT, None: "not stated"}[horizon_ok(s)]
        lines.append(f"| [{s}]({s}.md) | {n('same')} | {n('differs')} | {n('not stated')} | "
                     f"{n('paper form only')} / {n('both forms')} | {hz} | {_outputs(s)} |")
    lines += ["", "## Committed rows judged at a horizon shorter than the paper's", "",
              f"The horizon rule (`settings.horizon_ok`: the learning rate at the tier's last round within a factor "
              f"{HORIZON_FACTOR:g} of the paper's at its last round) marks these committed rows; their stored verdicts "
              f"are unchanged and stand for the tier's horizon only. A claim about the trained model is the one the "
              f"rule bites; a claim about the course of training is marked as well.", "",
              "| tier | script | row | committed verdict | claim about the trained model |", "|---|---|---|---|---|"]
    for r in horizon_marked():
        lines.append(f"| {r['tier']} | {r['script']} | {r['row']} | {r['verdict']} | "
                     f"{'yes' if r['trained model'] else 'no'} |")
    return "\n".join(lines) + "\n"


def render_controls() -> str:
    lines = ["# Controls computable from the committed per-seed numbers", "",
             "Generated by `python -m paper_figures.settings` from the committed "
             "`paper_figures/out/<tier>/*/data.json` files alone (no run trained). Each row pairs two arms seed by "
             "seed (the same partition and client "
             "draws); the effect is in points of test accuracy with its 95% t interval (`verdict.interval`) and the "
             "relative reduction of test error (`verdict.relative`). The verdict is its control claim's in "
             "`claims.py` by the one rule (`verdict.decide`), raw here; `out/verdicts.md` shows it adjusted in its "
             "paper's family (script *controls*). Where both arms' data.json files name their runs (`run_ids`), the "
             "verdict is gated on those runs' committed curves (`curves.json`) like any claim's. Outputs written "
             "before `run_ids` (the protocol-1 MNIST ones) give the arms' accuracies alone, so no convergence gate "
             "applies to their controls. Two arms trained under different protocols (one script redrawn, the other not "
             "yet) are not compared. Column *settings*: \"same\" where both arms' ledger records (`out/ledger`) show "
             "the same settings seed by seed beyond the methods themselves (`settings.unequal`: all but the "
             "algorithm, relaxed initialisation's switch, execution and recording fields, and a hyper-parameter not "
             "both read); \"not checked\" where a run predates the ledger. Arms whose settings differ are not "
             "compared. Where one script trains both arms (FedSMOO and FedDyn in "
             "fedsmoo_table8_ablation, FedAvg and +RI in fedinit_table6), its own control row holds the same "
             "effect, and the family counts it once. A control appears in a tier once all its arms' scripts have "
             "a committed output there. Each arm's script: "
             + "; ".join(sorted({f"{s}: {_outputs(s)}" for s in _arm_scripts()})) + "."]
    for t in C.REAL:
        rows = controls(tier=t)
        lines += ["", f"## {t}", ""]
        if not rows:
            lines.append("None yet: no control has all its arms' scripts committed in this tier.")
            continue
        lines += ["| control | row | from | settings | seeds | effect (points) | 95% interval | rel. error reduction "
                  "| interval | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if not r["verdict"]:
                why = (f"arms trained under protocols {' and '.join(map(str, r['protocols']))}" if "protocols" in r
                       else f"arms' settings differ ({'; '.join(r['unequal'])})")
                lines.append(f"| {r['control']} | {r['row']} | {r['from']} | | | | | | | not compared: {_cell(why)} |")
                continue
            lines.append(f"| {r['control']} | {r['row']} | {r['from']} | {r['settings']} | {r['n']} | "
                         f"{r['mean']:+.3f} | [{r['lo']:+.3f}, {r['hi']:+.3f}] | {r['relative']:+.1%} | "
                         f"{r['interval']} | {r['verdict']['verdict']} |")
    return "\n".join(lines) + "\n"


def outputs() -> dict:
    """{file name under OUT: text} of every generated file."""
    out = {f"{s}.md": render(s) for s in ORDER}
    out["README.md"] = render_index()
    out["controls.md"] = render_controls()
    return out


def stale(root=None) -> list[str]:
    """The generated files whose committed text under ``root`` (default OUT) differs from what the code gives now
    (missing ones included), as paths from the repository root where they lie in it."""
    root = Path(root or OUT)
    repo = C.OUT.parents[1]
    show = lambda p: str(p.relative_to(repo)) if p.is_relative_to(repo) else str(p)      # noqa: E731
    return [show(root / n) for n, text in outputs().items()
            if not (root / n).exists() or (root / n).read_text() != text]


def main(argv=None) -> int:
    from fedlab_analysis.cli import guard
    from fedlab_analysis.options import ArgParser
    from fedlab_analysis.rundir import write_text

    @guard("python -m paper_figures.settings")
    def run(argv):
        p = ArgParser(prog="python -m paper_figures.settings",
                      description="Write each script's table of the paper's settings beside the MNIST tier's")
        p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every stale file")
        args = p.parse_args(argv)
        if args.check:
            bad = stale()
            for b in bad:
                print(f"stale: {b}")
            print("the settings tables are current" if not bad else "run `python -m paper_figures.settings`")
            return 1 if bad else 0
        OUT.mkdir(parents=True, exist_ok=True)
        for name, text in outputs().items():
            write_text(OUT / name, text)
        print(f"wrote {len(ORDER) + 2} files under {OUT.relative_to(C.OUT.parents[1])}")
        return 0
    return run(argv)


if __name__ == "__main__":
    raise SystemExit(main())
