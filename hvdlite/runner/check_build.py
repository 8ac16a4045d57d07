"""``hvdliterun --check-build``: what this installation can run, laid out as horovodrun lays it out, so that a
Horovod user reads it at a glance. Frameworks are those whose package is installed (the adapters are plain
Python over the core); NCCL is marked where GPU tensors would go through it in this environment (a CUDA driver
that sees a GPU, and NCCL found at run time: hvdlite.gpu)."""
import importlib.metadata

from .. import __version__, build_info

FRAMEWORKS = (("TensorFlow", ("tensorflow", "tensorflow-cpu")), ("PyTorch", ("torch",)), ("MXNet", ()))


def installed_version(distributions):
    """The version of the first of ``distributions`` that is installed, or None."""
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def report():
    """The text --check-build prints."""
    from ..gpu import gpu_status  # loads the core and the MPI library: only when asked
    mpi = build_info.read().get("mpi_library_version", "").strip().splitlines()[:1]
    gpu = gpu_status()

    def line(available, name, detail=""):
        return f"    [{'X' if available else ' '}] {name}{f' ({detail})' if detail else ''}"
    lines = [f"hvdlite v{__version__}:", "", "Available Frameworks:"]
    for name, distributions in FRAMEWORKS:
        version = installed_version(distributions)
        lines.append(line(version, name, version or ""))
    lines += ["", "Available Controllers:", line(True, "MPI", " ".join(mpi[0].split()) if mpi else ""),
              line(False, "Gloo"), "", "Available Tensor Operations:",
              line(gpu["nccl_collectives"], "NCCL", gpu["nccl_version"] if gpu["nccl_collectives"]
                   else gpu["collectives_reason"]),
              line(False, "DDL"), line(False, "CCL"), line(True, "MPI"), line(False, "Gloo")]
    return "\n".join(lines)
