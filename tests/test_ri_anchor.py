"""--ri-anchor global|start against a two-client, two-round float64 example computed by hand.

The toy: f_i(W) = 1/2 ||W - c_i||^2 (a bias-free linear model on the input x = 1 with a squared loss), so
grad f_i(W) = W - c_i exactly; c_1 = (2, 0), c_2 = (0, 4). Client 1 holds one sample, client 2 two identical ones;
batch 1 and one local epoch give K_1 = 1, K_2 = 2. eta = beta = mu = lamb = 1/2, w^0 = 0, full participation,
no weight decay, no clipping, no lr decay. a is the anchor: w^t (global) or the relaxed start x_{i,0} (start).

    RI start      x_{i,0} = w + beta (w - x_i^last)                 (x_i^last = w^0 before the first round)
    FedProx step  x <- x - eta (x - c_i + mu (x - a));               w^{t+1} = mean_i x_{i,K}
    FedDyn step   x <- x - eta (x - c_i + lamb (h_i - a) + lamb x);  h_i += x_{i,K} - w^t, H = mean_i h_i,
                  w^{t+1} = mean_i x_{i,K} + H

Round 1 (both anchors, as x_{i,0} = w^0 = a = 0), FedProx:
    client 1: x = 0 - 1/2 (0 - c_1) = (1, 0)
    client 2: x = (0, 2), then (0, 2) - 1/2 ((0, -2) + 1/2 (0, 2)) = (0, 5/2);  w^1 = (1/2, 5/4)
Round 2: x_{1,0} = (1/2, 5/4) + 1/2 (-1/2, 5/4) = (1/4, 15/8), x_{2,0} = (3/4, 5/8); with a = w^1 client 1 gives
    (1/4, 15/8) - 1/2 ((-7/4, 15/8) + 1/2 (-1/4, 5/8)) = (19/16, 25/32), and so on (the constants below).
"""
import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.data import Dataset
from fedlab_analysis.errors import UserError
from fedlab_analysis.trainers.engine import Run

TARGETS = torch.tensor([[2.0, 0.0], [0.0, 4.0]], dtype=torch.float64)

# (w^t, x_1, x_2) after round 1 and round 2, written out by hand from the equations above
HAND = {
    ("fedprox", "global"): [((1/2, 5/4), (1, 0), (0, 5/2)), ((89/128, 475/256), (19/16, 25/32), (13/64, 375/128))],
    ("fedprox", "start"): [((1/2, 5/4), (1, 0), (0, 5/2)), ((45/64, 235/128), (9/8, 15/16), (9/32, 175/64))],
    ("feddyn", "global"): [((1, 5/2), (1, 0), (0, 5/2)), ((37/32, 95/32), (5/4, 25/16), (13/32, 85/32))],
    ("feddyn", "start"): [((1, 5/2), (1, 0), (0, 5/2)), ((21/16, 105/32), (5/4, 15/8), (9/16, 85/32))],
}


def toy_dataset():
    x = torch.ones(3, 1)
    y = torch.tensor([0, 1, 1])
    return Dataset("ri-anchor-toy", x, y, x, y, n_classes=2, input_shape=(1,), natural_clients=[[0], [1, 2]])


def toy_run(algo, anchor):
    cfg = RunConfig(algo=algo, ri=True, ri_anchor=anchor, beta=0.5, mu=0.5, lamb=0.5, model="logreg",
                    model_kwargs={"bias": False}, partition="natural", active_ratio=1.0, local_epochs=1,
                    batch_size=1, lr=0.5, lr_decay=1.0, wd=0.0, clip=0.0, dtype="float64", eval_train_samples=3,
                    quiet=True)
    run = Run(cfg, dataset=toy_dataset(), init={"fc.weight": torch.zeros(2, 1)})
    run.loss = lambda out, y: 0.5 * (out - TARGETS[y]).pow(2).sum(1).mean()
    return run


@pytest.mark.parametrize("algo, anchor", list(HAND), ids=[f"{a}-{b}" for a, b in HAND])
def test_two_clients_two_rounds_by_hand(algo, anchor):
    run = toy_run(algo, anchor)
    assert run.local_steps(0) == 1 and run.local_steps(1) == 2
    for t, (w, x1, x2) in enumerate(HAND[(algo, anchor)]):
        run.round()
        assert torch.equal(run.w, torch.tensor(w, dtype=torch.float64)), (t, run.w)
        assert torch.equal(run.last_local, torch.tensor([x1, x2], dtype=torch.float64)), (t, run.last_local)


@pytest.mark.parametrize("algo", ["fedprox", "feddyn"])
def test_anchors_agree_in_round_one_and_differ_once_the_start_moves(algo):
    """In round 1 every relaxed start is w^0, so both anchors are the same point; from round 2 on they are not."""
    g, s = toy_run(algo, "global"), toy_run(algo, "start")
    g.round(), s.round()
    assert torch.equal(g.w, s.w)
    g.round(), s.round()
    assert (g.w - s.w).abs().max() > 1e-3


def test_start_anchor_needs_relaxed_initialisation():
    with pytest.raises(UserError, match="--ri-anchor"):
        RunConfig(algo="fedprox", ri_anchor="start").validate()
    with pytest.raises(UserError, match="--ri-anchor"):
        RunConfig(algo="fedprox", ri=True, ri_anchor="centre").validate()
