"""params.functional, the one flat-vector functional model (engine, probes, landscape), against nn.Module itself."""
import doctest

import pytest
import torch
from torch import nn

from fedlab_analysis import params
from fedlab_analysis.params import ParamSpace, functional


def _bn_model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).double()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    return m


def test_doctest():
    r = doctest.testmod(params)
    assert r.attempted >= 1 and r.failed == 0


def test_flat_and_named_and_states_equal_the_module_in_eval():
    m = _bn_model().eval()
    space, bspace = ParamSpace.of_model(m), ParamSpace.buffers_of(m)
    theta = space.flatten(dict(m.named_parameters())).detach()
    buf = bspace.flatten(dict(m.named_buffers())).detach()
    x = torch.randn(5, 3, dtype=torch.float64)
    want = m(x)
    f = functional(m, space, bspace=bspace)
    assert torch.equal(f(theta, x, buf), want)
    assert torch.equal(f(space.unflatten(theta), x, buf), want)
    assert torch.equal(functional(m, space, bspace=bspace, states=True)(torch.cat([theta, buf]), x), want)
    # other buffers given per call are the ones used (a client's own statistics), not the module's
    other = buf.clone()
    other[:4] += 1.0
    assert not torch.allclose(f(theta, x, other), want)
    with pytest.raises(ValueError, match="needs bspace"):
        functional(m, space, states=True)


def test_split_calls_each_piece_on_its_own():
    m = _bn_model().train()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm1d):
            mod.track_running_stats = False
    space = ParamSpace.of_model(m)
    theta = space.flatten(dict(m.named_parameters())).detach()
    x = torch.randn(6, 3, dtype=torch.float64)
    got = functional(m, space, split=lambda x: x.split(2))(theta, x)
    assert torch.equal(got, torch.cat([m(x[i:i + 2]) for i in range(0, 6, 2)]))
    assert not torch.allclose(got, m(x))                 # one batch of 6 is normalised differently
