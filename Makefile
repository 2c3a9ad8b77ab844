# make lab        set up (first time) and open JupyterLab at notebooks/
# make test       set up (first time) and run every test (no GPU needed), in TEST_JOBS processes (default 3;
#                 TEST_JOBS=0 runs them in this one)
# make test-browser  every lesson run whole in JupyterLab in headless Chromium, screenshots into $(OUT)/browser
# make test-gpu   on a GPU machine: tests, notebooks and benchmarks on the GPU, results into $(OUT)
#                 (PY=python3 uses an existing interpreter and installs nothing)
# make format     ruff format + clang-format;  make strip  removes notebook outputs
# make exercises  regenerates kernels/exercises/ from kernels/solutions/

VENV ?= .venv
PY ?= $(VENV)/bin/python
OUT ?= out
TEST_JOBS ?= 3
SETUP := $(if $(filter $(VENV)/%,$(PY)),$(VENV)/.ready)
PIP_QUIET := 2>&1 | grep -v -e "is ignored" -e "^$$" || true

.PHONY: setup lab test test-browser browser-setup test-gpu test-gpu-unit test-gpu-nb test-gpu-times test-gpu-sanitize bench format strip exercises clean

setup: $(SETUP)

$(VENV)/.ready: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip $(PIP_QUIET)
	$(VENV)/bin/python -m pip install -q -r requirements.txt $(PIP_QUIET)
	$(VENV)/bin/python -c "import torch, matplotlib, nbclient, ipykernel" # fail here, not later, if pip did
	$(VENV)/bin/python -m helpers.env --ensure-nvcc
	touch $@

lab: $(SETUP)
	$(PY) -m ipykernel install --sys-prefix --name cuda-course --display-name "CUDA course ($(notdir $(PY)))"
	$(PY) -m jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# --dist loadgroup with the groups tests/conftest.py gives (its scheduler): a file's tests in one process (its
# module fixtures set up once; the loader's tests build on each other), but the exercises' file, a quarter of the
# run, by exercise, the grader's corpus by entry, the notebooks by notebook, and all wheel builds in one process.
# The builds are safe in parallel (the loader locks its cache).
# 3 processes on CI's 2 cores: a process often waits (on a child process, a notebook's kernel, another's build
# lock), and the third keeps both cores busy (a fresh clone's run: 96 % of 2 cores busy with 3, 86 % with 2).
test: $(SETUP)
	$(PY) -m pytest $(if $(filter-out 0,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadgroup)

# The lessons in a browser (tests/browser/): JupyterLab driven in headless Chromium by Playwright. make test runs
# lessons 00 and 01 whole and the other lessons' widget cells (tests/lessons/ runs every lesson whole, headless);
# test-browser runs every lesson whole. Chromium is the system's (Debian: apt-get install chromium; .ci/run
# installs it): Playwright's own browser download is never used. Without either the test skips, saying why.
browser-setup: $(SETUP)
	$(PY) -m pip install -q "playwright>=1.40" $(PIP_QUIET)

test-browser: browser-setup
	mkdir -p $(OUT)/browser
	COURSE_BROWSER_LESSONS=all COURSE_BROWSER_OUT=$(OUT)/browser $(PY) -m pytest -q -p no:cacheprovider tests/browser

# On the GPU machine the parts run one at a time too (each fits a 10-minute call):
#   test-gpu-unit   every test but the notebooks (XDIST="-n 8 --dist loadgroup" where pytest-xdist is
#                   installed: tests/conftest.py groups the tests, a file to a process as a rule)
#   test-gpu-nb     every notebook, with solutions and in learner mode (executed copies in $(OUT))
#   test-gpu-times  the loader's edit/build times, then the benchmark suite (quick: BENCH="--quick")
#   test-gpu-sanitize  every op's kernels under compute-sanitizer's memcheck, racecheck, initcheck and synccheck
#   test-gpu-grade  the grader, every check, on lesson 08's and 09's answers and on each wrong answer of their corpora
test-gpu: test-gpu-unit test-gpu-nb test-gpu-times test-gpu-sanitize test-gpu-grade

test-gpu-unit: $(SETUP)
	mkdir -p $(OUT)
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --ignore=tests/lessons/test_notebooks.py --ignore=tests/lessons/test_notebooks_learner.py > $(OUT)/pytest.log 2>&1; \
	  rc=$$?; grep -E "^(FAILED|ERROR)" $(OUT)/pytest.log | head -n 30; tail -n 2 $(OUT)/pytest.log; exit $$rc

test-gpu-nb: $(SETUP)
	mkdir -p $(OUT)
	COURSE_NB_OUT=$(OUT) $(PY) -m pytest -q -p no:cacheprovider $(XDIST) tests/lessons/test_notebooks.py tests/lessons/test_notebooks_learner.py > $(OUT)/notebooks.log 2>&1; \
	  rc=$$?; grep -E "^(FAILED|ERROR)" $(OUT)/notebooks.log | head -n 30; tail -n 2 $(OUT)/notebooks.log; exit $$rc

test-gpu-times: $(SETUP)
	mkdir -p $(OUT)
	$(PY) -m benchmarks.loader_times --out $(OUT)/loader_times.json > $(OUT)/loader.log 2>&1; rc=$$?; tail -n 12 $(OUT)/loader.log; \
	  $(PY) -m benchmarks.run --out $(OUT) $(BENCH) > $(OUT)/bench.log 2>&1 || rc=1; tail -n 30 $(OUT)/bench.log; exit $$rc

test-gpu-sanitize: $(SETUP)
	mkdir -p $(OUT)
	$(PY) -m benchmarks.sanitize_sweep --out $(OUT)/sanitize > $(OUT)/sanitize.log 2>&1; \
	  rc=$$?; tail -n 40 $(OUT)/sanitize.log; exit $$rc

test-gpu-grade: $(SETUP)
	mkdir -p $(OUT)
	( rc=0; for op in swiglu batchnorm_relu cross_entropy masked_softmax csr_matmul; do \
	    $(PY) -m helpers.grade $$op --solution || rc=1; $(PY) -m helpers.grade_corpus --op $$op || rc=1; done; \
	  exit $$rc ) > $(OUT)/grade.log 2>&1; \
	  rc=$$?; tail -n 50 $(OUT)/grade.log; exit $$rc

# Lessons 08 and 09: the report card of your op (OP=swiglu, the capstone, or a practice op), and the progress
# table of every exercise, the capstone and the practice set.
OP ?= swiglu
grade: $(SETUP)
	$(PY) -m helpers.grade $(OP)

progress: $(SETUP)
	$(PY) -m helpers.grade --course

bench: $(SETUP)
	$(PY) -m benchmarks.run --out results

format: $(SETUP)
	$(PY) -m ruff format . && $(PY) -m ruff check --fix .
	$(VENV)/bin/clang-format -i $$(find kernels -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp')

strip:
	python3 -c "import json,sys,pathlib;\
	[p.write_text(json.dumps({**(nb:=json.loads(p.read_text())), 'cells':[{**c,'outputs':[],'execution_count':None} if c['cell_type']=='code' else c for c in nb['cells']]}, indent=1, ensure_ascii=False)+'\n') for p in pathlib.Path('notebooks').glob('*.ipynb')]"

exercises: $(SETUP)
	$(PY) -m helpers.exercises

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
