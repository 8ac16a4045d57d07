#!/usr/bin/env bash
# hvdlite's GPU checks, for a machine with one NVIDIA GPU, its driver, Python with PyTorch built for CUDA (which
# brings NCCL), mpi4py with an MPI, a C++ compiler and CMake; at most 10 minutes with the build. Run from anywhere:
#   bash tests/gpu/run.sh            (WHEELS=dir: install what is missing, the MPICH wheel for this Python
#                                     included, from the wheels in dir, offline)
# It builds hvdlite into this Python (pip install --no-build-isolation), then:
#   (a) 1 rank: every collective and dtype on CUDA tensors against CPU references, stream ordering (a kernel
#       writes the tensor just before the all-reduce, behind a GPU sleep, no host synchronisation), fusion of
#       256 small tensors;
#   (b) the same with 2 ranks on the one GPU: NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1, older NCCL with a
#       different NCCL_HOSTID per rank (two "hosts"); it says which;
#   (c) DistributedOptimizer training on CUDA equal to the same training on the CPU (2 ranks);
#   (d) hvdlite vs torch.distributed (NCCL) all-reduce, 1-256 MiB, 2 ranks: times and their ratio;
#   (e) elastic commits of a model and Adam state on the GPU (2 ranks: the host's writer and a rank keeping its own
#       copy): restore() and the commit read back as after a restart give every tensor back on the GPU, bitwise;
#   (f) the torch.distributed backend on CUDA tensors (2 ranks): its collectives against references, then DDP on
#       "hvdlite" against DDP on torch's NCCL backend, equal parameters and their samples/s.
# Everything is printed; the exit code is the number of checks that failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
out=${OUT:-$root/build/gpu-check}
mkdir -p "$out"
cd "$root"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1

if [ -n "${WHEELS:-}" ]; then
  echo "== wheels from $WHEELS"
  # Only what this Python lacks is installed; an installed package of any version is kept.
  "$python" -m pip install -q --no-index --find-links "$WHEELS" scikit-build-core cmake ninja cffi ml_dtypes \
    mpich mpi4py 2>&1 | grep -v "as the 'root' user" | tail -3
fi
# The MPICH wheel's mpicxx and mpiexec live beside this Python's scripts.
PATH="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
"$python" - <<'PY'
import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| GPU", torch.cuda.get_device_name() if torch.cuda.is_available() else None,
      "| torch's NCCL", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)
try:
    from mpi4py import MPI
    print("mpi4py", MPI.Get_library_version().splitlines()[0])
except Exception as error:
    print("mpi4py missing:", error)
PY
for tool in mpicxx mpiexec cmake c++; do printf '%s: %s\n' "$tool" "$(command -v $tool || echo none)"; done

echo "== install"
"$python" -m pip install --no-build-isolation --no-deps . 2>&1 | tee "$out/install.log" | tail -3
mpiexec=$(command -v mpiexec)
cd "$out"  # the installed package, not the source folder, from here on
"$python" -c "import hvdlite, json; print(json.dumps(hvdlite.gpu_status(), indent=1))" || exit 100

failed=0
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log" | tail -40
  local code=${PIPESTATUS[0]}
  echo "-- $name: exit $code after $((SECONDS - start)) s"
  [ "$code" -eq 0 ] || failed=$((failed + 1))
}

step a-one-rank 60 "$mpiexec" -n 1 "$python" "$root/tests/gpu/check_collectives.py"

nccl=$("$python" -c "import hvdlite; print(hvdlite.gpu_status()['nccl_version'])")
if "$python" -c "import sys; v=tuple(map(int, '$nccl'.split('.'))); sys.exit(0 if v >= (2, 30) else 1)"; then
  echo "NCCL $nccl: two ranks on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1"
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  two=("$mpiexec" -n 2)
else
  echo "NCCL $nccl (older than 2.30): two ranks on one GPU as two hosts (NCCL_HOSTID per rank)"
  two=("$mpiexec" -n 2 "$here/rank_hostid.sh")
fi
step b-two-ranks-one-gpu 90 "${two[@]}" "$python" "$root/tests/gpu/check_collectives.py"
step c-training-equal 80 "${two[@]}" "$python" "$root/tests/gpu/train_equal.py"
step d-vs-torch-distributed 120 "${two[@]}" "$python" "$root/bench/gpu_allreduce.py" --json "$out/gpu_allreduce.json"
step e-elastic-commit 60 env HVDLITE_ELASTIC_COMMIT_DIR="$out/elastic" "${two[@]}" "$python" \
  "$root/tests/gpu/elastic_commit.py"
step f-ddp-on-hvdlite 150 "${two[@]}" "$python" "$root/tests/gpu/ddp_on_hvdlite.py" --json "$out/ddp_on_hvdlite.json"
echo "== $failed of 6 checks failed"
exit "$failed"
