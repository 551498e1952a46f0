"""RunConfig: every knob of a run in one visible block, with the papers' names and defaults.

Defaults follow the authors' simulator (FL-Simulator, notes/anchors.md section 1.1) where the papers
are silent; an algorithm's own hyper-parameter left at ``None`` takes that paper's default
(``ALGO_DEFAULTS``). ``--help`` prints every field with its default and meaning.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field, fields

from .errors import UserError


def _f(default, help, **kw):
    if default is dict:
        return field(default_factory=dict, metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class RunConfig:
    # ---- what runs --------------------------------------------------------------------------------
    algo: str = _f("fedavg", "algorithm (see --algo list below)")
    dataset: str = _f("digits", "digits | mnist1d | synthetic | gaussian (embedded) or cifar10 | cifar100 | "
                      "mnist | fmnist | svhn (from --data-dir)")
    model: str = _f("mlp", "logreg | mlp | cnn | cnn1d | resnet18gn | resnet20 | vgg11")
    model_kwargs: dict = _f(dict, "extra model arguments as JSON, e.g. '{\"widths\": [64]}'", kind="json")
    data_dir: str | None = _f(None, "directory holding the official files of a real dataset (never downloaded)")
    seed: int = _f(0, "seed of every random draw (partition, sampling, minibatches, init)")
    dtype: str = _f("float32", "float32 | float64 (float64 for exact checks)")
    device: str = _f("auto", "auto (CUDA when available) | cpu | cuda | cuda:N")
    client_parallel: str = _f("auto", "local steps of the active clients: vmap (all at once, torch.func.vmap) | "
                              "loop (one after the other) | auto (vmap, except loop for models with BatchNorm running "
                              "statistics and for convolutional models on a CPU, where a vmapped convolution is "
                              "slower); config.json records the choice made")
    state_device: str = _f("run", "where the per-client state tables (SCAFFOLD c_i, FedDyn h_i, FedSMOO mu_i, "
                           "FedLESAM's old models, last local models) live: run (the run's device) | cpu (host "
                           "memory, pinned on a CUDA run; the active rows move once per round)")
    precision: str = _f("fp32", "training arithmetic: fp32 | tf32 (CUDA matmuls in TF32) | bf16 (autocast of the local "
                        "forward/backward to bfloat16); evaluation, aggregation and state stay in --dtype")
    threads: int = _f(1, "torch CPU threads set by the command-line entry points (1 is fastest for the small "
                      "models of CPU demos; raise it for CNNs)")
    # ---- federation --------------------------------------------------------------------------------
    clients: int = _f(20, "number of clients m")
    active_ratio: float = _f(0.5, "fraction of clients active per round, in (0, 1]")
    sampling: str = _f("bernoulli", "bernoulli: each client active with prob. p, redrawn if none (the "
                       "simulator); fixed: exactly round(p*m) clients without replacement")
    partition: str = _f("dirichlet", "iid | dirichlet | labeldir | pathological | sorted | shards | natural")
    dir_alpha: float = _f(0.3, "Dirichlet concentration of the dirichlet / labeldir partitions")
    replacement: bool = _f(False, "dirichlet/pathological: refill exhausted classes (the simulator) or not")
    classes_per_client: int = _f(2, "pathological: classes per client")
    shards_per_client: int = _f(2, "shards: label-sorted shards per client (McMahan et al.)")
    min_size: int = _f(10, "labeldir: redraw until every client holds at least this many samples")
    # ---- local work --------------------------------------------------------------------------------
    rounds: int = _f(30, "communication rounds T")
    local_epochs: float = _f(5, "local epochs E (K_i = E * ceil(n_i / B) steps); ignored with --local-steps")
    local_steps: int | None = _f(None, "local steps K per round (overrides --local-epochs)")
    batch_size: int = _f(50, "minibatch size B")
    lr: float = _f(0.1, "local learning rate eta_l")
    lr_decay: float = _f(0.998, "per-round multiplicative decay of eta_l")
    wd: float = _f(1e-3, "weight decay, added to the local direction as wd * x")
    clip: float = _f(0.0, "clip the local gradient to this norm (0 = off; the simulator uses 10)")
    server_lr: float | None = _f(None, "server learning rate eta_g (1.0; FedAdam 0.1)")
    augment: bool = _f(False, "flip + pad-4 crop on image data, batched on the data's device")
    # ---- algorithm hyper-parameters (papers' names; None = that paper's default) -----------------
    rho: float | None = _f(None, "SAM radius rho (FedSAM family; FedSMOO's r)")
    alpha: float | None = _f(None, "FedCM/MoFedSAM client-momentum alpha (0.1); FedALS adaptation alpha (10)")
    beta: float | None = _f(None, "relaxed-initialisation beta (FedInit, 0.1)")
    lamb: float | None = _f(None, "dynamic-regulariser coefficient lamb = 1/beta_FedDyn (FedDyn family, 0.1)")
    mu: float | None = _f(None, "FedProx proximal coefficient mu (0.01)")
    tau: int | None = _f(None, "FedALS: local steps between head synchronisations (5)")
    phi_layers: int | None = _f(None, "FedALS: number of layers in the representation phi (default: all "
                                "but the last)")
    server_momentum: float | None = _f(None, "FedAvgM server momentum (0.9)")
    beta1: float = _f(0.9, "FedAdam beta1")
    beta2: float = _f(0.99, "FedAdam beta2")
    eps: float = _f(0.01, "FedAdam epsilon")
    ri: bool = _f(False, "relaxed initialisation (FedInit): start at w + beta (w - w_i^last)")
    ri_agg: str = _f("final_avg", "RI aggregation: final_avg (Alg. 1 line 16) | delta_from_init (the code)")
    # ---- where the authors' code differs from the paper (paper form is the default) ---------------
    lesam_source: str = _f("client_old", "FedLESAM perturbation: client_old (paper, w_i^old - w) | "
                           "last_global_update (the code's source: the last broadcast global update) | "
                           "released_code (the code exactly, with its flat-vector indexing bug: anchors.md 1.2)")
    lesam_s_scale: str = _f("paper", "FedLESAM-S correction: paper (c - c_i, Alg. 3) | code (lamb (c - c_i), the "
                            "released loss term lamb <w, c - c_i>)")
    lesam_first: str = _f("zero", "FedLESAM first participation: zero (no perturbation) | "
                          "global_update | literal (w_i^old = 0)")
    smoo_server: str = _f("paper", "FedSMOO server perturbation: paper (mean of mu_i - s_hat_i) | code (mean mu_i)")
    k_rule: str = _f("own", "K that turns a model update into a gradient (SCAFFOLD c_i, FedCM Delta): own (each "
                     "client's K_i) | client0 (local_epochs * n_0 / B for everyone: the code)")
    fedcm_wd: str = _f("inside", "FedCM weight decay: inside alpha*g (keeps Lemma 4.1) | outside (the code)")
    # ---- bookkeeping -------------------------------------------------------------------------------
    eval_every: int = _f(1, "evaluate every k rounds (and at the last round)")
    eval_train_samples: int = _f(2000, "size of the fixed train subset used for train_loss/train_acc")
    eval_samples: int = _f(0, "between the --eval-every rounds, also evaluate every round on a fixed test subsample "
                           "of this size (row field test_samples says which); 0 = off")
    ckpt_every: int = _f(0, "write ckpt/round_XXXX.pt every k rounds (0 = only last.pt)")
    keep_clients: bool = _f(True, "keep every client's last local model (an m x P table) and store it in "
                            "checkpoints; RI and FedALS always keep it")
    probe: str | None = _f(None, "probes watching training, comma-separated (consensus, drift, sharpness); their "
                           "numbers go into metrics.jsonl")
    probe_every: int = _f(1, "run the --probe hooks every k rounds")
    probe_steps: str | None = _f(None, "local steps at which step-level probes record, e.g. '0,5,10' or 'all' "
                                 "(default: the last step)")
    quiet: bool = _f(False, "no progress bar")

    # ------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"unknown config key(s) {', '.join(unknown)}; see --help for the valid names")
        return cls(**d)

    def hp(self, name: str):
        """An algorithm hyper-parameter with the paper default filled in for this algorithm."""
        v = getattr(self, name)
        if v is not None:
            return v
        return ALGO_DEFAULTS.get(self.algo, {}).get(name, DEFAULTS.get(name))

    def validate(self) -> "RunConfig":
        from .data import DATASETS, PARTITIONS
        from .models import MODELS
        from .trainers import ALGORITHMS

        def bad(flag, msg):
            raise UserError(f"--{flag.replace('_', '-')}: {msg}")

        if self.algo not in ALGORITHMS:
            bad("algo", f"unknown {self.algo!r}; choose one of {', '.join(sorted(ALGORITHMS))}")
        if self.dataset not in DATASETS:
            bad("dataset", f"unknown {self.dataset!r}; choose one of {', '.join(sorted(DATASETS))}")
        if self.model not in MODELS:
            bad("model", f"unknown {self.model!r}; choose one of {', '.join(sorted(MODELS))}")
        if self.partition not in (*PARTITIONS, "natural"):
            bad("partition", f"unknown {self.partition!r}; choose one of {', '.join((*PARTITIONS, 'natural'))}")
        for name in ("lr", "batch_size", "rounds", "clients", "eval_every", "eval_train_samples", "threads"):
            if not getattr(self, name) > 0:
                bad(name, f"must be > 0 (got {getattr(self, name)})")
        if not 0 < self.active_ratio <= 1:
            bad("active_ratio", f"must be in (0, 1] (got {self.active_ratio})")
        if self.dir_alpha <= 0:
            bad("dir_alpha", f"must be > 0 (got {self.dir_alpha})")
        if not 0 < self.lr_decay <= 1.0 + 1e-12:
            bad("lr_decay", f"must be in (0, 1] (got {self.lr_decay})")
        for name in ("wd", "clip", "ckpt_every", "probe_every"):
            if getattr(self, name) < 0:
                bad(name, f"must be >= 0 (got {getattr(self, name)})")
        if self.local_steps is not None and self.local_steps <= 0:
            bad("local_steps", f"must be > 0 (got {self.local_steps})")
        if self.local_steps is None and self.local_epochs <= 0:
            bad("local_epochs", f"must be > 0 (got {self.local_epochs})")
        if self.hp("server_lr") <= 0:
            bad("server_lr", f"must be > 0 (got {self.server_lr})")
        choices = {"sampling": ("bernoulli", "fixed"), "dtype": ("float32", "float64"),
                   "client_parallel": ("auto", "loop", "vmap"), "state_device": ("run", "cpu"),
                   "precision": ("fp32", "tf32", "bf16"),
                   "ri_agg": ("final_avg", "delta_from_init"),
                   "lesam_source": ("client_old", "last_global_update", "released_code"),
                   "lesam_s_scale": ("paper", "code"),
                   "lesam_first": ("zero", "global_update", "literal"), "smoo_server": ("paper", "code"),
                   "k_rule": ("own", "client0"), "fedcm_wd": ("inside", "outside")}
        for name, ok in choices.items():
            if getattr(self, name) not in ok:
                bad(name, f"unknown {getattr(self, name)!r}; choose one of {', '.join(ok)}")
        for name in ("rho", "mu", "lamb"):
            v = self.hp(name)
            if v is not None and v < 0:
                bad(name, f"must be >= 0 (got {v})")
        if self.algo in ("fedcm", "mofedsam") and not 0 < self.hp("alpha") <= 1:
            bad("alpha", f"FedCM's alpha must be in (0, 1] (got {self.hp('alpha')})")
        if self.algo.startswith("fedals"):
            if self.hp("alpha") < 1 or float(self.hp("alpha")) != int(self.hp("alpha")):
                bad("alpha", f"FedALS's alpha must be an integer >= 1 (got {self.hp('alpha')})")
            if self.hp("tau") <= 0:
                bad("tau", f"must be > 0 (got {self.hp('tau')})")
        if self.precision != "fp32" and self.dtype != "float32":
            bad("precision", f"{self.precision} needs --dtype float32 (got {self.dtype})")
        if isinstance(self.eval_samples, bool) or not isinstance(self.eval_samples, int) or self.eval_samples < 0:
            bad("eval_samples", f"must be a whole number >= 0 (got {self.eval_samples!r})")
        if not self.device.startswith(("auto", "cpu", "cuda")):
            bad("device", f"unknown {self.device!r}; use auto, cpu or cuda[:N]")
        return self


DEFAULTS = {"server_lr": 1.0, "rho": 0.1, "alpha": 0.1, "beta": 0.1, "lamb": 0.1, "mu": 0.01, "tau": 5,
            "server_momentum": 0.9}
ALGO_DEFAULTS = {
    "fedals": {"alpha": 10}, "fedals-scaffold": {"alpha": 10},
    "fedadam": {"server_lr": 0.1},
}


# ---- command line ---------------------------------------------------------------------------------
def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, named --field-name, defaults and help from the dataclass."""
    defaults = RunConfig()
    for f in fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        h = f"{f.metadata['help']} (default: {default})".replace("%", "%%")
        if f.metadata.get("kind") == "json":
            p.add_argument(flag, type=json.loads, default=None, help=h)
        elif f.type in ("bool",) or isinstance(default, bool):
            p.add_argument(flag, nargs="?", const=True, type=_parse_bool, default=None, help=h)
        else:
            typ = {"int": int, "float": float, "str": str}
            t = f.type.split(" | ")[0] if isinstance(f.type, str) else f.type
            p.add_argument(flag, type=typ.get(t, str), default=None, help=h)


def from_args(args: argparse.Namespace, base: dict | None = None) -> RunConfig:
    """base (a YAML/JSON config) overridden by the flags that were given."""
    d = dict(base or {})
    for f in fields(RunConfig):
        v = getattr(args, f.name, None)
        if v is not None:
            d[f.name] = v
    return RunConfig.from_dict(d)


def load_yaml(path: str) -> dict:
    import yaml
    try:
        with open(path) as fh:
            d = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        raise UserError(f"--config: no file {path!r}") from None
    except yaml.YAMLError as e:
        raise UserError(f"--config: {path!r} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise UserError(f"--config: {path!r} must hold a mapping of RunConfig fields")
    return {k.replace("-", "_"): v for k, v in d.items()}
