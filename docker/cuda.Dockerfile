# hvdlite for NVIDIA GPUs: PyTorch's CUDA wheels (they bring the CUDA runtime and NCCL from PyPI), MPICH, hvdlite
# (built without CUDA: it loads libcuda and NCCL at run time) and its examples. The host needs only the driver:
#   make image-cuda      (or: docker build -f docker/cuda.Dockerfile -t hvdlite:cuda .)
#   docker run --rm --gpus all hvdlite:cuda
# Without a GPU it runs on the CPU path, as every hvdlite install does.

# --- build -----------------------------------------------------------------------------------------------------------
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev g++ \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/hvdlite/venv PATH=/opt/hvdlite/venv/bin:$PATH PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv $VIRTUAL_ENV
ARG PIP_CERT
# PyPI's torch is the CUDA 13 build; its nvidia-* dependencies hold the CUDA runtime libraries and NCCL (the
# cuda13 extra asks for the same NCCL wheel).
ARG TORCH_REQUIREMENT=torch==2.13.0
RUN pip install --no-cache-dir "$TORCH_REQUIREMENT" scikit-learn
COPY . /src
RUN pip install "/src[cuda13]" \
    && mkdir -p /opt/hvdlite/examples && cp /src/examples/*.py /opt/hvdlite/examples/
# The torch.distributed backend, compiled here for the PyTorch above (the final stage has no compiler to build it; its
# sources use c10's device-generic stream API, so no CUDA toolkit is needed for it).
ENV HVDLITE_TORCH_EXTENSION_DIR=/opt/hvdlite/torch-backend
RUN pip install ninja && python -m hvdlite.torch.build && pip uninstall -y ninja \
    && chmod -R a+rX $HVDLITE_TORCH_EXTENSION_DIR \
    && find $VIRTUAL_ENV -name __pycache__ -prune -exec rm -rf {} +

# --- final -----------------------------------------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 hvd
COPY --from=build /opt/hvdlite /opt/hvdlite
# The NVIDIA container toolkit mounts the driver (libcuda.so.1) when these ask for it.
ENV VIRTUAL_ENV=/opt/hvdlite/venv PATH=/opt/hvdlite/venv/bin:$PATH OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HVDLITE_TORCH_EXTENSION_DIR=/opt/hvdlite/torch-backend
USER hvd
WORKDIR /home/hvd
CMD ["hvdliterun", "-np", "2", "python", "/opt/hvdlite/examples/torch_digits.py"]
