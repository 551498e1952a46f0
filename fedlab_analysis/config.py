"""RunConfig: every knob of a run in one visible block, with the papers' names and defaults, and its cross-field
checks.

Defaults follow the authors' simulator (FL-Simulator, the code released with FedSMOO and FedInit) where the papers
are silent; an algorithm's own hyper-parameter left at ``None`` takes that paper's default (``algos.TABLE``).
``--help`` prints every field with its range and default.

Adding a field is one line: ``name: float = _f(0.1, "help", lo=0, lo_open=True)`` (``_f`` is ``rules.field``): the
annotation gives the type and the keywords its rule (rules.py). ``rules.check_value`` applies both to flags, YAML
(``options.load_yaml``), resumed config.json files, checkpoints' configs and sweep cells (``validate_dict``). Which
algorithm reads which hyper-parameter, any narrower range it needs and its default are declared in ``algos.py``;
the flags are generated from the fields by ``options.add_arguments``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from . import algos, rules
from .errors import UserError
from .rules import field as _f, where as _where


def _names(module, attr, extra=()):
    """Choices read from a registry when first needed (the registries import torch; this module does not)."""
    def names():
        import importlib
        return (*getattr(importlib.import_module(f"fedlab_analysis.{module}"), attr), *extra)
    return names


@dataclass
class RunConfig:
    # ---- what runs --------------------------------------------------------------------------------
    algo: str = _f("fedavg", "algorithm (see --algo list below)", choices=algos.TABLE)
    dataset: str = _f("digits", "digits | mnist1d | synthetic | gaussian (embedded) or cifar10 | cifar100 | "
                      "mnist | fmnist | svhn (from --data-dir); memory:NAME for Dataset.from_tensors data",
                      choices=_names("data", "DATASETS"), prefix="memory:")
    model: str = _f("mlp", "logreg | mlp | cnn | cnn1d | resnet18gn | resnet20 | vgg11",
                    choices=_names("models", "MODELS"))
    model_kwargs: dict = _f(dict, "extra model arguments as JSON, e.g. '{\"widths\": [64]}'", kind="json")
    init: str | None = _f(None, "start from these weights instead of the seeded initialisation: a fedlab_analysis "
                          "checkpoint (file or run directory) or a plain state_dict .pt file")
    data_dir: str | None = _f(None, "directory holding the official files of a real dataset (never downloaded)")
    seed: int = _f(0, "seed of every random draw (partition, sampling, minibatches, init)", lo=0)
    dtype: str = _f("float32", "float32 | float64 (float64 for exact checks)", choices=("float32", "float64"))
    device: str = _f("auto", "auto (CUDA when available) | cpu | cuda | cuda:N", pattern=r"auto|cpu|cuda(:\d+)?")
    client_parallel: str = _f("auto", "local steps of the active clients: vmap (all at once, torch.func.vmap) | "
                              "loop (one after the other) | auto (vmap, except loop for models with BatchNorm running "
                              "statistics and for convolutional models on a CPU, where a vmapped convolution is "
                              "slower); config.json records the choice made", choices=("auto", "loop", "vmap"))
    state_device: str = _f("run", "where the per-client state tables (SCAFFOLD c_i, FedDyn h_i, FedSMOO mu_i, "
                           "FedLESAM's old models, last local models) live: run (the run's device) | cpu (host "
                           "memory, pinned on a CUDA run; the active rows move once per round)", choices=("run", "cpu"))
    client_chunk: int | None = _f(None, "active clients trained at once: a round takes its active clients in chunks "
                                  "of at most this many, one chunk after the other, each chunk's [C, P] buffers "
                                  "reused and the server's means taken over all of them (agrees with the round of all "
                                  "at once to float round-off, not bit for bit); default: all at once where the memory "
                                  "plan (--dry-run) finds room, else the largest chunk that fits. FedALS and runs "
                                  "with training hooks take all at once", lo=1)
    precision: str = _f("fp32", "training arithmetic: fp32 | tf32 (CUDA matmuls in TF32) | bf16 (autocast of the local "
                        "forward/backward to bfloat16); evaluation, aggregation and state stay in --dtype",
                        choices=("fp32", "tf32", "bf16"))
    compile: bool = _f(False, "torch.compile the vmapped per-step gradient (needs --client-parallel vmap; the first "
                       "round pays the compilation, tens of seconds on a CPU; agrees with eager to float tolerance, "
                       "not bit for bit)")
    threads: int = _f(1, "torch CPU threads set by the command-line entry points (1 is fastest for the small "
                      "models of CPU demos; raise it for CNNs)", lo=1,
                      hi=1024)                         # torch segfaults on absurd counts
    # ---- federation --------------------------------------------------------------------------------
    clients: int = _f(20, "number of clients m", lo=1)
    active_ratio: float = _f(0.5, "fraction of clients active per round", lo=0, lo_open=True, hi=1)
    sampling: str = _f("bernoulli", "bernoulli: each client active with prob. p, redrawn if none (the "
                       "simulator); fixed: exactly round(p*m) clients without replacement",
                       choices=("bernoulli", "fixed"))
    partition: str = _f("dirichlet", "iid | dirichlet | labeldir | pathological | sorted | shards | natural",
                        choices=_names("data", "PARTITIONS", ("natural",)))
    dir_alpha: float = _f(0.3, "Dirichlet concentration of the dirichlet / labeldir partitions", lo=0,
                          lo_open=True)
    replacement: bool = _f(False, "dirichlet/pathological: refill exhausted classes (the simulator) or not")
    classes_per_client: int = _f(2, "pathological: classes per client", lo=1)
    shards_per_client: int = _f(2, "shards: label-sorted shards per client (McMahan et al.)", lo=1)
    holdout: int = _f(0, "training samples held out of every client (a seeded draw made before partitioning) and "
                      "evaluated as holdout_loss / holdout_acc in each metrics row: a validation split for choosing "
                      "hyper-parameters; 0 = none", lo=0)
    het_noise: float = _f(0.0, "FedInit Sec. 5.1's heterogeneity noise on the training images (image data sets; "
                          "fedlab_analysis/data/noise.py): per client a Gaussian gain N(1, s^2) per channel, per "
                          "client and class a Gaussian brightness offset N(0, s^2) in [0, 1] pixel units; 0 = off",
                          lo=0)
    min_size: int = _f(10, "labeldir: redraw until every client holds at least this many samples", lo=0)
    # ---- local work --------------------------------------------------------------------------------
    rounds: int = _f(30, "communication rounds T", lo=1)
    local_epochs: float = _f(5, "local epochs E (K_i = E * ceil(n_i / B) steps); ignored with --local-steps",
                             lo=0, lo_open=True, hi=1000)
    local_steps: int | None = _f(None, "local steps K per round (overrides --local-epochs)", lo=1,
                                 hi=10**6)
    batch_size: int = _f(50, "minibatch size B", lo=1)
    lr: float = _f(0.1, "local learning rate eta_l", lo=0, lo_open=True)
    lr_decay: float = _f(0.998, "per-round multiplicative decay of eta_l", lo=0, lo_open=True, hi=1)
    wd: float = _f(1e-3, "weight decay, added to the local direction as wd * x", lo=0)
    clip: float = _f(0.0, "clip the local gradient to this norm (0 = off; the simulator uses 10)", lo=0)
    local_momentum: float = _f(0.0, "local heavy-ball momentum, as torch's SGD(momentum=m) on each client: the "
                               "buffer takes the clipped gradient plus weight decay and is kept by the client across "
                               "rounds, never sent (FedALS Sec. 7: 0.9); 0 = plain SGD", lo=0, hi=1, hi_open=True)
    server_lr: float | None = _f(None, "server learning rate eta_g (1.0; FedAdam 0.1)", lo=0,
                                   lo_open=True)
    augment: bool = _f(False, "flip + pad-4 crop on image data, batched on the data's device")
    # ---- algorithm hyper-parameters (papers' names; None = that paper's default) -----------------
    rho: float | None = _f(None, "SAM radius rho (FedSAM family; FedSMOO's r): 0.1, FedSAM and "
                              "FedLESAM 0.01 (their papers' values)", lo=0)
    alpha: float | None = _f(None, "FedCM/MoFedSAM client-momentum alpha (0.1); FedALS adaptation alpha (10)",
                             lo=0, lo_open=True)
    beta: float | None = _f(None, "relaxed-initialisation beta (FedInit, 0.1); FedInit Sec. 5 (Fig. 2) also runs "
                            "beta < 0, a start moved towards the client's last model, as the contrast; -1 starts at "
                            "it", lo=-1)
    lamb: float | None = _f(None, "dynamic-regulariser coefficient lamb = 1/beta_FedDyn (FedDyn family, 0.1)",
                            lo=0)
    mu: float | None = _f(None, "FedProx proximal coefficient mu (0.01)", lo=0)
    tau: int | None = _f(None, "FedALS: local steps between head synchronisations (5)", lo=1)
    phi_layers: int | None = _f(None, "FedALS: number of layers in the representation phi (default: all "
                                "but the last)", lo=1)
    server_momentum: float | None = _f(None, "FedAvgM server momentum (0.9)", lo=0, hi=1,
                                         hi_open=True)
    beta1: float = _f(0.9, "FedAdam beta1", lo=0, hi=1, hi_open=True)
    beta2: float = _f(0.99, "FedAdam beta2", lo=0, hi=1, hi_open=True)
    eps: float = _f(0.01, "FedAdam epsilon", lo=0, lo_open=True)
    ri: bool = _f(False, "relaxed initialisation (FedInit): start at w + beta (w - w_i^last)")
    ri_agg: str = _f("final_avg", "RI aggregation: final_avg (Alg. 1 line 16) | delta_from_init (the code)",
                       choices=("final_avg", "delta_from_init"))
    ri_anchor: str = _f("global", "with RI, the centre of FedProx's proximal term and of the FedDyn/FedSpeed/FedSMOO/"
                        "FedLESAM-D dual correction: global (the paper, w^t) | start (the code: the relaxed start)",
                        choices=("global", "start"))
    # ---- where the authors' code differs from the paper (paper form is the default) ---------------
    lesam_source: str = _f("client_old", "FedLESAM perturbation: client_old (paper, w_i^old - w) | "
                           "last_global_update (the code's source: the last broadcast global update) | "
                           "released_code (the code exactly, with its flat-vector indexing bug)",
                           choices=("client_old", "last_global_update", "released_code"))
    lesam_s_scale: str = _f("paper", "FedLESAM-S correction: paper (c - c_i, Alg. 3) | code (lamb (c - c_i), the "
                            "released loss term lamb <w, c - c_i>)", choices=("paper", "code"))
    lesam_first: str = _f("zero", "FedLESAM first participation: zero (no perturbation) | "
                          "global_update | literal (w_i^old = 0)", choices=("zero", "global_update", "literal"))
    smoo_server: str = _f("paper", "FedSMOO server perturbation: paper (mean of mu_i - s_hat_i) | code (mean mu_i)",
                          choices=("paper", "code"))
    k_rule: str = _f("own", "K that turns a model update into a gradient (SCAFFOLD c_i, FedCM Delta): own (each "
                     "client's K_i) | client0 (local_epochs * n_0 / B for everyone: the code)",
                     choices=("own", "client0"))
    fedcm_wd: str = _f("inside", "FedCM weight decay: inside alpha*g (keeps Lemma 4.1) | outside (the code)",
                      choices=("inside", "outside"))
    # ---- bookkeeping -------------------------------------------------------------------------------
    eval_every: int = _f(1, "evaluate every k rounds (and at the last round)", lo=1)
    eval_train_samples: int = _f(2000, "size of the fixed train subset used for train_loss/train_acc", lo=1)
    eval_samples: int = _f(0, "between the --eval-every rounds, also evaluate every round on a fixed test subsample "
                           "of this size (row field test_samples says which); 0 = off", lo=0)
    ckpt_every: int = _f(0, "save every k rounds (0 = only last.pt at the end); see --ckpt-keep", lo=0)
    ckpt_keep: str = _f("all", "what --ckpt-every leaves: all (ckpt/round_XXXX.pt of the model and [P] state every k "
                        "rounds, plus last.pt with everything a resume needs) | last (only last.pt, rewritten every "
                        "k rounds)", choices=("all", "last"))
    keep_clients: bool = _f(False, "also keep every client's last local model (an m x P table) and store it in "
                            "checkpoints; kept anyway where the algorithm (RI, FedALS) or a --probe reads it")
    probe: str | None = _f(None, "probes watching training, comma-separated (consensus, drift, sharpness); their "
                           "numbers go into metrics.jsonl")
    probe_every: int = _f(1, "run the --probe hooks every k rounds", lo=0)
    probe_steps: str | None = _f(None, "local steps at which step-level probes record, e.g. '0,5,10' or 'all' "
                                 "(default: the last step)")
    quiet: bool = _f(False, "no progress bar")
    on_divergence: str = _f("stop", "non-finite loss or parameters: stop (exit 3; last.pt keeps the last finite "
                            "checkpoint) | continue (mark the round in metrics.jsonl and go on)",
                            choices=("stop", "continue"))
    tensorboard: bool = _f(False, "also log each metrics row to OUT/tb for TensorBoard (needs the tensorboard extra; "
                           "metrics.jsonl stays the record)")

    # ------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "RunConfig":
        """From a mapping of fields (keys with - or _), each value checked against its field's rule."""
        return cls(**check(d, source))

    def hp(self, name: str):
        """An algorithm hyper-parameter with the paper default filled in for this algorithm."""
        v = getattr(self, name)
        if v is not None:
            return v
        return algos.default(self.algo, name)

    def validate(self, source: str | dict | None = None) -> "RunConfig":
        """Every field's type and range, then the algorithm's parameters in the algorithm's own ranges: the one
        place the rules are applied (flags, YAML, resumed config.json and sweep cells all end here). ``source``
        names where the values came from in the message (default: the flags, ``--name``; a dict: per field)."""
        rules.validate(self, source)
        uses = algos.uses(self.algo, self.ri)
        for name, rule in uses.items():             # the paper default too, in the algorithm's own range
            rules.check_value(_FIELDS[name], self.hp(name), _where(source, name), rule,
                              f" for {self.algo}" if rule else "")
        if self.ri_anchor == "start" and not (self.ri or self.algo == "fedinit"):
            raise UserError(f"{_where(source, 'ri_anchor')}: 'start' is the relaxed start point; it needs --ri "
                            f"(or --algo fedinit)")
        for name in ("init", "data_dir"):            # a path given empty is no path (it is not "not given")
            if getattr(self, name) is not None and not str(getattr(self, name)).strip():
                raise UserError(f"{_where(source, name)}: an empty path; give a path or leave it out")
        if self.ri_anchor == "start" and self.algo not in algos.ANCHORED:
            raise UserError(f"{_where(source, 'ri_anchor')}: 'start' moves the centre of a proximal or dual term, "
                            f"which {self.algo} has none of; it acts with {', '.join(algos.ANCHORED)}")
        if self.precision != "fp32" and self.dtype != "float32":
            raise UserError(f"{_where(source, 'precision')}: {self.precision} needs dtype float32 (got {self.dtype})")
        return self


_FIELDS = {f.name: f for f in fields(RunConfig)}


def check(d: dict, source: str) -> dict:
    """Each value of a mapping of RunConfig fields from ``source`` (a YAML file, a resumed config.json, a sweep
    cell) checked against its field's rule (``rules.check``); keys may use - or _. Returns the mapping with _ keys."""
    return rules.check(RunConfig, d, source)


def refuse_unused(cfg: RunConfig, given, source: str | dict | None = None) -> None:
    """A hyper-parameter the user gave (``given``: names) that ``cfg.algo`` does not read would do nothing:
    refused in one line naming the algorithms that use it. (Python callers may share one settings dict across
    algorithms; the entry points call this on what the user typed.)"""
    uses = algos.uses(cfg.algo, cfg.ri, cfg)
    for name in given:
        name = name.replace("-", "_")
        if name in algos.HYPER and name not in uses and getattr(cfg, name) is not None:
            if algos.condition(cfg.algo, name):
                raise UserError(f"{_where(source, name)}: {cfg.algo} uses {name} only "
                                f"{algos.condition(cfg.algo, name)}")
            users = algos.users(name) + (["any algorithm with --ri"] if name in algos.RI else [])
            raise UserError(f"{_where(source, name)}: {cfg.algo} does not use {name}; it is used by "
                            f"{', '.join(users)}")


def validate_dict(d: dict, source: str = "config") -> RunConfig:
    """The whole layer on a mapping (a sweep's grid cell, a YAML file): types, ranges, the algorithm's
    parameters, no parameter the algorithm ignores; every message names ``source`` and the key."""
    cfg = RunConfig(**check(d, source)).validate(source)
    refuse_unused(cfg, d, source)
    return cfg


# How and where a run executes, not what it computes (beyond float tolerance: loop == vmap is tested): run names
# and caches ignore these, and config.json records the device and the parallel mode as resolved.
EXECUTION = ("quiet", "threads", "tensorboard", "device", "client_parallel", "state_device", "compile", "client_chunk")
