"""The package's grouped public names (fedlab_analysis.__all__, for notebooks): each resolves to the object it
names, none is shadowed by a submodule, and importing the package stays cheap (no torch, no matplotlib)."""
import importlib
import pkgutil
import subprocess
import sys

import pytest

import fedlab_analysis as fl


@pytest.mark.parametrize("name", fl.__all__)
def test_every_public_name_resolves_to_its_object(name):
    module, attr = next(g[name] for g in fl.GROUPS.values() if name in g)
    assert getattr(fl, name) is getattr(importlib.import_module(f"fedlab_analysis.{module}"), attr)
    assert name in dir(fl)


def test_the_names_notebooks_import_today():
    """Spelled out, not read from GROUPS: the table itself could be wrong."""
    from fedlab_analysis.config import RunConfig
    from fedlab_analysis.probes.common import Bundle, rebuild
    from fedlab_analysis.probes.hessian import compute
    from fedlab_analysis.trainers.engine import Run
    from fedlab_analysis.trainers.loop import train
    assert (fl.RunConfig, fl.train_run, fl.Run, fl.rebuild, fl.Bundle, fl.compute_hessian) == \
        (RunConfig, train, Run, rebuild, Bundle, compute)
    assert all(getattr(getattr(fl, n), "__name__", attr) == attr                 # functions and classes by name
               for g in fl.GROUPS.values() for n, (_, attr) in g.items())


def test_groups_are_disjoint_and_all_is_their_union():
    names = [n for g in fl.GROUPS.values() for n in g]
    assert len(names) == len(set(names)) == len(fl.__all__)
    assert set(fl.GROUPS) == {"train", "probes", "studies", "theory", "plots"}


def test_no_public_name_is_a_submodule():
    """A submodule, once imported, becomes the package's attribute of that name and would hide the public one."""
    submodules = {m.name for m in pkgutil.iter_modules(fl.__path__)}
    assert not submodules & set(fl.__all__)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fl.nope  # noqa: B018


def test_every_registered_probe_has_its_compute():
    from fedlab_analysis.probes import PROBES      # the package's own (a test may register one at run time)
    own = {p for p, m in PROBES.items() if m.__name__.startswith("fedlab_analysis.probes.")}
    assert len(own) >= 9 and {f"compute_{p}" for p in own} <= set(fl.__all__)


def test_import_is_cheap():
    code = "import sys, fedlab_analysis; print(sorted({'torch', 'matplotlib', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
