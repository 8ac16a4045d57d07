"""The one C header (native/include/hvdlite.h) as Python reads it: its declarations for cffi (the core's loader,
_native.py), and its enums' constants for the settings whose values are those enums (config.py), parsed without
loading the core or MPI (the launcher reads the settings too)."""
import functools
import os
import re

import cffi

from . import build_info

_SOURCE_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "native", "include", "hvdlite.h")


def path():
    """The header installed beside the core, else the source tree's; None when neither is there."""
    return build_info.native_file("hvdlite.h") or (_SOURCE_HEADER if os.path.exists(_SOURCE_HEADER) else None)


def declarations(header_text):
    """What cffi's cdef takes of the header: no C++ guards, comments or preprocessor lines."""
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", header_text, flags=re.S)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


@functools.lru_cache(maxsize=None)
def parsed():
    """(an FFI that has read the header's declarations, those declarations), read once per process: the core's
    loader opens the library with it, the settings read its enums."""
    header = path()
    if header is None:
        raise ImportError("hvdlite's C header (hvdlite.h) is not installed beside the core: install with "
                          "`pip install .` (see the README)")
    with open(header) as stream:
        text = declarations(stream.read())
    ffi = cffi.FFI()
    ffi.cdef(text)
    return ffi, text


def enums():
    """{enum name: {constant name: value}} of every enum in the header, as cffi's parser reads it."""
    ffi, text = parsed()
    return {enum: dict(ffi.typeof(f"enum {enum}").relements) for enum in re.findall(r"\benum\s+(\w+)\s*\{", text)}


def enum_choices(enum):
    """An enum's constants as the lower-case words after their common prefix, in the order of their values, which
    must number 0, 1, ...: enum_choices("hvdlite_overlap") -> ("auto", "on", "off"), so that a setting's index
    among them is the value the core takes."""
    constants = enums()[enum]
    prefix = os.path.commonprefix(list(constants)).rpartition("_")[0] + "_"
    by_value = {value: name[len(prefix):].lower() for name, value in constants.items()}
    if sorted(by_value) != list(range(len(constants))):
        raise ValueError(f"hvdlite.h: enum {enum} must number its constants 0, 1, ...: {constants}")
    return tuple(by_value[value] for value in range(len(by_value)))
