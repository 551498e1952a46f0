"""RunConfig: every knob of a run in one visible block, with the papers' names and defaults, and the one
validation layer every entry point goes through.

Defaults follow the authors' simulator (FL-Simulator, the code released with FedSMOO and FedInit) where the papers
are silent; an algorithm's own hyper-parameter left at ``None`` takes that paper's default (``ALGO_DEFAULTS``).
``--help`` prints every field with its range and default.

Adding a field is one line: ``name: float = _f(0.1, "help", lo=0, lo_open=True)``. The annotation gives the type
(int, float, str, bool, dict; ``| None`` allows null), the keywords its rule (``lo``/``hi``/``lo_open``/``hi_open``,
``choices``, ``prefix`` (also any string starting with it), ``pattern``);
``check_value`` applies both to flags, YAML (``load_yaml``), resumed config.json files,
checkpoints' configs and sweep cells (``validate_dict``). Which algorithm reads which hyper-parameter, and any
narrower range it needs, is declared in ``algos.py``.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass, field, fields

from . import algos
from .errors import UserError


def _f(default, help, **rule):
    """A field: default, help, and its rule: ``lo``/``hi`` (+ ``lo_open``/``hi_open``), ``choices`` (a tuple, or
    a callable returning the names), ``integer`` (a float that must be whole), ``pattern`` (a regex for strings),
    ``kind="json"``. The type comes from the annotation (int, float, str, bool, dict; ``| None`` allows null)."""
    if default is dict:
        return field(default_factory=dict, metadata={"help": help, **rule})
    return field(default=default, metadata={"help": help, **rule})


def _names(module, attr, extra=()):
    """Choices read from a registry when first needed (the registries import torch; this module does not)."""
    def names():
        import importlib
        return (*getattr(importlib.import_module(f"fedlab_analysis.{module}"), attr), *extra)
    return names


@dataclass
class RunConfig:
    # ---- what runs --------------------------------------------------------------------------------
    algo: str = _f("fedavg", "algorithm (see --algo list below)", choices=algos.NAMES)
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
        return ALGO_DEFAULTS.get(self.algo, {}).get(name, DEFAULTS.get(name))

    def validate(self, source: str | dict | None = None) -> "RunConfig":
        """Every field's type and range, then the algorithm's parameters in the algorithm's own ranges: the one
        place the rules are applied (flags, YAML, resumed config.json and sweep cells all end here). ``source``
        names where the values came from in the message (default: the flags, ``--name``; a dict: per field)."""
        for f in fields(self):
            setattr(self, f.name, check_value(f.name, getattr(self, f.name), _where(source, f.name)))
        uses = algos.uses(self.algo, self.ri)
        for name, rule in uses.items():             # the paper default too, in the algorithm's own range
            check_value(name, self.hp(name), _where(source, name), rule, f" for {self.algo}" if rule else "")
        if self.ri_anchor == "start" and not (self.ri or self.algo == "fedinit"):
            raise UserError(f"{_where(source, 'ri_anchor')}: 'start' is the relaxed start point; it needs --ri "
                            f"(or --algo fedinit)")
        for name in ("init", "data_dir"):            # a path given empty is no path (it is not "not given")
            if getattr(self, name) is not None and not str(getattr(self, name)).strip():
                raise UserError(f"{_where(source, name)}: an empty path; give a path or leave it out")
        if self.ri_anchor == "start" and self.algo not in ANCHORED:
            raise UserError(f"{_where(source, 'ri_anchor')}: 'start' moves the centre of a proximal or dual term, "
                            f"which {self.algo} has none of; it acts with {', '.join(ANCHORED)}")
        if self.precision != "fp32" and self.dtype != "float32":
            raise UserError(f"{_where(source, 'precision')}: {self.precision} needs dtype float32 (got {self.dtype})")
        return self


# ---- the validation layer: one rule per field, applied to every entry point ------------------------------
_FIELDS = {f.name: f for f in fields(RunConfig)}
_WORDS = {"int": "a whole number", "float": "a finite number", "str": "a string", "bool": "true or false",
          "dict": "a mapping"}


def _where(source: str | dict | None, name: str) -> str:
    """How a message names a field: ``--name`` (a flag), or ``SOURCE: name``; ``source`` may map names to
    sources (values merged from a file and from flags)."""
    source = source.get(name) if isinstance(source, dict) else source
    return "--" + name.replace("_", "-") if source is None else f"{source}: {name}"


def _type(name: str) -> tuple[str, bool]:
    """(base type, nullable) from the field's annotation, e.g. 'float | None' -> ('float', True)."""
    t = _FIELDS[name].type
    parts = [p.strip() for p in (t if isinstance(t, str) else t.__name__).split("|")]
    return parts[0], "None" in parts


def describe(rule: dict) -> str:
    """A rule as words: 'in (0, 1]', '>= 0', 'a whole number >= 1', 'one of a, b'."""
    lo, hi = rule.get("lo"), rule.get("hi")
    whole = "a whole number " if rule.get("integer") else ""
    if lo is not None and hi is not None:
        return f"{whole}in {'(' if rule.get('lo_open') else '['}{lo}, {hi}{')' if rule.get('hi_open') else ']'}"
    if lo is not None:
        return f"{whole}{'>' if rule.get('lo_open') else '>='} {lo}"
    if hi is not None:
        return f"{whole}{'<' if rule.get('hi_open') else '<='} {hi}"
    if rule.get("choices"):
        return "one of " + ", ".join(_choices(rule))
    return whole.strip()


INT_MAX = 2 ** 63 - 1      # every whole number ends up in a 64-bit integer (torch, numpy): larger ones are refused


def _too_big(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT_MAX


def _in_range(v, rule: dict) -> bool:
    lo, hi = rule.get("lo"), rule.get("hi")
    return not ((lo is not None and (v < lo or (rule.get("lo_open") and v == lo)))
                or (hi is not None and (v > hi or (rule.get("hi_open") and v == hi)))
                or (rule.get("integer") and v != int(v)))


def arg_type(base: type, **rule):
    """An argparse ``type=`` applying a rule in the words of the RunConfig fields, for flags outside RunConfig
    (the probes' and theory's): ``p.add_argument("--samples", type=arg_type(int, lo=1))``; floats must be finite."""
    def parse(s: str):
        try:
            v = base(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {_WORDS[base.__name__]} (got {s!r})") from None
        if base is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be {_WORDS['float']} (got {s!r})")
        if _too_big(v):
            raise argparse.ArgumentTypeError(f"must be at most {INT_MAX} in size (got {s!r})")
        if not _in_range(v, rule):
            raise argparse.ArgumentTypeError(f"must be {describe(rule)} (got {s!r})")
        return v
    parse.base, parse.rule = base, rule               # read back by the fuzz test to generate bad values
    return parse


def _choices(rule) -> tuple:
    c = rule["choices"]
    return tuple(c() if callable(c) else c)


def check_value(name: str, v, where: str, narrow: dict | None = None, why: str = ""):
    """One field's value against its declared type and rule (narrowed by an algorithm's, ``narrow``); returns it
    as the field's type (an int where a float is expected becomes a float). Raises one UserError line."""
    base, nullable = _type(name)
    rule = {**_FIELDS[name].metadata, **(narrow or {})}
    got = f"(got {v!r})"
    if base not in _WORDS:                          # a type this layer does not know: checked by its own block
        return v
    if v is None:
        if nullable:
            return None
        raise UserError(f"{where}: must be {_WORDS[base]}, not null")
    if base == "float" and isinstance(v, str):      # PyYAML reads 1e-3 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "str": isinstance(v, str), "bool": isinstance(v, bool), "dict": isinstance(v, dict)}[base]
    if not ok:
        raise UserError(f"{where}: must be {_WORDS[base]} {got}")
    if base == "float":
        v = float(v)
        if not math.isfinite(v):
            raise UserError(f"{where}: must be {_WORDS[base]} {got}")
    if _too_big(v):
        raise UserError(f"{where}: must be at most {INT_MAX} in size {got}")
    if base in ("int", "float") and not _in_range(v, rule):
        raise UserError(f"{where}: must be {describe(rule)}{why} {got}")
    if base == "str" and "choices" in rule and v not in _choices(rule) and \
            not (rule.get("prefix") and v.startswith(rule["prefix"])):
        raise UserError(f"{where}: unknown {v!r}; choose one of {', '.join(_choices(rule))}")
    if base == "str" and "pattern" in rule and not re.fullmatch(rule["pattern"], v.strip().lower()):
        raise UserError(f"{where}: {v!r} is not valid; use {_FIELDS[name].metadata['help'].split(' (')[0]}")
    return v


def check(d: dict, source: str) -> dict:
    """Check each value of a mapping of RunConfig fields from ``source`` (a YAML file, a resumed config.json, a
    sweep cell) against its field's type and rule; keys may use - or _. Returns the mapping with _ keys."""
    if not isinstance(d, dict):
        raise UserError(f"{source}: must hold a mapping of RunConfig fields (got {type(d).__name__})")
    out = {}
    for k, v in d.items():
        name = k.replace("-", "_") if isinstance(k, str) else k
        if name not in _FIELDS:
            near = difflib.get_close_matches(str(name), _FIELDS, n=1)
            raise UserError(f"{source}: unknown key {k!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                            + "; see --help for the valid names")
        out[name] = check_value(name, v, f"{source}: {k}")
    return out


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
# the algorithms with a proximal term (mu) or a dual correction (lamb, read in every setting): --ri-anchor moves
# their centre (trainers/parts.py: Prox, Dyn); for every other algorithm it has nothing to move
ANCHORED = tuple(a for a, u in algos.USES.items() if "mu" in u or ("lamb" in u and "when" not in u["lamb"]))
EXECUTION = ("quiet", "threads", "tensorboard", "device", "client_parallel", "state_device", "compile", "client_chunk")

DEFAULTS = {"server_lr": 1.0, "rho": 0.1, "alpha": 0.1, "beta": 0.1, "lamb": 0.1, "mu": 0.01, "tau": 5,
            "server_momentum": 0.9}
ALGO_DEFAULTS = {
    "fedals": {"alpha": 10}, "fedals-scaffold": {"alpha": 10},
    "fedadam": {"server_lr": 0.1},
    "fedsam": {"rho": 0.01}, "fedlesam": {"rho": 0.01},    # FedSMOO Table 5 and FedLESAM Sec. 6.1 (README table)
}


# ---- command line ---------------------------------------------------------------------------------
def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """The one ``--help`` formatter of every entry point: each default printed once, as "(default: X)", and
    nothing for a flag whose help already states its default or that has none (None, off)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if "default" in h or action.default in (None, False, argparse.SUPPRESS):
            return h
        return super()._get_help_string(action)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, named --field-name, defaults, ranges and help from the dataclass."""
    defaults = RunConfig()
    for f in fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        rng = describe({k: v for k, v in f.metadata.items() if k != "choices"})
        default = getattr(defaults, f.name)          # None: the help says what happens (a paper default, off)
        said = [rng] * bool(rng) + [f"default: {default}"] * (default is not None
                                                           and "default" not in f.metadata["help"])
        h = f"{f.metadata['help']} ({'; '.join(said)})" if said else f.metadata["help"]
        base, _ = _type(f.name)
        typ = {"int": int, "float": float, "dict": json.loads, "bool": _parse_bool}.get(base, str)
        p.add_argument(flag, type=typ, default=None, help=h.replace("%", "%%"),
                       **({"nargs": "?", "const": True} if base == "bool" else {}))


def from_args(args: argparse.Namespace, base: dict | None = None) -> RunConfig:
    """``base`` (fields already checked: a YAML file, a resumed config.json) overridden by the flags given;
    call ``.validate()`` on the result."""
    flags = {f.name: getattr(args, f.name) for f in fields(RunConfig) if getattr(args, f.name, None) is not None}
    return RunConfig(**{**(base or {}), **flags})


def read_yaml(path: str, flag: str = "--config", what: str = "RunConfig fields") -> dict:
    """A YAML (or JSON) file holding a mapping, unchecked (a sweep file reads its parts itself); one UserError line
    for a missing, unreadable, binary or non-UTF-8 file, bad YAML, or a file that holds no mapping."""
    import yaml
    where = f"{flag} {path}"
    try:
        with open(path, encoding="utf-8") as fh:
            d = yaml.safe_load(fh)
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{where}: is a directory; give a YAML file of {what}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: is not UTF-8 text (byte {e.start}); save it as UTF-8 YAML") from None
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{where}: is not valid YAML ({' '.join(str(e).split())[:200]})") from None
    d = {} if d is None else d
    if not isinstance(d, dict):
        raise UserError(f"{where}: must hold a mapping of {what} (got {type(d).__name__})")
    return d


def load_yaml(path: str, flag: str = "--config") -> dict:
    """A YAML (or JSON) file of RunConfig fields, every value checked (``read_yaml``, then ``check``)."""
    return check(read_yaml(path, flag), f"{flag} {path}")
