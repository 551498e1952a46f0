"""No import circle in the package: every ``import`` and ``from ... import`` of a fedlab_analysis module (at module
level and inside functions, the deferred imports included) is an edge; the graph has no cycle. ``from pkg import
name`` is an edge to the module pkg.name where there is one, else to pkg (its __init__)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = "fedlab_analysis"


def modules(pkg: str = PKG) -> dict:
    out = {}
    for f in (ROOT / pkg).rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def edges(mods: dict) -> dict:
    graph = {m: set() for m in mods}
    for name, f in mods.items():
        here = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]    # the package a relative import is in
        for node in ast.walk(ast.parse(f.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                while t and t not in mods and "." in t:                      # a name inside a module: the module
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_imports():
    g = edges(modules())
    assert "fedlab_analysis.trainers.engine" in g["fedlab_analysis.trainers.loop"]
    assert "fedlab_analysis.trainers.sampling" in g["fedlab_analysis.trainers.engine"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]    # the finder finds one


def test_the_trainers_import_no_circle():
    found = [c for c in cycles(edges(modules())) if any(m.startswith(f"{PKG}.trainers") for m in c)]
    assert found == [], found


def test_no_circle_in_the_package():
    """The rules layer removed the last circle (cli -> errors -> rundir: errors.py held an argparse class)."""
    found = cycles(edges(modules()))
    assert found == [], found


def test_no_circle_in_the_figures_wing():
    """paper_figures/ runs one way: claims, verdict, tiers and digest at the bottom; entry (one cache entry), the two
    fingerprints, runs (the cache), common (the script plumbing); then tier, settings, family and the scripts. Before
    this layering the walk found one circle of ten modules (claims, verdict, common, runs, fingerprint,
    hooks_fingerprint, tier, settings, fedals_table2, fedals_table2_comm)."""
    graph = edges(modules("paper_figures"))
    assert "paper_figures.entry" in graph["paper_figures.runs"]                       # the walk sees this package
    assert cycles(graph) == [], cycles(graph)
    graph["paper_figures.claims"].add("paper_figures.common")                         # the check can fail
    assert cycles(graph)


def entry_points(mods: dict) -> set:
    """The command-line modules: those that end in ``if __name__ == "__main__":``."""
    def is_main(test):
        return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))
    return {m for m, f in mods.items()
            if any(isinstance(n, ast.If) and is_main(n.test) for n in ast.parse(f.read_text()).body)}


def test_sweep_and_demo_reach_the_probes_without_a_command_line_module():
    """They run probes in process through probes.line / probes.runner and train through trainers.loop, never through
    probe.py or train.py: none of their imports, deferred ones included, is a command-line module."""
    mods = modules()
    graph, cli = edges(mods), entry_points(mods)
    assert {f"{PKG}.probe", f"{PKG}.train", f"{PKG}.sweep", f"{PKG}.demo"} <= cli       # the finder finds them
    for start in (f"{PKG}.sweep", f"{PKG}.demo"):
        assert not graph[start] & cli, (start, sorted(graph[start] & cli))
    graph[f"{PKG}.demo"].add(f"{PKG}.probe")                                       # the check can fail
    assert graph[f"{PKG}.demo"] & cli == {f"{PKG}.probe"}


def test_advance_continues_with_the_loop_that_trained_the_run(tiny_cfg):
    """engine.py no longer imports loop.py: Run.advance calls the loop that trained the run (train sets it)."""
    from fedlab_analysis.errors import UserError
    from fedlab_analysis.trainers.engine import Run
    from fedlab_analysis.trainers.loop import train
    bare = Run(tiny_cfg(rounds=1))
    with pytest.raises(UserError, match="built directly, not by train"):
        bare.advance(1)
    assert train(tiny_cfg(rounds=2), run=bare).advance(1) is bare and bare.t == 3


def sys_path_edits(folder: pathlib.Path) -> list[str]:
    """Where the folder's .py files change ``sys.path`` (a method call on it, or an assignment): "file:line"."""
    out = []
    for f in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
            elif isinstance(node, ast.Assign):
                target = node.targets[0]
            else:
                continue
            if isinstance(target, ast.Attribute) and target.attr == "path" and getattr(target.value, "id", "") == "sys":
                out.append(f"{f.relative_to(folder)}:{node.lineno}")
    return out


def test_figure_scripts_run_as_modules_without_sys_path_edits(tmp_path):
    """paper_figures' scripts import their own package as modules (`python -m paper_figures.NAME`); none edits
    sys.path. The check sees an edit where there is one."""
    assert sys_path_edits(ROOT / "paper_figures") == []
    (tmp_path / "x.py").write_text("import sys\nsys.path.insert(0, '.')\nsys.path = []\n")
    assert sorted(sys_path_edits(tmp_path)) == ["x.py:2", "x.py:3"]
