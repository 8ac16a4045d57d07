"""The native core's folders (native/src) include each other one way, in the layers docs/architecture.md draws:
each folder includes only folders below it, so a lower part never depends on a higher one; and every include of
the core's own headers is written from native/src (one style), naming a file that is there. A reading of the
sources, as the Python import-graph test is."""
import os
import re

from harness.processes import ROOT

SOURCE = os.path.join(ROOT, "native", "src")
# Lowest first; "" is native/src itself (the core: the C API, the background thread's cycle, the queue, handles).
LAYERS = ["base", "gpu", "transport", "algorithms", "negotiation", "collectives", ""]
INCLUDE = re.compile(r'^\s*#include "([^"]+)"', re.M)
PUBLIC_HEADER = "hvdlite.h"  # native/include: the one C API


def sources(folder):
    for parent, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith((".h", ".cc")):
                yield os.path.join(parent, name)


def includes(path):
    with open(path) as stream:
        return [name for name in INCLUDE.findall(stream.read()) if name != PUBLIC_HEADER]


def test_every_folder_of_the_core_is_a_layer():
    folders = {os.path.relpath(parent, SOURCE).replace(".", "") for parent, _, _ in os.walk(SOURCE)}
    assert folders == set(LAYERS)


def test_includes_name_files_from_the_source_root():
    wrong = [(os.path.relpath(path, ROOT), name)
             for folder in (SOURCE, os.path.join(ROOT, "native", "tests"))
             for path in sources(folder) for name in includes(path)
             if not os.path.isfile(os.path.join(SOURCE, name))]
    assert not wrong, f"includes that do not name a file from native/src: {wrong}"


def test_each_folder_includes_only_the_layers_below_it():
    upward = []
    for path in sources(SOURCE):
        here = os.path.dirname(os.path.relpath(path, SOURCE))
        for name in includes(path):
            there = os.path.dirname(name)
            if there != here and LAYERS.index(there) > LAYERS.index(here):
                upward.append(f"{os.path.relpath(path, SOURCE)} includes {name}")
    assert not upward, "includes against the layers (" + " < ".join(l or "native/src" for l in LAYERS) + "): " + \
        "; ".join(upward)
