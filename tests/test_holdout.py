"""A validation split (RunConfig.holdout): held-out training samples sit on no client, each metrics row carries
their loss and accuracy, 0 trains exactly as before, and bad input is one line."""
import pytest
import torch

from fedlab_analysis.config import RunConfig
from fedlab_analysis.errors import UserError
from fedlab_analysis.trainers.engine import Run
from fedlab_analysis.trainers.loop import train

BASE = dict(dataset="digits", model="mlp", model_kwargs={"widths": [8]}, clients=5, active_ratio=1.0,
            partition="sorted", local_steps=3, batch_size=16, lr=0.1, rounds=2, eval_train_samples=100, quiet=True)


def test_the_held_out_samples_are_on_no_client_and_are_evaluated():
    run = train(RunConfig(**BASE, holdout=200))
    held = set(run.holdout_idx.tolist())
    on = torch.cat(run.idx).tolist()
    assert len(held) == 200 and not held & set(on) and len(on) + 200 == len(run.Y)
    assert sorted(held | set(on)) == list(range(len(run.Y)))
    # the label-sorted split is made of the kept samples, still sorted by label within and across clients
    labels = torch.cat([run.Y[ix] for ix in run.idx])
    assert torch.equal(labels, labels.sort().values)
    loss, acc = run.evaluate(run.X[run.holdout_idx], run.Y[run.holdout_idx])
    assert (run.last_row["holdout_loss"], run.last_row["holdout_acc"]) == (loss, acc)
    assert Run(RunConfig(**BASE, holdout=200)).holdout_idx.tolist() == run.holdout_idx.tolist()   # seeded
    assert Run(RunConfig(**BASE, holdout=200, seed=1)).holdout_idx.tolist() != run.holdout_idx.tolist()


def test_zero_is_as_before_and_bad_input_is_refused():
    a, b = train(RunConfig(**BASE)), train(RunConfig(**BASE, holdout=0))
    assert torch.equal(a.w, b.w) and "holdout_acc" not in a.last_row
    with pytest.raises(UserError, match="--holdout: 5000 is not below"):
        Run(RunConfig(**BASE, holdout=5000))
