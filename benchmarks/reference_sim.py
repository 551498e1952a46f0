"""A per-client federated loop written the way the authors' simulator (FL-Simulator, by the FedSpeed / FedSMOO /
FedInit authors) works: the timing reference for the trainer's round benchmark.

What makes it "simulator-style", on purpose:
- the global model and every per-client state (SCAFFOLD c_i, FedDyn h_i, FedSMOO mu_i) are flat CPU vectors, and
  the per-client tables are [clients, P], as the simulator's server keeps them;
- each active client, every round, builds a fresh model (``build_model()``), loads the global weights from a
  state_dict, builds a fresh ``torch.optim.SGD(lr, weight_decay)`` and a fresh ``DataLoader(shuffle=True)``;
- images are augmented per sample in numpy inside ``Dataset.__getitem__`` (flip p = 1/2, then with p = 1/2 a
  random crop of the zero-padded image, pad 4), as the simulator's data set does;
- algorithm corrections are loss terms over the concatenated parameter vector (``<w, c - c_i>``,
  ``lamb <w, h_i - w^t>``, ``(1 - alpha) <w, D>``), the gradient norm is clipped at ``clip`` before the SGD step,
  and SGD's weight decay carries ``wd`` (plus ``lamb`` for FedDyn / FedSMOO);
- SAM-type steps (FedSAM, FedSMOO, FedLESAM) perturb the parameters in place and step back, as the simulator's
  ESAM / DRegSAM / LESAM optimizers do.
Local work: ``local_steps`` K for every client, or ``local_epochs`` E passes over each client's DataLoader, so
client i takes K_i = E * ceil(n_i / B) steps, the last batch of an epoch partial (the papers' setting, as the
simulator's ``train`` loop does it); SCAFFOLD and FedCM then divide each client's update by its own K_i.
On CUDA the reference runs under the simulator's ``train.py`` switches (``cudnn.deterministic = True``, TF32
matmuls and convolutions on), set around each of its rounds and restored after, so code timed beside it keeps its
own settings (``sim_flags=False`` leaves torch's as they are).
Per-round rules (Delta_i = x_i - w^t, K = K_i, S the active clients, N all clients):
    fedavg    w <- w + mean_S Delta_i
    scaffold  d = g + c - c_i;  c_i+ = c_i - c - Delta_i / (K lr);  c += sum_S (c_i+ - c_i) / N
    feddyn    d = g + lamb (h_i - w) + (wd + lamb) x;  h_i += Delta_i;  w <- mean_S x_i + mean_N h_i
    fedcm     d = alpha g + (1 - alpha) D + wd x;  D <- -mean_S Delta_i / (K lr)
    fedsam    g at x + rho g/||g||
    fedsmoo   a = g - mu_i - s, e = rho a/||a||, mu_i += e - s, g at x + e, plus the FedDyn terms;
              s <- rho normalize(mean_S mu_i) (the simulator's server rule)
    fedlesam  g at x - rho u/||u||, u the last global update (the released code's source, with the global L2 norm:
              the released per-tensor indexing slip is not reproduced)
Evaluation is not part of a round. Clients are sampled without replacement (``active`` of them, seeded by
(seed, round)); the DataLoader shuffles with torch's global RNG, seeded once in ``__init__`` as the simulator seeds
it. Buffers (BatchNorm statistics) are not carried: the simulator's models have none (GroupNorm).
Equal to the trainer's code forms to 1e-10 in float64 with the same minibatches (tests/test_reference_sim.py).
Not part of the package: benchmarks import it by path.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

ALGOS = ("fedavg", "scaffold", "feddyn", "fedcm", "fedsam", "fedsmoo", "fedlesam")


class AugmentedImages(Dataset):
    """The simulator's per-sample numpy augmentation: flip with p = 1/2, then with p = 1/2 a random crop of the
    image zero-padded by 4 (zero in normalised space)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator):
        self.x, self.y, self.rng = x, y, rng

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        img = self.x[i]
        if self.rng.random() < 0.5:
            img = np.flip(img, axis=2)
        if self.rng.random() < 0.5:
            _, h, w = img.shape
            pad = np.pad(img, ((0, 0), (4, 4), (4, 4)))
            dy, dx = self.rng.integers(0, 9, size=2)
            img = pad[:, dy:dy + h, dx:dx + w]
        return torch.from_numpy(np.ascontiguousarray(img)), torch.tensor(self.y[i])


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """The simulator's ``get_mdl_params``: every parameter, concatenated, as a CPU vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def load_flat(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """The simulator's ``set_client_from_params``: a state_dict cut from the flat vector, then ``load_state_dict``."""
    sd, i = {}, 0
    for name, p in model.named_parameters():
        sd[name] = flat[i:i + p.numel()].reshape(p.shape).clone()
        i += p.numel()
    model.load_state_dict(sd, strict=False)


class ReferenceSim:
    def __init__(self, algo, build_model, clients, *, active=10, local_steps=50, batch_size=50, lr=0.1,
                 augment=False, clip=10.0, rho=0.1, lamb=0.1, alpha=0.1, wd=1e-3, seed=0, device="cpu",
                 local_epochs=None, sim_flags=True):
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {', '.join(ALGOS)} (got {algo!r})")
        self.algo, self.build_model, self.clients = algo, build_model, clients
        self.active, self.K, self.B, self.lr = active, local_steps, batch_size, lr
        self.E, self.sim_flags = local_epochs, sim_flags
        self.augment, self.clip, self.rho, self.lamb, self.alpha, self.wd = augment, clip, rho, lamb, alpha, wd
        self.seed, self.device, self.t = seed, torch.device(device), 0
        torch.manual_seed(seed)
        self.w = flat_params(build_model())                  # the global model, a flat CPU vector
        N, P = len(clients), len(self.w)
        z = lambda *s: torch.zeros(*s, P, dtype=self.w.dtype)  # noqa: E731
        if algo == "scaffold":
            self.c, self.c_i = z(), z(N)
        if algo in ("feddyn", "fedsmoo"):
            self.h = z(N)
        if algo == "fedsmoo":
            self.mu, self.s = z(N), z()
        if algo == "fedcm":
            self.D = z()
        if algo == "fedlesam":
            self.u = z()                                     # the last global update, zero before round 1
        self.rng = np.random.default_rng(seed)

    def steps(self, i: int) -> int:
        """K_i: ``local_steps``, or E * ceil(n_i / B) with ``local_epochs`` (rounded as the trainer does)."""
        if self.E is None:
            return self.K
        return max(1, round(self.E * math.ceil(len(self.clients[i][1]) / self.B)))

    @contextlib.contextmanager
    def flags(self):
        """The simulator's train.py switches on CUDA (deterministic cuDNN, TF32), restored afterwards."""
        if self.device.type != "cuda" or not self.sim_flags:
            yield
            return
        b = torch.backends
        old = (b.cudnn.deterministic, b.cudnn.benchmark, b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
        b.cudnn.deterministic, b.cudnn.benchmark, b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = True, False, True, True
        try:
            yield
        finally:
            b.cudnn.deterministic, b.cudnn.benchmark, b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = old

    # ---- pieces a test may replace -----------------------------------------------------------------
    def sample(self) -> list[int]:
        n = min(self.active, len(self.clients))
        return sorted(np.random.default_rng([self.seed, self.t]).choice(len(self.clients), n, replace=False))

    def loader(self, i: int) -> DataLoader:
        x, y = self.clients[i]
        ds = AugmentedImages(x, y, self.rng) if self.augment else TensorDataset(torch.from_numpy(x),
                                                                                  torch.from_numpy(y))
        return DataLoader(ds, batch_size=self.B, shuffle=True)

    # ---- one client, the simulator's way ------------------------------------------------------------
    def _correction(self, i: int) -> torch.Tensor | None:
        """The vector v of the loss term <w, v> sent to client i (None: no term)."""
        if self.algo == "scaffold":
            return self.c - self.c_i[i]
        if self.algo in ("feddyn", "fedsmoo"):
            return self.lamb * (self.h[i] - self.w)
        if self.algo == "fedcm":
            return (1 - self.alpha) * self.D
        return None

    def _train_client(self, i: int) -> torch.Tensor:
        dev, algo = self.device, self.algo
        model = self.build_model().to(dev)
        load_flat(model, self.w.to(dev))
        model.train()
        params = list(model.parameters())
        wd = self.wd + (self.lamb if algo in ("feddyn", "fedsmoo") else 0.0)
        opt = torch.optim.SGD(params, lr=self.lr, weight_decay=wd)
        corr = self._correction(i)
        corr = corr.to(dev) if corr is not None else None
        if algo == "fedsmoo":
            mu, s = self.mu[i].to(dev), self.s.to(dev)
        if algo == "fedlesam":
            e_les = -self.rho * self.u.to(dev) / (self.u.norm() + 1e-7)
        step, K = 0, self.steps(i)
        while step < K:
            for xb, yb in self.loader(i):
                xb, yb = xb.to(dev), yb.to(dev)
                opt.zero_grad()
                if algo in ("fedsam", "fedsmoo"):
                    F.cross_entropy(model(xb), yb).backward()
                    g = torch.cat([p.grad.reshape(-1) for p in params])
                    if algo == "fedsmoo":
                        g = g - mu - s
                    e = self.rho * g / (g.norm() + 1e-7)
                    self._shift(params, e)
                    if algo == "fedsmoo":
                        mu = mu + e - s
                    opt.zero_grad()
                    F.cross_entropy(model(xb), yb).backward()
                    self._shift(params, -e)
                elif algo == "fedlesam":
                    self._shift(params, e_les)
                    F.cross_entropy(model(xb), yb).backward()
                    self._shift(params, -e_les)
                else:
                    scale = self.alpha if algo == "fedcm" else 1.0
                    (scale * F.cross_entropy(model(xb), yb)).backward()
                if corr is not None:                         # the loss term <w, v>, over the concatenated vector
                    (torch.cat([p.reshape(-1) for p in params]) * corr).sum().backward()
                if self.clip > 0:
                    torch.nn.utils.clip_grad_norm_(params, max_norm=self.clip)
                opt.step()
                step += 1
                if step == K:
                    break
        if algo == "fedsmoo":
            self.mu[i] = mu.cpu()
        return flat_params(model)

    @staticmethod
    @torch.no_grad()
    def _shift(params, v: torch.Tensor) -> None:
        j = 0
        for p in params:
            p.add_(v[j:j + p.numel()].view_as(p))
            j += p.numel()

    # ---- one round -------------------------------------------------------------------------------------
    def round(self) -> None:
        S = torch.as_tensor(self.sample(), dtype=torch.long)
        N, algo = len(self.clients), self.algo
        with self.flags():
            x = torch.stack([self._train_client(int(i)) for i in S])     # [|S|, P] final local models
        delta = x - self.w
        K = torch.tensor([float(self.steps(int(i))) for i in S], dtype=x.dtype)[:, None]     # each client's own K_i
        if algo == "scaffold":
            new = self.c_i[S] - self.c - delta / (K * self.lr)
            self.c = self.c + (new - self.c_i[S]).sum(0) / N
            self.c_i[S] = new
        if algo in ("feddyn", "fedsmoo"):
            self.h[S] += delta
            w_new = x.mean(0) + self.h.mean(0)
        else:
            w_new = self.w + delta.mean(0)
        if algo == "fedsmoo":
            m = self.mu[S].mean(0)
            self.s = self.rho * m / (m.norm() + 1e-7)
        if algo == "fedcm":
            self.D = -(delta / (K * self.lr)).mean(0)
        if algo == "fedlesam":
            self.u = w_new - self.w
        self.w = w_new
        self.t += 1
