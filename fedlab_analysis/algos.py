"""The algorithm table: per algorithm, the builder of its parts, the hyper-parameters it reads with their defaults
and ranges, and its paper: the one place an algorithm is defined. The validation layer (config.py), the command
line, sweeps and the trainers read it; it imports nothing of the engine (and no torch), so the configuration never
imports the engine.

A row's ``parts`` is ``(cfg, P) -> (perturbation rule, [parts])``: ``P`` is trainers/parts.py, handed in by the
trainer (trainers/algorithms.py ``build``, which runs the parts' hooks in order and appends RelaxedInit with --ri).

A row's ``hyper`` maps each hyper-parameter the algorithm reads to its rule there: ``{}`` keeps the range declared
with the RunConfig field; ``lo``/``hi``/``integer`` narrow it (FedCM's alpha in (0, 1], FedALS' alpha a whole
number >= 1); ``when=(field, value)`` says the algorithm reads it only in that setting (FedLESAM-S reads lamb only
with --lesam-s-scale code). A hyper-parameter left unset takes the row's ``defaults``, else ``DEFAULTS``. One given
to an algorithm that does not read it is refused (``config.refuse_unused``); tests/test_reliability.py checks that
each one changes the run exactly where declared.

``NAMES``, ``USES``, ``HYPER`` and ``ANCHORED`` are views of ``TABLE``, computed when read, so a row added at run
time (``register``) is an algorithm everywhere at once, the trainer included. Adding an algorithm from existing
parts is one row; tests/test_algos.py registers one at run time and trains it as the worked example.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Algo:
    """One row of the table."""
    parts: Callable     # (cfg, P) -> (perturbation rule, [parts]); P: trainers/parts.py (module docstring)
    hyper: dict         # hyper-parameter -> its rule for this algorithm (module docstring)
    paper: str
    defaults: dict = field(default_factory=dict)      # this algorithm's own defaults, over DEFAULTS


# the paper default of each hyper-parameter (RunConfig field left at None), for every algorithm without its own
DEFAULTS = {"server_lr": 1.0, "rho": 0.1, "alpha": 0.1, "beta": 0.1, "lamb": 0.1, "mu": 0.01, "tau": 5,
            "server_momentum": 0.9}

SERVER = {"server_lr": {}}                                   # the default FedAvg aggregation w + eta_g mean Delta
SAM = {"rho": {}}
LESAM = {"rho": {}, "lesam_source": {}, "lesam_first": {}}
KRULE = {"k_rule": {"when": ("local_steps", None)}}          # SCAFFOLD's c_i, FedCM's Delta: K from epochs
CM = {"alpha": {"hi": 1}, "fedcm_wd": {}, **KRULE}           # FedCM Algorithm 2: alpha in (0, 1]
DYN = {"lamb": {}}                                           # FedDyn's aggregation replaces eta_g
ALS = {"alpha": {"lo": 1, "lo_open": False, "integer": True}, "tau": {}, "phi_layers": {}}   # FedALS Algorithm 1
RI = {"beta": {}, "ri_agg": {}}                              # relaxed initialisation: fedinit, or any with --ri
ADAM = {"beta1": {}, "beta2": {}, "eps": {}}
LESAM_S = {"lesam_s_scale": {}, "lamb": {"when": ("lesam_s_scale", "code")}}

def _sam(c, P): return P.SAM(c.hp("rho"))
def _lesam(c, P): return P.LESAM(c.hp("rho"), c.lesam_source, c.lesam_first)
def _cm(c, P): return P.Momentum(c.hp("alpha"), c.fedcm_wd == "inside")
def _dyn(c, P): return P.Dyn(c.hp("lamb"))
def _als(c, P, scaffold): return P.ALS(c.hp("tau"), c.hp("alpha"), c.active_ratio, scaffold)


TABLE = {   # name: Algo(parts: (cfg, P) -> (perturbation rule, [parts]), hyper-parameters read, paper, own defaults)
    "fedavg":     Algo(lambda c, P: (P.Plain(), []), {**SERVER}, "McMahan et al. 2017"),
    "fedavgm":    Algo(lambda c, P: (P.Plain(), [P.ServerMomentum(c.hp("server_momentum"))]),
                       {**SERVER, "server_momentum": {}}, "Hsu et al. 2019"),
    "fedadam":    Algo(lambda c, P: (P.Plain(), [P.ServerAdam()]), {**SERVER, **ADAM}, "Reddi et al. 2021",
                       {"server_lr": 0.1}),
    "fedprox":    Algo(lambda c, P: (P.Plain(), [P.Prox(c.hp("mu"))]), {**SERVER, "mu": {}}, "Li et al. 2020"),
    "scaffold":   Algo(lambda c, P: (P.Plain(), [P.Scaffold()]), {**SERVER, **KRULE},
                       "Karimireddy et al. 2020 (option II)"),
    "feddyn":     Algo(lambda c, P: (P.Plain(), [_dyn(c, P)]), {**DYN}, "Acar et al. 2021"),
    "fedcm":      Algo(lambda c, P: (P.Plain(), [_cm(c, P)]), {**SERVER, **CM}, "Xu et al. 2021, Alg. 2"),
    "fedsam":     Algo(lambda c, P: (_sam(c, P), []), {**SERVER, **SAM}, "Qu et al. 2022",
                       {"rho": 0.01}),                        # FedSMOO Table 5 and FedLESAM Sec. 6.1 (README table)
    "mofedsam":   Algo(lambda c, P: (_sam(c, P), [_cm(c, P)]), {**SERVER, **SAM, **CM}, "Qu et al. 2022"),
    "fedgamma":   Algo(lambda c, P: (_sam(c, P), [P.Scaffold()]), {**SERVER, **SAM, **KRULE}, "Dai et al. 2023"),
    "fedspeed":   Algo(lambda c, P: (_sam(c, P), [_dyn(c, P)]), {**SAM, **DYN}, "Sun et al. 2023 (as the simulator)"),
    "fedsmoo":    Algo(lambda c, P: (P.SMOO(c.hp("rho")), [_dyn(c, P)]), {**SAM, **DYN, "smoo_server": {}},
                       "Sun et al. 2023, Alg. 1"),
    "fedlesam":   Algo(lambda c, P: (_lesam(c, P), []), {**SERVER, **LESAM}, "Fan et al. 2024, Alg. 1",
                       {"rho": 0.01}),
    "fedlesam-s": Algo(lambda c, P: (_lesam(c, P), [P.Scaffold(c.hp("lamb") if c.lesam_s_scale == "code" else 1.0)]),
                       {**SERVER, **LESAM, **KRULE, **LESAM_S}, "Fan et al. 2024, Alg. 3"),
    "fedlesam-d": Algo(lambda c, P: (_lesam(c, P), [_dyn(c, P)]), {**LESAM, **DYN}, "Fan et al. 2024, Alg. 4"),
    "fedals":     Algo(lambda c, P: (P.Plain(), [_als(c, P, False)]), {**ALS}, "Gholami & Seferoglu, Alg. 1",
                       {"alpha": 10}),
    "fedals-scaffold": Algo(lambda c, P: (P.Plain(), [_als(c, P, True)]), {**ALS}, "Gholami & Seferoglu, Alg. 4",
                            {"alpha": 10}),
    "fedinit":    Algo(lambda c, P: (P.Plain(), [P.RelaxedInit(c.hp("beta"), c.ri_agg)]), {**SERVER, **RI},
                       "Sun, Shen, Tao 2023, Alg. 1"),
}


def register(name: str, row: Algo) -> None:
    """Add an algorithm to the table: a row is all it needs, validation, defaults, --help, sweeps and training."""
    if name in TABLE:
        raise ValueError(f"algorithm {name!r} is already in the table")
    if not set(row.defaults) <= set(row.hyper):
        raise ValueError(f"{name}: a default for a hyper-parameter it does not read: "
                         f"{sorted(set(row.defaults) - set(row.hyper))}")
    TABLE[name] = row


def __getattr__(attr: str):
    """The views of TABLE (module docstring): NAMES, USES (name -> hyper), HYPER (every algorithm-specific field)
    and ANCHORED (the algorithms with a proximal term (mu) or a dual correction (lamb, read in every setting), whose
    centre --ri-anchor moves: trainers/parts.py Prox, Dyn)."""
    if attr == "NAMES":
        return tuple(TABLE)
    if attr == "USES":
        return {a: row.hyper for a, row in TABLE.items()}
    if attr == "HYPER":
        return tuple(dict.fromkeys(n for u in [*(row.hyper for row in TABLE.values()), RI] for n in u))
    if attr == "ANCHORED":
        return tuple(a for a, row in TABLE.items()
                     if "mu" in row.hyper or ("lamb" in row.hyper and "when" not in row.hyper["lamb"]))
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def default(algo: str, name: str):
    """The default of hyper-parameter ``name`` for ``algo``: the row's own, else DEFAULTS (None: none)."""
    row = TABLE.get(algo)
    return row.defaults[name] if row is not None and name in row.defaults else DEFAULTS.get(name)


def defaulted() -> set:
    """Every hyper-parameter with a default somewhere in the table (``sweep.resolved`` fills them in)."""
    return {*DEFAULTS, *(k for row in TABLE.values() for k in row.defaults)}


def uses(algo: str, ri: bool = False, cfg=None) -> dict:
    """The hyper-parameters ``algo`` reads (with --ri, relaxed initialisation's too) -> per-algorithm range;
    with ``cfg``, only those read in its setting (``when``)."""
    u = {**TABLE[algo].hyper, **(RI if ri else {})}
    return {k: r for k, r in u.items() if cfg is None or "when" not in r or getattr(cfg, r["when"][0]) == r["when"][1]}


def condition(algo: str, name: str) -> str:
    """'' or the setting in which ``algo`` reads ``name``, in flag words."""
    row = TABLE.get(algo)
    setting, value = (row.hyper if row else {}).get(name, {}).get("when", (None, None))
    if setting is None:
        return ""
    flag = "--" + setting.replace("_", "-")
    return f"without {flag}" if value is None else f"with {flag} {value}"


def users(name: str) -> list[str]:
    """The algorithms that read hyper-parameter ``name``."""
    return [a for a, row in TABLE.items() if name in row.hyper]
