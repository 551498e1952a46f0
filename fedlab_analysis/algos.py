"""The algorithms by name and the hyper-parameters each one reads: one table that the validation layer
(config.py) and the trainers (trainers/algorithms.py) both read, so the configuration never imports the engine.

A hyper-parameter's type and general range are declared with its RunConfig field; an entry here narrows the
range where one algorithm fixes it (FedCM's alpha in (0, 1], FedALS' alpha a whole number >= 1), and
``when=(field, value)`` where the algorithm reads it only in one setting (FedLESAM-S reads lamb only with
--lesam-s-scale code). A hyper-parameter given to an algorithm that does not read it is refused
(``config.refuse_unused``); tests/test_reliability.py checks that each one changes the run exactly where declared.
"""
from __future__ import annotations

SERVER = {"server_lr": {}}                                   # the default FedAvg aggregation w + eta_g mean Delta
SAM = {"rho": {}}
LESAM = {"rho": {}, "lesam_source": {}, "lesam_first": {}}
KRULE = {"k_rule": {"when": ("local_steps", None)}}          # SCAFFOLD's c_i, FedCM's Delta: K from epochs
CM = {"alpha": {"hi": 1}, "fedcm_wd": {}, **KRULE}           # FedCM Algorithm 2: alpha in (0, 1]
DYN = {"lamb": {}}                                           # FedDyn's aggregation replaces eta_g
ALS = {"alpha": {"lo": 1, "lo_open": False, "integer": True}, "tau": {}, "phi_layers": {}}   # FedALS Algorithm 1
RI = {"beta": {}, "ri_agg": {}}                              # relaxed initialisation: fedinit, or any with --ri

USES = {
    "fedavg":          {**SERVER},
    "fedavgm":         {**SERVER, "server_momentum": {}},
    "fedadam":         {**SERVER, "beta1": {}, "beta2": {}, "eps": {}},
    "fedprox":         {**SERVER, "mu": {}},
    "scaffold":        {**SERVER, **KRULE},
    "feddyn":          {**DYN},
    "fedcm":           {**SERVER, **CM},
    "fedsam":          {**SERVER, **SAM},
    "mofedsam":        {**SERVER, **SAM, **CM},
    "fedgamma":        {**SERVER, **SAM, **KRULE},
    "fedspeed":        {**SAM, **DYN},
    "fedsmoo":         {**SAM, **DYN, "smoo_server": {}},
    "fedlesam":        {**SERVER, **LESAM},
    "fedlesam-s":      {**SERVER, **LESAM, **KRULE, "lesam_s_scale": {},
                        "lamb": {"when": ("lesam_s_scale", "code")}},
    "fedlesam-d":      {**LESAM, **DYN},
    "fedals":          {**ALS},
    "fedals-scaffold": {**ALS},
    "fedinit":         {**SERVER, **RI},
}
NAMES = tuple(USES)
HYPER = tuple(dict.fromkeys(n for u in [*USES.values(), RI] for n in u))   # every algorithm-specific field


def uses(algo: str, ri: bool = False, cfg=None) -> dict:
    """The hyper-parameters ``algo`` reads (with --ri, relaxed initialisation's too) -> per-algorithm range;
    with ``cfg``, only those read in its setting (``when``)."""
    u = {**USES[algo], **(RI if ri else {})}
    return {k: r for k, r in u.items() if cfg is None or "when" not in r or getattr(cfg, r["when"][0]) == r["when"][1]}


def condition(algo: str, name: str) -> str:
    """'' or the setting in which ``algo`` reads ``name``, in flag words."""
    field, value = USES.get(algo, {}).get(name, {}).get("when", (None, None))
    if field is None:
        return ""
    flag = "--" + field.replace("_", "-")
    return f"without {flag}" if value is None else f"with {flag} {value}"


def users(name: str) -> list[str]:
    """The algorithms that read hyper-parameter ``name``."""
    return [a for a, u in USES.items() if name in u]
