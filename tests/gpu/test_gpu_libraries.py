"""Finding and loading the GPU libraries at run time (hvdlite.gpu_status()) on a machine without a GPU.

The real NCCL of the nvidia-nccl-cu12 wheel (installed by make test) is found in its wheel folder and reports its
version. The search order and the refusals are checked with stub libraries compiled here: TEST DOUBLES of
libnccl.so.2 that export NCCL's function names and a chosen version, standing in for NCCL only in what the loader
looks at (file, symbols, version); they are evidence for the loader's logic, not for NCCL. Each check runs in a
fresh process, since a process loads its GPU libraries once."""
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from harness.processes import run

NCCL_FUNCTIONS = ["ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
                  "ncclCommGetAsyncError", "ncclGetErrorString", "ncclAllReduce", "ncclAllGather", "ncclBroadcast", "ncclReduce",
                  "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"]

STATUS = "import json, hvdlite; print('STATUS', json.dumps(hvdlite.gpu_status()))"


def stub_nccl(folder, version, leave_out=()):
    """A test double of libnccl.so.2 in folder: NCCL's soname and exported names; ncclGetVersion says version."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "stub.c"
    lines = [f"int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}"]
    lines += [f"int {name}(void) {{ return 1; }}" for name in NCCL_FUNCTIONS[1:] if name not in leave_out]
    source.write_text("\n".join(lines) + "\n")
    library = folder / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(library), str(source)], check=True)
    return library


def status(env=None, code=STATUS, pythonpath=None):
    full_env = dict(env or {})
    if pythonpath:
        full_env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    returncode, output = run([sys.executable, "-c", code], timeout=120, env=full_env)
    assert returncode == 0, output
    line = next(line for line in output.splitlines() if line.startswith("STATUS "))
    return json.loads(line[len("STATUS "):])


def wheel_like_site(tmp_path, name, version, **kwargs):
    """A folder laid out like site-packages holding the nvidia-nccl wheel (nvidia/nccl/lib/libnccl.so.2)."""
    site = tmp_path / name
    return site, stub_nccl(site / "nvidia" / "nccl" / "lib", version, **kwargs)


def test_without_a_driver_import_works_and_nothing_is_claimed():
    found = status()
    assert found["cuda_driver"] is False and found["gpus"] == 0
    assert "libcuda.so.1" in found["cuda_reason"], found
    assert found["nccl_collectives"] is False and found["collectives_reason"], found
    returncode, output = run([sys.executable, "-c", "import hvdlite.torch as hvd; print('NCCL', hvd.nccl_built())"],
                             timeout=120)
    assert returncode == 0 and "NCCL False" in output, output


def test_the_real_nccl_is_found_in_its_wheel_folder():
    found = status()
    expected = importlib.metadata.version("nvidia-nccl-cu12")
    assert found["nccl"], found["nccl_reason"]
    assert found["nccl_path"].endswith(os.path.join("site-packages", "nvidia", "nccl", "lib", "libnccl.so.2"))
    assert found["nccl_version"] == expected, (found, expected)


def test_the_first_wheel_folder_on_the_path_wins(tmp_path):
    site, stub = wheel_like_site(tmp_path, "site", 23001)
    found = status(pythonpath=[site])
    assert found["nccl"] and found["nccl_path"] == str(stub) and found["nccl_version"] == "2.30.1", found


def test_an_explicit_library_is_used_and_nothing_else(tmp_path):
    site, in_wheel = wheel_like_site(tmp_path, "site", 23001)
    explicit = stub_nccl(tmp_path / "explicit", 22107)
    found = status(env={"HVDLITE_NCCL_LIBRARY": str(explicit)}, pythonpath=[site])
    assert found["nccl_path"] == str(explicit) and found["nccl_version"] == "2.21.7", found
    missing = tmp_path / "nowhere" / "libnccl.so.2"
    found = status(env={"HVDLITE_NCCL_LIBRARY": str(missing)}, pythonpath=[site])
    assert not found["nccl"] and f"HVDLITE_NCCL_LIBRARY={missing}" in found["nccl_reason"], found


def test_a_copy_already_loaded_comes_before_the_wheels(tmp_path):
    """As with PyTorch's CUDA wheels, which load their own NCCL: hvdlite uses that one, not a second copy."""
    site, _ = wheel_like_site(tmp_path, "site", 23001)
    loaded = stub_nccl(tmp_path / "loaded_by_torch", 22803)
    code = f"import ctypes; ctypes.CDLL({str(loaded)!r}, mode=ctypes.RTLD_GLOBAL); {STATUS}"
    found = status(code=code, pythonpath=[site])
    assert found["nccl_path"] == str(loaded) and found["nccl_version"] == "2.28.3", found


@pytest.mark.parametrize("version, leave_out, expected", [
    (22803, ("ncclCommGetAsyncError",), "lacks ncclCommGetAsyncError"),
    (2304, (), "is NCCL 2.3.4; hvdlite needs 2.4.0 or newer"),
])
def test_an_unusable_library_is_refused_with_the_reason(tmp_path, version, leave_out, expected):
    stub = stub_nccl(tmp_path / "bad", version, leave_out)
    found = status(env={"HVDLITE_NCCL_LIBRARY": str(stub)})
    assert not found["nccl"] and expected in found["nccl_reason"] and str(stub) in found["nccl_reason"], found


def test_every_place_looked_at_is_named_when_nothing_is_found(tmp_path):
    """The core's search alone (no wheel folder on the path): each folder given and the default search."""
    folders = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    code = ("from hvdlite._native import ffi, lib\n"
            "s = ffi.new('hvdlite_gpu_status *')\n"
            f"lib.hvdlite_gpu_load(b'', {folders!r}.encode(), s)\n"
            "print('REASON', ffi.string(s.nccl_reason).decode().replace(chr(10), '|'), s.nccl_loaded)")
    returncode, output = run([sys.executable, "-c", code], timeout=120)
    assert returncode == 0, output
    reason = next(line for line in output.splitlines() if line.startswith("REASON"))
    assert f"{tmp_path / 'a'}/libnccl.so.2: no such file" in reason, reason
    assert f"{tmp_path / 'b'}/libnccl.so.2: no such file" in reason and "(default search)" in reason, reason
    assert "hvdlite[cuda12]" in reason and reason.endswith(" 0"), reason
