"""Parts own their state: each part declares its slots, the engine allocates them into ``part.state``, a part can
write only the names it declared, no two parts of an algorithm share a name, round constants are the part's
attributes (None outside a round), and a checkpoint's flat ``algo_state`` keys go back to their owners."""
import pytest
import torch

from fedlab_analysis import algos
from fedlab_analysis.trainers import ALGORITHMS
from fedlab_analysis.trainers.algorithms import Algorithm, owners
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import restore, to_checkpoint, train
from fedlab_analysis.trainers.parts import Part, Plain, ServerAdam, ServerMomentum
from fedlab_analysis.trainers.state import Slot

EXTRA = {a: dict(active_ratio=1.0, model="mlp") for a in ("fedals", "fedals-scaffold")}


@pytest.mark.parametrize("ri", [False, True])
def test_every_algorithm_names_its_state_once(tiny_cfg, ri):
    for a in algos.NAMES:
        if ri and a.startswith("fedals"):
            continue
        algo = ALGORITHMS[a](tiny_cfg(algo=a, ri=ri, **EXTRA.get(a, {})))
        names = [s.name for p in algo.parts for s in p.slots]
        assert len(names) == len(set(names)) == len(algo.owner), a
        assert len({p.name for p in algo.parts}) == len(algo.parts), a


def test_two_parts_cannot_write_one_name(tiny_cfg):
    """ServerMomentum and ServerAdam both call their first moment m: one algorithm cannot hold both, and where
    each sits in its own algorithm, each m is its own tensor."""
    with pytest.raises(ValueError, match="server_momentum and server_adam both declare the state 'm'"):
        owners([ServerMomentum(0.9), ServerAdam()])
    cfg = tiny_cfg(algo="fedavgm")
    with pytest.raises(ValueError, match="both declare"):
        Algorithm(cfg, Plain(), [ServerMomentum(0.9), ServerAdam()])
    run = Run(tiny_cfg(algo="fedadam"))
    adam = run.algo.parts[1]
    with pytest.raises(AttributeError, match="cannot set state 'c'"):
        adam.state.c = torch.zeros(3)                            # only its declared m and v
    with pytest.raises(TypeError):
        run.state["m"] = torch.zeros(3)                          # the run's mapping is read-only


def test_the_engine_allocates_each_declared_slot(tiny_cfg):
    class Toy(Part):
        name = "toy"
        slots = (Slot("tab", "table"), Slot("vec"), Slot("flags", "clients", dtype="bool"), Slot("w0", init="w"))

    cfg = tiny_cfg()
    run = Run(cfg, algo=Algorithm(cfg, Plain(), [Toy()]))
    st = run.algo.parts[1].state
    P = run.space.P
    assert st.tab.shape == (run.m, P) and st.vec.shape == (P,) and st.flags.dtype == torch.bool
    assert torch.equal(st.w0, run.w) and list(run.state) == ["tab", "vec", "flags", "w0"]
    run.round()
    with pytest.raises(ValueError, match="belongs to another Run"):   # its parts hold this run's state
        Run(cfg, algo=run.algo)


def test_round_constants_live_on_the_part_for_the_round(tiny_cfg):
    run = Run(tiny_cfg(algo="scaffold"))
    sc = run.algo.parts[1]
    assert sc.corr is None and sc.c_i is None
    seen = []
    run.callbacks.append(lambda ev, r, step, x: ev == "step" and seen.append(sc.corr.shape))
    ctx = run.round()
    assert seen and seen[0] == (ctx.n, run.space.P)
    run.release(ctx)
    assert sc.corr is None and sc.c_i is None                    # cleared at the round's end


@pytest.mark.parametrize("algo", ["fedsmoo", "fedlesam", "fedadam", "fedals-scaffold"])
def test_checkpoint_keys_go_back_to_their_owners(tiny_cfg, algo):
    """The checkpoint keeps state names flat (unique within an algorithm, and what probes read:
    algo_state['s'], ['last_update']); restore maps each key to the part that owns it (Algorithm.owner)."""
    cfg = tiny_cfg(algo=algo, rounds=2, **EXTRA.get(algo, {}))
    a = train(cfg)
    ck = to_checkpoint(a, None)
    b = Run(cfg)
    restore(b, ck)
    for k, v in ck["algo_state"].items():
        part = b.algo.owner[k]
        assert torch.equal(getattr(part.state, k).cpu(), v), k
        assert any(s.name == k for s in part.slots)
    bad = {**ck, "algo_state": {**ck["algo_state"], "nope": torch.zeros(1)}}
    with pytest.raises(Exception, match="does not fit"):
        restore(Run(cfg), bad)


# ---- the read-only views callbacks receive (trainers/views.py) ----------------------------------------------
def test_callbacks_get_read_only_views(tiny_cfg):
    run = Run(tiny_cfg(algo="fedsam", active_ratio=1.0))
    got = []

    def cb(event, r, step, x):
        if event == "step":
            assert step.extra["delta"] is step.perturbation is run.algo.perturbation
            got.append((step.t, step.k, step.perturbation.shape, r.w.shape))
            for obj, name in ((r, "w"), (r, "t"), (step, "k"), (step, "lr")):
                with pytest.raises(AttributeError, match="read-only"):
                    setattr(obj, name, 0)
            with pytest.raises(AttributeError, match="has no 'algo'"):
                r.algo                                       # noqa: B018  (the mutable parts are not shown)
            with pytest.raises(TypeError):
                step.extra["delta"] = None

    run.callbacks.append(cb)
    run.round()
    assert got == [(0, k, (run.m, run.space.P), (run.space.P,)) for k in range(2)]
    plain = Run(tiny_cfg())
    seen = []
    plain.callbacks.append(lambda ev, r, step, x: seen.append((step.perturbation, dict(step.extra))))
    plain.round()
    assert seen and all(p is None and e == {} for p, e in seen)


def _callback_reads():
    """Every attribute the package's training callbacks (functions taking (event, run, ctx, x)) read of their run
    and step arguments."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    reads = {"run": set(), "step": set()}
    for f in [*root.glob("fedlab_analysis/**/*.py"), *root.glob("paper_figures/*.py")]:
        for fn in ast.walk(ast.parse(f.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                continue
            args = [a.arg for a in fn.args.args]
            if args[-4:-3] not in (["event"], ["ev"]) or len(args) < 4:
                continue
            r, s = args[-3], args[-2]
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    if node.value.id == r:
                        reads["run"].add((node.attr, f.name))
                    elif node.value.id == s:
                        reads["step"].add((node.attr, f.name))
    return reads


def test_the_views_show_what_callbacks_read():
    from fedlab_analysis.trainers.views import RUN_FIELDS, STEP_FIELDS
    reads = _callback_reads()
    assert len(reads["run"]) > 10 and len(reads["step"]) > 5     # the walk finds the probes' hooks
    assert {a for a, _ in reads["run"]} - set(RUN_FIELDS) == set(), reads["run"]
    assert {a for a, _ in reads["step"]} - set(STEP_FIELDS) == set(), reads["step"]


def test_parts_get_read_only_views(tiny_cfg):
    """A part's hooks see the run through PartView and the round through RoundView: they read, call the engine's
    services and ctx.add, and cannot rebind the run's or the round's attributes."""
    tried = {}

    class Nosy(Part):
        name = "nosy"

        def round_start(self, run, ctx):
            for obj, name in ((run, "cfg"), (run, "w"), (ctx, "k"), (ctx, "w")):
                try:
                    setattr(obj, name, None)
                except AttributeError as e:
                    tried[name] = str(e)
            try:
                run.algo                                        # noqa: B018
            except AttributeError as e:
                tried["algo"] = str(e)
            tried["reads"] = (run.m, ctx.n, run.watched)

    cfg = tiny_cfg()
    run = Run(cfg, algo=Algorithm(cfg, Plain(), [Nosy()]))
    ctx = run.round()
    assert all("read-only" in tried[k] for k in ("cfg", "w", "k")) and "has no 'algo'" in tried["algo"]
    assert tried["reads"] == (run.m, ctx.n, False)
