"""Probes by need (issue 23): the clients' [m, P] table goes to the probe's device only when a probe reads it, and
the stability probe holds two runs at a time whatever the number of pairs."""
import gc
import weakref

import torch

from fedlab_analysis import probe
from fedlab_analysis.probes import common
from fedlab_analysis.studies import stability as St
from fedlab_analysis.trainers import engine
from fedlab_analysis.trainers.loop import train


def _capture_bundles(monkeypatch):
    seen, real = [], common.rebuild
    monkeypatch.setattr(common, "rebuild", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    return seen


def test_the_clients_table_moves_only_for_a_probe_that_reads_it(tmp_path, tiny_cfg, monkeypatch):
    train(tiny_cfg(keep_clients=True, rounds=2), tmp_path / "r")
    seen = _capture_bundles(monkeypatch)
    f64 = ["--dtype", "float64", "--quiet"]
    assert probe.main(["hessian", str(tmp_path / "r"), "--samples", "40", "--json", str(tmp_path / "h.json"),
                       *f64]) == 0
    b = seen[-1]
    assert b.clients_stored is b.ckpt["clients"]["models"]             # as loaded, not a copy
    assert b._clients is None and b.clients_stored.dtype == torch.float32      # never converted: never read
    assert probe.main(["landscape", str(tmp_path / "r"), "--plane", "clients", "--grid", "2", "--samples", "20",
                       "--json", str(tmp_path / "c.json"), *f64]) == 0
    b = seen[-1]
    assert b._clients is not None and b._clients.dtype == torch.float64          # read: moved once, to the probe's
    assert b.clients is b._clients and torch.equal(b.clients.float(), b.clients_stored)
    assert probe.main(["consensus", str(tmp_path / "r"), "--json", str(tmp_path / "c.json"), "--quiet"]) == 0
    assert seen[-1]._clients is None        # consensus reads the stored table at its own precision (--dtype refused)


def test_a_run_without_the_table_gives_none(tmp_path, tiny_cfg, monkeypatch):
    train(tiny_cfg(keep_clients=False, rounds=1), tmp_path / "r")
    seen = _capture_bundles(monkeypatch)
    assert probe.main(["hessian", str(tmp_path / "r"), "--samples", "30", "--quiet"]) == 0
    assert seen[-1].clients is None


def test_stability_holds_two_runs_at_a_time(tiny_cfg, monkeypatch):
    live, most = weakref.WeakSet(), [0]
    init, rnd = engine.Run.__init__, engine.Run.round

    def counting_init(self, *a, **k):
        init(self, *a, **k)
        live.add(self)

    def counting_round(self):
        gc.collect()
        most[0] = max(most[0], len(live))
        return rnd(self)
    monkeypatch.setattr(engine.Run, "__init__", counting_init)
    monkeypatch.setattr(engine.Run, "round", counting_round)
    cfg = tiny_cfg(algo="fedavg", rounds=3, local_steps=10)
    r = St.uniform_stability(cfg, pairs=3, seed=2, pool=30)
    assert most[0] == 2 and len(r["pairs"]) == 3 and len(r["rows"]) == 9
    # each pair's rows are those of that pair trained alone (the sequential pairs change no number)
    for p, pair in enumerate(r["pairs"]):
        alone = St.uniform_stability(cfg, pairs=[pair], seed=2, pool=30)["rows"]
        mine = [row for row in r["rows"] if row["pair"] == p]
        assert [{**a, "pair": p} for a in alone] == mine
