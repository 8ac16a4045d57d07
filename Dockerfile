# hvdlite for CPUs: MPICH (from its wheel), PyTorch (CPU), TensorFlow (CPU) with Keras 3, hvdlite and its examples.
# Its default command trains the PyTorch example on 2 ranks. Build from the repository root: make image-cpu
#   docker build -t hvdlite .      (or podman build, the same arguments; the CUDA image: docker/cuda.Dockerfile)
#   docker run --rm hvdlite:cpu
#   docker run --rm hvdlite:cpu hvdliterun -np 4 python /opt/hvdlite/examples/keras_digits.py

# --- build: compilers and headers live only here --------------------------------------------------------------------
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev g++ \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/hvdlite/venv PATH=/opt/hvdlite/venv/bin:$PATH PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv $VIRTUAL_ENV
# PyTorch's CPU wheels (PyPI's torch carries CUDA, gigabytes). Where a local folder of wheels stands in for the
# index, make image-cpu empties this and passes PIP_FIND_LINKS instead (and PIP_CERT for a re-signing proxy).
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS
ARG PIP_CERT
ARG TORCH_REQUIREMENT=torch==2.13.0
RUN pip install "$TORCH_REQUIREMENT" tensorflow-cpu scikit-learn
# hvdlite itself, with build isolation: the build environment brings scikit-build-core, CMake and MPICH's wheel,
# and MPICH becomes a dependency of the installed package.
COPY . /src
RUN pip install /src \
    && mkdir -p /opt/hvdlite/examples && cp /src/examples/*.py /opt/hvdlite/examples/
# The torch.distributed backend, compiled here for the PyTorch above (the final stage has no compiler to build it).
ENV HVDLITE_TORCH_EXTENSION_DIR=/opt/hvdlite/torch-backend
RUN pip install ninja && python -m hvdlite.torch.build && pip uninstall -y ninja \
    && chmod -R a+rX $HVDLITE_TORCH_EXTENSION_DIR \
    && find $VIRTUAL_ENV -name __pycache__ -prune -exec rm -rf {} +

# --- final: Python, the venv, the examples; no compilers ------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 hvd
COPY --from=build /opt/hvdlite /opt/hvdlite
ENV VIRTUAL_ENV=/opt/hvdlite/venv PATH=/opt/hvdlite/venv/bin:$PATH OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
    PYTHONDONTWRITEBYTECODE=1 HVDLITE_TORCH_EXTENSION_DIR=/opt/hvdlite/torch-backend
USER hvd
WORKDIR /home/hvd
CMD ["hvdliterun", "-np", "2", "python", "/opt/hvdlite/examples/torch_digits.py"]
