# Each target is one line of intent; see README.md.
PYTHON ?= .venv/bin/python
RUNS ?= outputs results/runs
DATASETS ?= ETTh1 ETTh2 ETTm1 exchange_rate
# Real files come from a local mirror when one sits beside the checkout (tests on real data use it too).
RA_DATA_MIRROR ?= $(wildcard ../shared/data)
export RA_DATA_MIRROR

# The torch `make setup` installs (pyproject.toml accepts a range; this is the version tested).
TORCH ?= 2.13.0
# The Python a wheelhouse is for (the node's, e.g. 3.12), and the extras it carries.
PY ?= $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
EXTRAS ?= dev,rl
# make rl-data-sac: the environment, seed and run folder of the SAC behaviour policy, transitions per policy.
RL_ENV ?= hopper
RL_SEED ?= 0
RL_RUN ?= data/rl/behaviour/$(RL_ENV)_sac_seed$(RL_SEED)
RL_STEPS ?= 200000
# make device-kit: which chunk of the GPU queue (verify tsf ptb ptb16 rl_medium ...; empty: the next not done),
# and the Python of the GPU machine its wheels are for
CHUNK ?=
DEVICE_PY ?= 3.12

.PHONY: setup test lint data rl-data rl-data-sac rl-sac tables results figures bench lm-cost wheelhouse device-kit device-import

setup:  ## create .venv: torch $(TORCH) (the CPU build unless an NVIDIA GPU is found; it says which), the package with its test tools, the C++ kernels
	python3 -m venv .venv && .venv/bin/pip install --upgrade pip -q
	.venv/bin/python scripts/install_torch.py $(TORCH)
	.venv/bin/pip install -e ".[dev,rl,wandb]"
	$(PYTHON) scripts/build_kernels.py

wheelhouse:  ## every dependency but torch as wheels for Python $(PY) in wheelhouse/, for `pip install --no-index --find-links wheelhouse` beside a node's own torch
	$(PYTHON) scripts/wheelhouse.py --python $(PY) --extras $(EXTRAS) --out wheelhouse

test:  ## the whole test suite (CPU, no network, smoke-sized), one worker per core (pytest-xdist)
	$(PYTHON) -m pytest -q -n auto

lint:  ## ruff lint and format check
	$(PYTHON) -m ruff check . && $(PYTHON) -m ruff format --check .

data:  ## download and verify datasets into data/ (DATASETS="ETTh1 ptb ..." picks; RA_DATA_MIRROR reads a mirror)
	$(PYTHON) scripts/download_data.py $(DATASETS)

rl-data:  ## collect the self-made Hopper offline data (random/scripted/noisy behaviours, D4RL schema; not D4RL)
	$(PYTHON) scripts/collect_rl_data.py --env hopper --out data/rl/hopper_selfcollected.hdf5

rl-data-sac:  ## D4RL's recipe here: SAC on $(RL_ENV) (seed $(RL_SEED); resumable: rerun after a kill; hours), then its medium, medium_replay, medium_expert files in data/rl/ ($(RL_STEPS) transitions per policy)
	$(PYTHON) scripts/d4rl_recipe.py train --env $(RL_ENV) --seed $(RL_SEED) --out $(RL_RUN)
	$(PYTHON) scripts/d4rl_recipe.py datasets --run $(RL_RUN) --out data/rl --steps $(RL_STEPS)

rl-sac:  ## DT table on the rl-data-sac Hopper files: experiment=aaren/rl_hopper_sac (2 models x 3 datasets x 3 seeds, CPU budget; docs/rl.md), then `make tables` (outputs/tables/rl_sac_cpu_reference.md)
	$(PYTHON) train.py experiment=aaren/rl_hopper_sac && $(MAKE) tables

tables:  ## tables from every run record under $(RUNS) -> outputs/tables/ (git-ignored: nothing committed changes)
	$(PYTHON) scripts/make_tables.py --runs $(RUNS) --out outputs/tables

results:  ## rewrite the committed results/*.md, *.csv from results/runs/ (refused unless each table's runs are one clean commit)
	$(PYTHON) scripts/make_tables.py --runs results/runs --out results

figures:  ## plots of the efficiency benchmark (results/bench/*.png) and of each committed table against the paper (results/figures/<table>.png, cell by cell in agreement.md)
	$(PYTHON) scripts/bench.py --plot-only --out results/bench && $(PYTHON) scripts/paper_figures.py --out results/figures

bench: data/rl/hopper_selfcollected.hdf5  ## ratios in one run: operator vs SDPA, per-token step (eager, ONNX) vs KV cache, training steps/s per family; the GPU section where CUDA is
	$(PYTHON) scripts/bench.py --out results/bench
	@if $(PYTHON) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then \
		$(PYTHON) scripts/bench_gpu.py --out results/bench/gpu; \
	else echo "no CUDA device: the GPU section (results/bench/gpu, scripts/bench_gpu.py) is measured in a device-kit verify window"; fi

.PHONY: bench-quick
bench-quick: data/rl/hopper_selfcollected.hdf5  ## a first look at `make bench` (a few sizes, one round) -> outputs/bench-quick/
	$(PYTHON) scripts/bench.py --quick

data/rl/hopper_selfcollected.hdf5:  ## the RL family's training data for `make bench`, collected (~10 s) when missing
	$(MAKE) rl-data

lm-cost:  ## CRT Table 1 (FLOPs per forward vs formulas) and Table 6 (params, inference ms/batch) -> results/
	$(PYTHON) scripts/lm_cost.py --out results

device-kit:  ## the git-ignored folder device_kit/ for one GPU window (CHUNK=; default the next unfinished chunk): wheels, data, commit; prints the command to run there (docs/device.md)
	$(PYTHON) -m recurrent_attention.device.kit --python $(DEVICE_PY) $(if $(CHUNK),--chunk $(CHUNK))

device-import:  ## a GPU window's archive (ARCHIVE=device-<chunk>-....tar.gz) into results/runs and results/device; then make results
	$(PYTHON) -m recurrent_attention.device.importer $(ARCHIVE)

.PHONY: mutants
mutants:  ## mutation testing of models/, ops/ and each family's metrics (cosmic-ray, hours; resumable: rerun after a kill; ONLY="ops/scan ..." picks; RETEST=1 reruns survivors after new tests) -> results/mutants/ (docs/mutants.md)
	@$(PYTHON) -c 'import cosmic_ray' 2>/dev/null || $(PYTHON) -m pip install -q -e ".[mutants]"
	nice -n 19 $(PYTHON) scripts/mutants.py $(if $(ONLY),--only $(ONLY)) $(if $(RETEST),--retest-survivors)

.PHONY: help
help:  ## this list: every target and what it does ($(VAR) names a setting: make tables RUNS=outputs)
	@awk -F':[^#]*## ' '/^[a-zA-Z_-]+:[^=]*## /{printf "  %-14s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))
