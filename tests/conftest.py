import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)            # tiny models: one thread is several times faster than two


@pytest.fixture
def tiny_cfg():
    """A seconds-fast digits run: 6 clients, 2 local steps of 16 samples, logistic regression."""
    from fedlab_analysis.config import RunConfig

    def make(**kw):
        base = dict(algo="fedavg", dataset="digits", model="logreg", clients=6, active_ratio=0.5, rounds=3,
                    local_steps=2, batch_size=16, lr=0.1, partition="dirichlet", dir_alpha=0.5, seed=1,
                    eval_train_samples=200, quiet=True)
        return RunConfig(**{**base, **kw})
    return make
