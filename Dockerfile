# A clean environment for hvdlite's tests: docker build -t hvdlite . && docker run --rm hvdlite
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 OMP_NUM_THREADS=1
# MPI first (the mpich wheel brings mpicxx and mpiexec), frameworks next (CPU-only torch from its own index).
RUN pip install mpich mpi4py numpy \
    && pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install tensorflow-cpu

WORKDIR /src
COPY . .
# Editable, as make test does: the tests import hvdlite from the source tree, which then holds the built core.
RUN pip install -e '.[test]'

CMD ["python", "-m", "pytest", "tests", "-q"]
