"""Every batched rule copy in theory/rules.py is pinned to the engine Part it mirrors, in float64: the toy run
through the trainer (engine_toys.make_run) against the theory simulator that calls the copy. Each pin is shown
able to fail: with the copy broken (its output scaled by 0.9, monkeypatched in theory/rules.py) the same pin
reports a deviation far above its tolerance."""
import pytest
import torch

from fedlab_analysis.theory import fedcm, fedinit, fedlesam, fedsmoo, rules
from fedlab_analysis.theory.engine_toys import make_run, trajectory
from fedlab_analysis.theory.toys import DT, make_quadratics

T = 6


def pin_fedcm():
    prob = make_quadratics(6, 4, shared=False, seed=2)
    x0 = prob.x_star + 1.0
    ref = fedcm.simulate(prob, alpha=0.2, K=3, eta_l=0.05, eta_g=1.5, T=T, x0=x0)
    eng = fedcm.engine_trace(prob, alpha=0.2, K=3, eta_l=0.05, eta_g=1.5, T=T, x0=x0)
    return max(float((eng[k] - ref[k][:, 0]).abs().max()) for k in ("x", "Delta")), 1e-10


def pin_scaffold():
    prob = make_quadratics(6, 4, shared=False, seed=6)
    x0 = prob.x_star + 1.0
    ref = fedcm.simulate(prob, algo="scaffold", K=3, eta_l=0.05, eta_g=1.0, T=T, x0=x0)["x"][:, 0]
    eng = trajectory(make_run(prob, "scaffold", K=3, lr=0.05, x0=x0), T)["w"]
    return float((eng - ref).abs().max()), 1e-10


def pin_fedinit():
    prob = make_quadratics(6, 4, shared=False, seed=3)
    w0 = prob.x_star + 1.0
    ref = fedinit.simulate(prob, beta=0.3, K=3, eta=0.05, T=T, w0=w0)["w"][:, 0]
    eng = trajectory(make_run(prob, "fedinit", K=3, lr=0.05, x0=w0, beta=0.3), T)["w"]
    return float((eng - ref).abs().max()), 1e-10


def pin_fedsmoo():
    """FedSMOO's corrected ascent, its server perturbation and the FedDyn direction (r > 0, every client)."""
    prob = fedsmoo.make_toy(6, 4, seed=7)
    w0 = torch.zeros(4, dtype=DT)
    ref = fedsmoo.simulate(prob, method="fedsmoo", T=T, K=3, eta=0.05, beta=10.0, r=0.1, w0=w0)["w"]
    eng = trajectory(make_run(prob, "fedsmoo", K=3, lr=0.05, x0=w0, rho=0.1, lamb=0.1), T)["w"]
    return float((eng - ref).abs().max()), 1e-6          # the trainer's ||v|| + 1e-7 normalisation


def _sam_family(algo):
    prob = make_quadratics(6, 4, shared=False, seed=5)
    w0 = prob.x_star + 3.0
    ref = fedlesam.simulate(prob, method=algo, T=T, E=3, eta_l=0.05, eta_g=1.0, rho=0.05, w0=w0)["w"]
    eng = trajectory(make_run(prob, algo, K=3, lr=0.05, x0=w0, rho=0.05), T)["w"]
    return float((eng - ref).abs().max()), 1e-7          # the trainer's ||v|| + 1e-7 normalisation


PINS = {"fedcm": pin_fedcm, "scaffold": pin_scaffold, "fedinit": pin_fedinit, "fedsmoo": pin_fedsmoo,
        "fedsam": lambda: _sam_family("fedsam"), "fedlesam": lambda: _sam_family("fedlesam")}

# each copy in rules.py -> the pin that exercises it (one engine Part each, see the module's table)
COVER = {"sgd_step": "fedinit", "sam_ascent": "fedsam", "smoo_ascent": "fedsmoo", "smoo_server": "fedsmoo",
         "dyn_direction": "fedsmoo", "lesam_estimate": "fedlesam", "cm_direction": "fedcm", "cm_server": "fedcm",
         "scaffold_direction": "scaffold", "scaffold_controls": "scaffold", "relaxed_start": "fedinit"}


def test_every_copy_is_covered_by_a_pin():
    copies = {n for n, f in vars(rules).items() if callable(f) and getattr(f, "__module__", "") == rules.__name__}
    assert copies - {"unit"} == set(COVER)
    doc = rules.__doc__
    assert all(f"``{n}``" in doc for n in COVER)          # the docstring table names each copy's engine Part


@pytest.mark.parametrize("name", sorted(PINS))
def test_pin_holds(name):
    dev, tol = PINS[name]()
    assert dev < tol, (name, dev)


def _broken(f):
    def g(*a, **k):
        out = f(*a, **k)
        return (0.9 * out[0], *out[1:]) if isinstance(out, tuple) else 0.9 * out
    return g


@pytest.mark.parametrize("copy", sorted(COVER))
def test_pin_fails_with_the_copy_broken(copy, monkeypatch):
    monkeypatch.setattr(rules, copy, _broken(getattr(rules, copy)))
    dev, tol = PINS[COVER[copy]]()
    assert dev > 100 * tol, (copy, dev)
