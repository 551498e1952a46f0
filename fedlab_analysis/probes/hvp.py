"""Hessian-vector products of a data-set loss, as a matrix-free operator over flat parameters.

    H = (1/N) sum_b n_b * H_b  (+ weight_decay * I)

where H_b is the Hessian of the mean loss of batch b (n_b samples, N in all) with respect to the
flat parameter vector theta, or to ``theta[index]`` when a parameter filter is set (then H is the
diagonal block of the full Hessian for those coordinates). The mean over the whole chosen data set
is the default; pass a single (x, y) batch for the Hessian of one mini-batch (PyHessian's mode).

Two backends compute H_b v:
- ``"autograd"`` (default): double backward, d/dtheta <grad L(theta), v>. One forward and one
  first backward per batch serve all vectors of a ``matmat`` call; the graph is freed when the call
  returns, so no graph stays alive between calls (PyHessian keeps one for its lifetime). It works
  with stock ``nn.GroupNorm`` (curvlinops' vmapped forward-over-reverse product does not).
  ``keep_graph="auto"`` (default) is PyHessian's mode when memory allows: each batch's gradient graph
  is built once and held until ``release()``, so a product is one double-backward pass (2-3x cheaper
  on CPU for a single batch). The graphs are held when the tensors the first batch's graph saves,
  times the number of batches, fit in a quarter of the free memory of the device; otherwise each
  product rebuilds its graph and ``describe()["keep_graph_note"]`` says why. True / False force it.
- ``"func"``: ``torch.func.jvp(torch.func.grad(L), theta, v)`` (forward over reverse).

The model is used through ``f(theta, x) -> logits`` only (``params.functional``); put it in eval
mode first (Bundle models are). Vectors are flat tensors of length ``dim``; ``matmat`` takes rows
``[m, dim]``; ``op @ V`` for a matrix follows the math convention (columns).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import UserError
from ..params import ParamSpace

LOSSES = {"ce": F.cross_entropy, "mse": F.mse_loss}


class Operator:
    """A symmetric linear operator on R^dim that counts its products and the seconds spent in them.

    Subclasses implement ``_matmat(V [m, dim]) -> [m, dim]``. ``embed``/``restrict`` map between the
    operator's coordinates and the full flat parameter vector (identity when there is no filter)."""

    dim: int
    dtype: torch.dtype
    device: torch.device
    index: torch.Tensor | None = None
    P: int
    progress = None          # a tqdm bar counting products, set by the command line

    def __init__(self):
        self.n_products = 0
        self.seconds = 0.0

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        """H applied to each row of ``V`` ([m, dim] -> [m, dim])."""
        V = torch.as_tensor(V, dtype=self.dtype, device=self.device)
        if V.dim() != 2 or V.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape [m, {self.dim}], got {tuple(V.shape)}")
        t0 = time.perf_counter()
        out = self._matmat(V)
        self.seconds += time.perf_counter() - t0
        self.n_products += V.shape[0]
        if self.progress is not None:
            self.progress.update(V.shape[0])
        return out

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        return self.matmat(torch.as_tensor(v).reshape(1, -1))[0]

    def __matmul__(self, v: torch.Tensor) -> torch.Tensor:
        return self.matvec(v) if v.dim() == 1 else self.matmat(v.T).T

    @property
    def seconds_per_product(self) -> float:
        return self.seconds / max(self.n_products, 1)

    def embed(self, v: torch.Tensor) -> torch.Tensor:
        """Operator coordinates -> full flat vector (zeros outside the filter); leading dims kept."""
        if self.index is None:
            return v
        return torch.zeros(*v.shape[:-1], self.P, dtype=v.dtype, device=v.device).index_copy_(-1, self.index, v)

    def restrict(self, flat: torch.Tensor) -> torch.Tensor:
        """Full flat vector -> operator coordinates."""
        return flat if self.index is None else flat[..., self.index]

    def to_linear_operator(self):
        """This operator as a ``scipy.sparse.linalg.LinearOperator`` (for ``eigsh``)."""
        from scipy.sparse.linalg import LinearOperator

        np_dtype = np.float64 if self.dtype == torch.float64 else np.float32

        def mm(X):
            X = np.asarray(X).reshape(self.dim, -1)
            out = self.matmat(torch.from_numpy(np.ascontiguousarray(X.T)).to(self.dtype)).T
            return out.cpu().numpy().astype(np_dtype, copy=False)

        def mv(x):
            return mm(x)[:, 0]
        return LinearOperator((self.dim, self.dim), matvec=mv, rmatvec=mv, matmat=mm, dtype=np_dtype)


class MatrixOperator(Operator):
    """A dense symmetric matrix behind the Operator interface (tests, benchmarks, designed spectra)."""

    def __init__(self, A: torch.Tensor):
        super().__init__()
        if A.dim() != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"expected a square matrix, got shape {tuple(A.shape)}")
        self.A = A
        self.dim = self.P = A.shape[0]
        self.dtype, self.device = A.dtype, A.device

    def _matmat(self, V):
        return V @ self.A  # A is symmetric: (A V^T)^T = V A


class ScaledOperator(Operator):
    """T H T for T = diag(t), t > 0 a vector of the operator's size: the Hessian in the scale-invariant
    coordinates of ASAM (Kwon et al. 2021, Sec. 3), t = |w| + eta. Its products are ``op``'s (counted there too)."""

    def __init__(self, op: Operator, t: torch.Tensor):
        super().__init__()
        self.op, self.t = op, t.to(op.device, op.dtype)
        self.dim, self.P, self.dtype, self.device, self.index = op.dim, op.P, op.dtype, op.device, op.index

    def _matmat(self, V):
        return self.op.matmat(V * self.t) * self.t


class HessianOperator(Operator):
    """The Hessian of the mean loss over a data set, matrix-free (see the module docstring).

    f: ``f(theta, x) -> logits``; theta: flat parameters (its dtype/device set the operator's);
    data: a pair ``(X, y)`` of tensors (cut into ``batch_size`` chunks; None = one batch) or a list
    of ``(x, y)`` batches; loss: ``"ce"``, ``"mse"`` or a callable ``(logits, y) -> mean loss``;
    weight_decay: adds ``weight_decay * I`` (the Hessian of ``weight_decay/2 * ||theta||^2``);
    backend: ``"autograd"`` or ``"func"``; params: a ParamSpace spec (exact name, glob, 'group:phi',
    'block:3', 're:...') restricting H to those coordinates (needs ``space``); keep_graph: hold the
    gradient graphs between products (autograd backend; see the module docstring).
    """

    def __init__(self, f, theta: torch.Tensor, data, *, batch_size: int | None = None, loss="ce",
                 weight_decay: float = 0.0, backend: str = "autograd", params: str | None = None,
                 space: ParamSpace | None = None, keep_graph: bool | str = "auto"):
        super().__init__()
        if backend not in ("autograd", "func"):
            raise UserError(f"unknown HVP backend {backend!r}; use 'autograd' or 'func'")
        if not (isinstance(loss, str) and loss in LOSSES) and not callable(loss):
            raise UserError(f"unknown loss {loss!r}; use one of {', '.join(LOSSES)} or a callable")
        if keep_graph not in (True, False, "auto"):
            raise UserError(f"keep_graph={keep_graph!r}: use True, False or 'auto'")
        if keep_graph is True and backend != "autograd":
            raise UserError("keep_graph holds autograd graphs; use it with backend='autograd'")
        self.keep_note = None
        if batch_size is not None and batch_size < 1:
            raise UserError(f"batch_size={batch_size} must be at least 1")
        self.f, self.backend, self.keep_graph = f, backend, keep_graph is True or (keep_graph == "auto" and
                                                                                backend == "autograd")
        self._graphs = {}
        self.loss = LOSSES[loss] if isinstance(loss, str) else loss
        self.theta = theta.detach().reshape(-1)
        self.dtype, self.device, self.P = self.theta.dtype, self.theta.device, self.theta.numel()
        self.weight_decay = float(weight_decay)
        self.batches = self._batches(data, batch_size)
        self.n_data = sum(len(y) for _, y in self.batches)
        self.params = None if params in (None, "all") else params
        self.layers = space.names if space is not None else None
        if space is not None and space.P != self.P:
            raise UserError(f"theta has {self.P} entries but the ParamSpace has {space.P}; "
                            "pass the space of the model that theta parameterises")
        if self.params is not None:
            if space is None:
                raise UserError(f"the parameter filter {params!r} needs the layer table; "
                                "pass space=ParamSpace.of_model(model)")
            try:
                self.layers = [l.name for l in space.select(self.params)]
            except (KeyError, ValueError) as e:
                raise UserError(f"{e.args[0]}. Pass an exact name, a glob (layer1.*), 'group:NAME', "
                                "'block:I' or 're:REGEX'") from None
            self.index = space.index(self.params, device=self.device)
        self.dim = self.P if self.index is None else self.index.numel()
        if keep_graph == "auto" and self.keep_graph:
            self._decide_keep()

    def _batches(self, data, batch_size):
        if isinstance(data, tuple) and len(data) == 2 and torch.is_tensor(data[0]):
            X, y = data
            from .common import chunks             # BatchNorm train mode: whole groups within one client
            n = [len(y)] if batch_size is None else chunks(self.f, len(y), batch_size)
            data = list(zip(X.split(n), y.split(n)))
        data = [(x.to(self.device, self.dtype if x.is_floating_point() else x.dtype),
                 y.to(self.device, self.dtype if y.is_floating_point() else y.dtype)) for x, y in data]
        if not data or any(len(y) == 0 for _, y in data):
            raise UserError("the Hessian needs at least one sample in every batch; check --data/--samples")
        return data

    def _full(self, s: torch.Tensor) -> torch.Tensor:
        """theta with its filtered coordinates replaced by ``s`` (differentiable in ``s``)."""
        return s if self.index is None else self.theta.index_copy(0, self.index, s)

    def _decide_keep(self):
        """keep_graph='auto': build batch 0's graph, count the bytes its saved tensors hold, and keep the graphs
        when n_batches times that fits in a quarter of the device's free memory."""
        saved = [0]

        def pack(t):
            saved[0] += t.numel() * t.element_size()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            graph = self._gradient_graph(*self.batches[0])
        need = saved[0] * len(self.batches)
        free = _free_bytes(self.device)
        if need <= free / 4:
            self._graphs[0] = graph
            return
        self.keep_graph = False
        self.keep_note = (f"gradient graphs not kept: {need / 2**20:.0f} MiB for {len(self.batches)} batch(es) "
                          f"exceed a quarter of the {free / 2**20:.0f} MiB free; each product rebuilds its graph")

    def _gradient_graph(self, x, y):
        """(s, g): the filtered coordinates as a leaf and the loss gradient with its graph."""
        with torch.enable_grad():
            s = self.restrict(self.theta).clone().requires_grad_(True)
            (g,) = torch.autograd.grad(self.loss(self.f(self._full(s), x), y), s, create_graph=True)
        return s, g

    def _batch_hvps(self, b, V):
        """[m, dim] products with the Hessian of the mean loss of batch ``b``."""
        x, y = self.batches[b]
        if self.backend == "func":
            grad = torch.func.grad(lambda s: self.loss(self.f(self._full(s), x), y))
            s0 = self.restrict(self.theta)
            return torch.stack([torch.func.jvp(grad, (s0,), (v,))[1] for v in V])
        if self.keep_graph and b not in self._graphs:
            self._graphs[b] = self._gradient_graph(x, y)
        s, g = self._graphs[b] if self.keep_graph else self._gradient_graph(x, y)
        if not g.requires_grad:      # the loss is linear in these coordinates
            return torch.zeros_like(V)
        return torch.stack([torch.autograd.grad(g, s, v, retain_graph=self.keep_graph or i < len(V) - 1)[0]
                            for i, v in enumerate(V)])

    def _matmat(self, V):
        if len(self.batches) == 1:
            out = self._batch_hvps(0, V)
        else:
            out = sum(self._batch_hvps(b, V) * (len(y) / self.n_data) for b, (_, y) in enumerate(self.batches))
        return out + self.weight_decay * V if self.weight_decay else out

    def release(self):
        """Drop the gradient graphs that ``keep_graph=True`` holds (they are rebuilt on demand)."""
        self._graphs = {}

    def describe(self) -> dict:
        """What this operator is: data, parameters, settings (plain data for JSON)."""
        return {"n_data": self.n_data, "n_batches": len(self.batches), "params": self.params or "all",
                "layers": self.layers, "dim": self.dim, "P": self.P, "backend": self.backend,
                "weight_decay": self.weight_decay, "keep_graph": self.keep_graph,
                **({"keep_graph_note": self.keep_note} if self.keep_note else {}),
                "dtype": str(self.dtype).replace("torch.", "")}


def _free_bytes(device: torch.device) -> int:
    """Free memory of the device: CUDA's free bytes, or the host's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as fh:
            return next(int(s.split()[1]) * 1024 for s in fh if s.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return 0
