"""Python reaches each function of the C header through exactly one of the two bindings: the extension
hvdlite._tensor_calls (native/python/, the calls a training step makes per tensor) or cffi's ABI mode
(hvdlite._native.lib, the rest), and docs/architecture.md names each under its binding. Read from the sources
themselves: a call added through the other binding fails here."""
import glob
import os
import re

from harness.processes import ROOT

# Functions only the torch.distributed backend's C++ calls (it links the core directly).
CXX_ONLY = {"hvdlite_wait_all_for", "hvdlite_wait_any_for"}


def header_functions():
    with open(os.path.join(ROOT, "native", "include", "hvdlite.h")) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    return set(re.findall(r"\b(hvdlite_\w+)\s*\(", text))


def called_in(pattern, paths):
    found = set()
    for path in paths:
        with open(path) as f:
            found |= set(re.findall(pattern, f.read()))
    return found


def python_sources():
    return [p for folder in ("hvdlite", "frameworks", "tests")
            for p in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True)]


def architecture_lists():
    """{binding heading: the hvdlite_ functions its paragraph names} of docs/architecture.md's split section."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        section = f.read().split("### Which binding reaches which C function", 1)[1].split("\n#", 1)[0]
    return {item.split(":", 1)[0]: set(re.findall(r"hvdlite_\w+", item.split(":", 1)[1]))
            for item in re.split(r"\n- ", section)[1:]}


def test_each_function_of_the_header_is_reached_through_one_binding():
    header = header_functions()
    abi = called_in(r"\blib\.(hvdlite_\w+)", python_sources())
    extension = called_in(r"\b(hvdlite_\w+)\s*\(", glob.glob(os.path.join(ROOT, "native", "python", "*.c")))
    assert abi <= header and extension <= header, (abi - header, extension - header)
    assert not abi & extension, f"reached through both bindings: {sorted(abi & extension)}"
    assert abi | extension | CXX_ONLY == header, f"reached by neither: {sorted(header - abi - extension - CXX_ONLY)}"
    lists = architecture_lists()
    named = {binding: functions for binding, functions in lists.items()}
    assert len(named) == 3, list(named)
    extension_doc, abi_doc, cxx_doc = named.values()
    assert (extension_doc, abi_doc, cxx_doc) == (extension, abi, CXX_ONLY), (
        extension_doc ^ extension, abi_doc ^ abi, cxx_doc ^ CXX_ONLY)
