"""Builds hvdlite: the Python packages, and the native core compiled with the MPI C++ wrapper (mpicxx).

The core is a plain shared library (hvdlite/libhvdlite_core.so) that Python loads through cffi's ABI mode, so it
is built by a custom build_ext: every native/src/**/*.cc compiled in parallel, object files cached under build/
so that re-builds only compile what changed, then linked against the libmpi that mpicxx names. Beside it, one
ordinary CPython extension (hvdlite._tensor_calls, native/python/) makes the per-tensor calls; it links
against the core.
"""
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from multiprocessing.pool import ThreadPool

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(ROOT, "native")
LIBRARY_NAME = "libhvdlite_core.so"
# HVDLITE_SANITIZE=address (AddressSanitizer + UndefinedBehaviorSanitizer) or thread (ThreadSanitizer) builds the
# core and the extension instrumented, for tests/sanitizers/run.sh; their runtime must then be preloaded.
SANITIZE = os.environ.get("HVDLITE_SANITIZE", "")
SANITIZER_FLAGS = {
    "": [],
    "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g"],
    "thread": ["-fsanitize=thread", "-fno-omit-frame-pointer", "-g"],
}
if SANITIZE not in SANITIZER_FLAGS:
    raise SystemExit(f"hvdlite: HVDLITE_SANITIZE={SANITIZE!r}: use address or thread (or leave it unset)")
OPTIMIZE = ["-O1"] if SANITIZE else ["-O3"]
WARNINGS = ["-Wall", "-Wextra"]
# CPython fixes the C extension's callback signatures (module, closure, kwargs arguments that a function need not
# read) and its type and module structs are filled by designated initialisers that leave the rest zero on purpose.
C_EXTENSION_WARNINGS = [*WARNINGS, "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
CXXFLAGS = ["-std=c++17", *OPTIMIZE, *WARNINGS, "-fno-math-errno", "-fPIC", "-pthread", *SANITIZER_FLAGS[SANITIZE],
            "-I" + os.path.join(NATIVE, "include"), "-I" + os.path.join(NATIVE, "src")]
# The soname lets the hot-path extension (linked against the core) share the copy cffi loaded: one core per process.
LDFLAGS = ["-shared", "-pthread", "-Wl,--no-undefined", "-Wl,--as-needed", "-Wl,-soname," + LIBRARY_NAME,
           *SANITIZER_FLAGS[SANITIZE]]
INSTALL_MPI_HINT = ("install an MPI with its C++ wrapper: `pip install mpich mpi4py` (then mpicxx is in the "
                    "environment's bin/), or `apt-get install libopenmpi-dev` (Open MPI), or set MPICXX=/path/to/mpicxx")

# Framework adapters live outside the hvdlite folder; each becomes a subpackage once its folder exists.
FRAMEWORK_PACKAGES = {
    "hvdlite.torch": "frameworks/torch",
    "hvdlite.tensorflow": "frameworks/tensorflow",
    "hvdlite.tensorflow.keras": "frameworks/tensorflow/keras",
    "hvdlite.keras": "frameworks/keras",
}


class NativeBuildError(SystemExit):
    """Ends the build with a message (not a traceback) saying what is missing and how to get it."""

    def __init__(self, message):
        super().__init__(f"\nhvdlite: {message}\n")


def find_mpicxx():
    """$MPICXX, else mpicxx on PATH, else the one in this Python's environment (the mpich wheel puts it there)."""
    explicit = os.environ.get("MPICXX")
    candidates = [explicit] if explicit else [
        shutil.which("mpicxx"),
        os.path.join(sys.prefix, "bin", "mpicxx"),
        os.path.join(os.path.dirname(sys.executable), "mpicxx"),
    ]
    for candidate in candidates:
        path = candidate and shutil.which(candidate)
        if path:
            if os.path.basename(path).startswith("mpicxx_abi"):
                # The MPI-ABI wrapper links libmpi_abi, not the libmpi that mpi4py loads.
                raise NativeBuildError(f"{path} is MPICH's MPI-ABI wrapper; use mpicxx (set MPICXX)")
            return path
    where = f"MPICXX={explicit} is not an executable" if explicit else \
        f"no mpicxx on PATH nor in {os.path.join(sys.prefix, 'bin')}"
    raise NativeBuildError(f"cannot build the native core: {where}.\n  Fix: {INSTALL_MPI_HINT}.")


def wrapper_command_line(mpicxx):
    """What mpicxx runs, as a list: MPICH spells it -show, Open MPI --showme."""
    for flag in ("-show", "--showme"):
        try:
            result = subprocess.run([mpicxx, flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    timeout=60)
        except OSError as error:
            raise NativeBuildError(f"cannot run {mpicxx}: {error}.\n  Fix: {INSTALL_MPI_HINT}.")
        if result.returncode == 0 and result.stdout.strip():
            return shlex.split(result.stdout.strip())
    raise NativeBuildError(f"{mpicxx} -show / --showme failed; is it an MPI C++ wrapper?\n  Fix: {INSTALL_MPI_HINT}.")


def check_compiler(mpicxx, wrapped):
    compiler = wrapped[0]
    if not shutil.which(compiler):
        raise NativeBuildError(f"{mpicxx} calls the C++ compiler {compiler!r}, which is not installed.\n"
                               f"  Fix: apt-get install g++ (or build-essential), or point MPICXX at another wrapper.")


def library_dirs(wrapped):
    return [arg[2:] for arg in wrapped if arg.startswith("-L") and len(arg) > 2]


def mpiexec_beside(mpicxx):
    """The launcher of the same MPI: next to its mpicxx, else the first on PATH."""
    mpiexec = os.path.join(os.path.dirname(mpicxx), "mpiexec")
    return mpiexec if os.access(mpiexec, os.X_OK) else shutil.which("mpiexec")


def _dependencies_newer_than(object_path, depfile):
    """True when the object is missing or older than any file its -MMD dependency list names."""
    if not (os.path.exists(object_path) and os.path.exists(depfile)):
        return True
    with open(depfile) as stream:
        text = stream.read().replace("\\\n", " ")
    _, _, prerequisites = text.partition(":")
    built = os.path.getmtime(object_path)
    for path in prerequisites.split():
        if not os.path.exists(path) or os.path.getmtime(path) > built:
            return True
    return False


def compile_sources(mpicxx, sources, object_dir, jobs):
    """Compiles what changed, jobs at a time; returns the object files in the order of sources."""
    objects, stale = [], []
    for source in sources:
        relative = os.path.relpath(source, os.path.join(NATIVE, "src"))
        obj = os.path.join(object_dir, relative[:-len(".cc")] + ".o")
        objects.append(obj)
        if _dependencies_newer_than(obj, obj[:-2] + ".d"):
            stale.append((source, obj))

    def compile_one(item):
        source, obj = item
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        # Write under temporary names and rename: two builds of one tree at once never see half an object.
        partial = f"{obj[:-2]}.{os.getpid()}.{threading.get_ident()}"
        command = [mpicxx, *CXXFLAGS, "-MMD", "-MT", obj, "-MF", partial + ".d", "-c", source, "-o", partial + ".o"]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode == 0:
            os.replace(partial + ".o", obj)
            os.replace(partial + ".d", obj[:-2] + ".d")
        else:
            for leftover in (partial + ".o", partial + ".d"):
                if os.path.exists(leftover):
                    os.remove(leftover)
        return source, command, result

    failures = []
    with ThreadPool(jobs) as pool:
        for source, command, result in pool.imap_unordered(compile_one, stale):
            if result.returncode != 0:
                failures.append(f"{shlex.join(command)}\n{result.stdout}")  # reported once, at the end
                continue
            print(f"hvdlite: compiled {os.path.relpath(source, ROOT)}", flush=True)
            if result.stdout:
                print(result.stdout, flush=True)  # warnings
    if failures:
        raise NativeBuildError("compiling the native core failed:\n" + "\n".join(failures))
    return objects


def build_native_library(output_path, jobs=None):
    """Compiles native/src/**/*.cc and links output_path; writes hvdlite.h and build_info.json beside it."""
    mpicxx = find_mpicxx()
    wrapped = wrapper_command_line(mpicxx)
    check_compiler(mpicxx, wrapped)
    sources = sorted(glob.glob(os.path.join(NATIVE, "src", "**", "*.cc"), recursive=True))
    if not sources:
        raise NativeBuildError(f"no C++ sources under {os.path.join(NATIVE, 'src')}")
    # Objects of different wrappers or flags never mix: each combination has its own cache folder.
    key = hashlib.sha1(json.dumps([mpicxx, wrapped, CXXFLAGS, LDFLAGS]).encode()).hexdigest()[:12]
    objects = compile_sources(mpicxx, sources, os.path.join(ROOT, "build", "native-objects", key),
                              jobs or os.cpu_count() or 2)
    package_dir = os.path.dirname(output_path)
    info_path = os.path.join(package_dir, "build_info.json")
    if _is_up_to_date(output_path, objects, info_path, key):
        return
    rpaths = [f"-Wl,-rpath,{d}" for d in library_dirs(wrapped)]  # find the same libmpi at run time
    _link(mpicxx, output_path, objects, rpaths)
    shutil.copyfile(os.path.join(NATIVE, "include", "hvdlite.h"), os.path.join(package_dir, "hvdlite.h"))
    with open(info_path, "w") as stream:  # read by the launcher to pick the matching mpiexec
        json.dump({"mpicxx": mpicxx, "mpiexec": mpiexec_beside(mpicxx), "compiler": wrapped[0],
                   "library_dirs": library_dirs(wrapped), "objects_key": key}, stream, indent=1)
    print(f"hvdlite: built {output_path} with {mpicxx}", flush=True)


def _is_up_to_date(output_path, objects, info_path, key):
    """The library was linked by this build setup from these very objects."""
    try:
        with open(info_path) as stream:
            same_setup = json.load(stream).get("objects_key") == key
        linked = os.path.getmtime(output_path)
    except (OSError, ValueError):
        return False
    return same_setup and os.path.exists(os.path.join(os.path.dirname(output_path), "hvdlite.h")) and \
        all(os.path.getmtime(obj) <= linked for obj in objects)


def _link(mpicxx, output_path, objects, rpaths):
    os.makedirs(os.path.dirname(output_path), exist_ok=True)
    # Link beside the target and rename over it: processes that have the old library loaded keep their copy.
    partial = f"{output_path}.{os.getpid()}.partial"
    command = [mpicxx, *LDFLAGS, "-o", partial, *objects, *rpaths]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        if os.path.exists(partial):
            os.remove(partial)
        raise NativeBuildError(f"linking the native core failed:\n{shlex.join(command)}\n{result.stdout}")
    os.replace(partial, output_path)


def _replace_file(source, target):
    partial = f"{target}.{os.getpid()}.partial"
    shutil.copy2(source, partial)
    os.replace(partial, target)


# The per-tensor calls (submit, wait, release, and the NumPy all-reduces) as a CPython extension: C with Python.h,
# NumPy's C API and the core's header, linked against the core beside it (native/python/module.c: its parts).
TENSOR_CALLS_SOURCES = ["module.c", "core_handles.c", "int_handles.c", "prepared_request.c", "request_objects.c",
                        "array_collectives.c", "named_allreduce.c", "output_arena.c"]
TENSOR_CALLS = Extension("hvdlite._tensor_calls", sources=[f"native/python/{name}" for name in TENSOR_CALLS_SOURCES],
                         include_dirs=[os.path.join(NATIVE, "include")], libraries=["hvdlite_core"],
                         depends=[*glob.glob("native/python/*.h"), "native/include/hvdlite.h"],
                         extra_compile_args=["-O1" if SANITIZE else "-O2", *C_EXTENSION_WARNINGS,
                                             *SANITIZER_FLAGS[SANITIZE]],
                         extra_link_args=["-Wl,-rpath,$ORIGIN", *SANITIZER_FLAGS[SANITIZE]])


def numpy_include():
    """NumPy's C headers (the NumPy all-reduces of the hot-path extension use its C API)."""
    try:
        import numpy
    except ImportError:
        raise NativeBuildError("cannot build hvdlite._tensor_calls: NumPy is not installed in the building Python.\n"
                               "  Fix: pip install numpy (or build with build isolation, which installs it).")
    return numpy.get_include()


class NativeLibrary(Extension):
    """Marks the core for build_ext; it is a plain shared library, not a Python extension module."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class BuildNative(build_ext):
    def get_ext_filename(self, fullname):
        # Called with the full dotted name (outputs) and with its last part (get_ext_fullpath): no ABI suffix.
        if fullname in ("hvdlite.libhvdlite_core", "libhvdlite_core"):
            return os.path.join(*fullname.split(".")[:-1], LIBRARY_NAME)
        return super().get_ext_filename(fullname)

    def copy_extensions_to_source(self):
        # --inplace and editable installs: setuptools built into build_lib and copies from there; copy the header
        # and build info too, and rename into place (copying over a loaded library would corrupt running jobs).
        package_dir = os.path.abspath(self.get_finalized_command("build_py").get_package_dir("hvdlite"))
        tensor_calls = os.path.basename(self.get_ext_filename(TENSOR_CALLS.name))
        for name in (LIBRARY_NAME, tensor_calls, "hvdlite.h", "build_info.json"):
            _replace_file(os.path.join(self.build_lib, "hvdlite", name), os.path.join(package_dir, name))

    def build_extension(self, ext):
        if isinstance(ext, NativeLibrary):
            build_native_library(self.get_ext_fullpath(ext.name), jobs=self.parallel or None)
        else:
            include = sysconfig.get_paths()["include"]
            if not os.path.exists(os.path.join(include, "Python.h")):
                raise NativeBuildError(f"cannot build {ext.name}: no Python.h in {include}.\n  Fix: install this "
                                       f"Python's headers (apt-get install python3-dev, or the -dev package "
                                       f"of your Python).")
            # Link against the core just built (build_extension runs in ext_modules order: the core first).
            ext.library_dirs = [os.path.dirname(self.get_ext_fullpath("hvdlite.libhvdlite_core"))]
            ext.include_dirs = ext.include_dirs + [numpy_include()]
            super().build_extension(ext)


def framework_packages():
    """{package: folder} for the adapters whose folders exist, their subpackages included."""
    mapping = {}
    for package, folder in FRAMEWORK_PACKAGES.items():
        if not os.path.isdir(os.path.join(ROOT, folder)):
            continue
        mapping[package] = folder
        for sub in find_packages(os.path.join(ROOT, folder)):
            mapping.setdefault(f"{package}.{sub}", f"{folder}/{sub.replace('.', '/')}")
    return mapping


FRAMEWORKS = framework_packages()

setup(
    name="hvdlite",
    version="0.1.0",
    description="Horovod-style data-parallel training over MPI: native C++ core, PyTorch and TensorFlow adapters",
    long_description=open(os.path.join(ROOT, "README.md")).read() if os.path.exists(
        os.path.join(ROOT, "README.md")) else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["hvdlite", "hvdlite.run", *sorted(FRAMEWORKS)],
    package_dir=FRAMEWORKS,
    ext_modules=[NativeLibrary("hvdlite.libhvdlite_core"), TENSOR_CALLS],
    cmdclass={"build_ext": BuildNative},
    install_requires=["numpy", "cffi", "mpi4py", "ml_dtypes"],
    extras_require={
        "test": ["pytest", "pytest-timeout", "scikit-learn"],
        "torch": ["torch"],
        "tensorflow": ["tensorflow-cpu"],
    },
    entry_points={"console_scripts": ["hvdliterun = hvdlite.run.__main__:main"]},
    zip_safe=False,
)
