"""The configuration table: parsing, Horovod aliases, errors, the C struct, and the copy in docs/configuration.md."""
import os
import re

import cffi
import pytest

from harness.processes import ROOT
from hvdlite import config, native_header


def _config_ffi():
    """An FFI that knows hvdlite_config exactly as native/include/hvdlite.h declares it."""
    with open(os.path.join(ROOT, "native", "include", "hvdlite.h")) as stream:
        header = re.sub(r"/\*.*?\*/", "", stream.read(), flags=re.S)
    struct = re.search(r"typedef struct \{[^}]*\} hvdlite_config;", header).group(0)
    ffi = cffi.FFI()
    ffi.cdef(struct)
    return ffi


def test_defaults_when_nothing_is_set():
    settings = config.resolve({})
    assert settings["fusion_threshold_bytes"] == 64 * 1024 * 1024
    assert settings["cycle_time_ms"] == 1.0
    assert settings["cache_capacity"] == 1024
    assert settings["stall_check_seconds"] == 60.0
    assert settings["stall_shutdown_seconds"] == 0.0
    assert settings["stall_check_disable"] is False
    assert settings["allreduce_algorithm"] == "auto"
    assert settings["ring_segment_bytes"] == 4 * 1024 * 1024
    assert settings["auto_ring_min_bytes"] == 256 * 1024
    assert settings["log_level"] == "warning"
    assert settings["timeline_path"] == ""
    assert settings["autotune"] is False


def test_hvdlite_variables_are_parsed_to_their_types():
    settings = config.resolve({"HVDLITE_FUSION_THRESHOLD": "0", "HVDLITE_CYCLE_TIME": "2.5",
                               "HVDLITE_ALLREDUCE_ALGORITHM": "Ring", "HVDLITE_LOG_LEVEL": "DEBUG",
                               "HVDLITE_AUTOTUNE": "yes", "HVDLITE_TIMELINE": "/tmp/t.json"})
    assert settings["fusion_threshold_bytes"] == 0
    assert settings["cycle_time_ms"] == 2.5
    assert settings["allreduce_algorithm"] == "ring"
    assert settings["log_level"] == "debug"
    assert settings["autotune"] is True
    assert settings["timeline_path"] == "/tmp/t.json"


@pytest.mark.parametrize("alias,name,raw,value", [
    ("HOROVOD_FUSION_THRESHOLD", "fusion_threshold_bytes", "1024", 1024),
    ("HOROVOD_CYCLE_TIME", "cycle_time_ms", "5", 5.0),
    ("HOROVOD_CACHE_CAPACITY", "cache_capacity", "0", 0),
    ("HOROVOD_TIMELINE", "timeline_path", "tl.json", "tl.json"),
    ("HOROVOD_LOG_LEVEL", "log_level", "error", "error"),
    ("HOROVOD_AUTOTUNE", "autotune", "1", True),
    ("HOROVOD_STALL_CHECK_DISABLE", "stall_check_disable", "true", True),
])
def test_horovod_names_are_accepted_as_aliases(alias, name, raw, value):
    assert config.resolve({alias: raw})[name] == value


def test_hvdlite_name_wins_over_horovod_alias():
    settings = config.resolve({"HOROVOD_CYCLE_TIME": "9", "HVDLITE_CYCLE_TIME": "3"})
    assert settings["cycle_time_ms"] == 3.0


@pytest.mark.parametrize("variable,raw", [
    ("HVDLITE_FUSION_THRESHOLD", "lots"),
    ("HVDLITE_FUSION_THRESHOLD", "-1"),
    ("HOROVOD_CYCLE_TIME", "abc"),
    ("HVDLITE_CYCLE_TIME", "nan"),
    ("HVDLITE_CACHE_CAPACITY", "1.5"),
    ("HVDLITE_ALLREDUCE_ALGORITHM", "tree"),
    ("HVDLITE_LOG_LEVEL", "verbose"),
    ("HVDLITE_AUTOTUNE", "maybe"),
])
def test_bad_value_is_a_value_error_naming_variable_and_value(variable, raw):
    with pytest.raises(ValueError) as error:
        config.resolve({variable: raw})
    assert variable in str(error.value)
    assert repr(raw) in str(error.value)


def test_every_setting_has_an_hvdlite_variable_and_horovod_aliases_are_horovod_names():
    names = [s.env for s in config.SETTINGS]
    assert len(names) == len(set(names))
    assert all(name.startswith("HVDLITE_") for name in names)
    assert all(s.alias.startswith("HOROVOD_") for s in config.SETTINGS if s.alias)


def test_to_native_fills_the_c_struct():
    ffi = _config_ffi()
    settings = config.resolve({"HVDLITE_FUSION_THRESHOLD": "4096", "HVDLITE_CYCLE_TIME": "0.5",
                               "HVDLITE_CACHE_CAPACITY": "7", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30",
                               "HVDLITE_ALLREDUCE_ALGORITHM": "mpi", "HVDLITE_RING_SEGMENT_BYTES": "65536",
                               "HVDLITE_AUTO_RING_MIN_BYTES": "1", "HVDLITE_LOG_LEVEL": "info",
                               "HVDLITE_TIMELINE": "/tmp/timeline.json", "HVDLITE_TIMELINE_MARK_CYCLES": "1",
                               "HVDLITE_AUTOTUNE": "1", "HVDLITE_AUTOTUNE_LOG": "/tmp/tune.csv",
                               "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0", "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE": "3",
                               "HVDLITE_CROSS_HOST_TRANSPORT": "mpi", "HVDLITE_NETWORK_INTERFACES": "eth1,ib0"})
    native, keepalive = config.to_native(ffi, settings)
    assert native.fusion_threshold_bytes == 4096
    assert native.cycle_time_ms == 0.5
    assert native.cache_capacity == 7
    assert native.stall_check_seconds == 60.0
    assert native.stall_shutdown_seconds == 30.0
    assert native.allreduce_algorithm == 2  # HVDLITE_ALGORITHM_MPI
    assert native.ring_segment_bytes == 65536
    assert native.auto_ring_min_bytes == 1
    assert native.log_level == 2  # info
    assert ffi.string(native.timeline_path) == b"/tmp/timeline.json"
    assert native.timeline_mark_cycles == 1
    assert native.autotune == 1
    assert ffi.string(native.autotune_log) == b"/tmp/tune.csv"
    assert native.autotune_warmup_samples == 0
    assert native.autotune_steps_per_sample == 3
    assert native.cross_host_transport == 1  # HVDLITE_CROSS_HOST_MPI
    assert ffi.string(native.network_interfaces) == b"eth1,ib0"
    assert len(keepalive) == 3


# Each setting whose field in hvdlite_config (of the same name) is an enum of the header: (setting, enum, the prefix
# of its constants).
ENUM_SETTINGS = [("allreduce_algorithm", "hvdlite_allreduce_algorithm", "HVDLITE_ALGORITHM_"),
                 ("overlap", "hvdlite_overlap", "HVDLITE_OVERLAP_"), ("log_level", "hvdlite_log_level", "HVDLITE_LOG_"),
                 ("carried_rounds", "hvdlite_carried_rounds", "HVDLITE_CARRIED_ROUNDS_"),
                 ("cross_host_transport", "hvdlite_cross_host_transport", "HVDLITE_CROSS_HOST_")]


@pytest.mark.parametrize("name,enum_name,prefix", ENUM_SETTINGS)
def test_each_enum_settings_choices_are_the_headers_constants_and_reach_the_core_as_their_values(name, enum_name,
                                                                                                 prefix):
    """Read from the source header here by cffi (the choices come from the installed copy): every constant of the
    enum is a choice, and each choice reaches the C struct as its constant's value."""
    ffi = cffi.FFI()
    with open(os.path.join(ROOT, "native", "include", "hvdlite.h")) as stream:
        ffi.cdef(native_header.declarations(stream.read()))
    enum = ffi.typeof(f"enum {enum_name}").relements
    setting = next(s for s in config.SETTINGS if s.name == name)
    assert sorted(setting.choices) == sorted(constant[len(prefix):].lower() for constant in enum)
    for choice in setting.choices:
        native, _ = config.to_native(_config_ffi(), config.resolve({setting.env: choice}))
        assert getattr(native, name) == enum[prefix + choice.upper()], choice


def test_an_enum_not_numbered_from_zero_is_refused_naming_it(tmp_path, monkeypatch):
    """A header whose enum skips a value (a choice's index would not be its value): enum_choices says which."""
    (tmp_path / "hvdlite.h").write_text("enum hvdlite_overlap {\n  HVDLITE_OVERLAP_AUTO = 0,\n"
                                         "  HVDLITE_OVERLAP_OFF = 2\n};\n")
    monkeypatch.setenv("HVDLITE_NATIVE_DIR", str(tmp_path))
    native_header.parsed.cache_clear()
    try:
        with pytest.raises(ValueError, match="enum hvdlite_overlap must number its constants 0, 1"):
            native_header.enum_choices("hvdlite_overlap")
    finally:
        native_header.parsed.cache_clear()


def test_disabled_stall_check_reaches_the_core_as_zero_seconds():
    native, _ = config.to_native(_config_ffi(), config.resolve({"HVDLITE_STALL_CHECK_DISABLE": "1"}))
    assert native.stall_check_seconds == 0.0


def test_launcher_flag_values_become_environment_values():
    fusion = config.SETTINGS_BY_NAME["fusion_threshold_bytes"]
    assert fusion.flag_to_env("32") == str(32 * 1024 * 1024)
    assert fusion.flag_to_env("0.5") == str(512 * 1024)
    assert config.SETTINGS_BY_NAME["autotune"].flag_to_env(True) == "1"
    with pytest.raises(ValueError, match="--cycle-time-ms"):
        config.SETTINGS_BY_NAME["cycle_time_ms"].flag_to_env("soon")


def test_the_documented_configuration_table_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as stream:
        documented = stream.read()
    match = re.search(r"<!-- configuration table: begin -->\n(.*?)<!-- configuration table: end -->", documented, re.S)
    assert match, "docs/configuration.md lacks the configuration table markers"
    assert match.group(1) == config.markdown_table(), \
        "docs/configuration.md's configuration table is stale: paste the output of `python -m hvdlite.config`"


@pytest.mark.parametrize("raw,algorithm", [("1", "hierarchical"), ("true", "hierarchical"), ("0", "auto")])
def test_horovod_hierarchical_allreduce_forces_the_hierarchical_algorithm(raw, algorithm):
    assert config.resolve({"HOROVOD_HIERARCHICAL_ALLREDUCE": raw})["allreduce_algorithm"] == algorithm
    # The HVDLITE_* name still wins.
    both = {"HOROVOD_HIERARCHICAL_ALLREDUCE": raw, "HVDLITE_ALLREDUCE_ALGORITHM": "ring"}
    assert config.resolve(both)["allreduce_algorithm"] == "ring"


def test_a_bad_horovod_hierarchical_allreduce_names_the_variable():
    with pytest.raises(ValueError, match="HOROVOD_HIERARCHICAL_ALLREDUCE='maybe'"):
        config.resolve({"HOROVOD_HIERARCHICAL_ALLREDUCE": "maybe"})
