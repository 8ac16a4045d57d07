"""hvdliterun --config-file: horovodrun's YAML file of tuning settings, read into the HVDLITE_* variables the tuning
flags set (a flag given on the command line wins over the file, as with horovodrun).

Every key horovodrun's file knows is known here: each sets one of hvdlite's settings (hvdlite.config.SETTINGS), or
is reported as ignored with the reason (it tunes something hvdlite does not have, such as Gloo or oneCCL). A key
horovodrun does not know is an error naming it, since it is most likely misspelt.
"""
from .. import config
from .horovodrun_flags import WHY_IGNORED


class _Ignored:
    def __init__(self, reason):
        self.reason = reason


class _Inverted:
    """A boolean key that means the opposite of the setting (stall_check.enabled -> stall_check_disable)."""
    def __init__(self, setting):
        self.setting = setting


_NOT_BAYESIAN = _Ignored(WHY_IGNORED["bayesian_autotune"])
_NO_TIMESTAMP = _Ignored(WHY_IGNORED["timestamps"])

# section -> key -> the setting's name in hvdlite.config.SETTINGS, or how the key is read.
KEYS = {
    "params": {
        "fusion_threshold_mb": "fusion_threshold_bytes",
        "cycle_time_ms": "cycle_time_ms",
        "cache_capacity": "cache_capacity",
        "hierarchical_allreduce": "allreduce_algorithm",  # true: hierarchical
        "hierarchical_allgather": _Ignored(WHY_IGNORED["hierarchical_allgather"]),
    },
    "autotune": {
        "enabled": "autotune",
        "log_file": "autotune_log",
        "warmup_samples": "autotune_warmup_samples",
        "steps_per_sample": "autotune_steps_per_sample",
        "bayes_opt_max_samples": _NOT_BAYESIAN,
        "gaussian_process_noise": _NOT_BAYESIAN,
    },
    "timeline": {
        "filename": "timeline_path",
        "mark_cycles": "timeline_mark_cycles",
    },
    "stall_check": {
        "enabled": _Inverted("stall_check_disable"),
        "warning_time_seconds": "stall_check_seconds",
        "shutdown_time_seconds": "stall_shutdown_seconds",
    },
    "library_options": {
        "mpi_threads_disable": _Ignored(WHY_IGNORED["mpi_threads"]),
        "num_nccl_streams": _Ignored(WHY_IGNORED["nccl_streams"]),
        "ccl_bgt_affinity": _Ignored(WHY_IGNORED["ccl"]),
        "gloo_timeout_seconds": _Ignored(WHY_IGNORED["gloo"]),
    },
    "logging": {
        "level": "log_level",
        "hide_timestamp": _NO_TIMESTAMP,
        "with_timestamp": _NO_TIMESTAMP,
    },
}


class ConfigFileError(ValueError):
    pass


def read(path):
    """(HVDLITE_* -> value, [warning lines]) for the settings the file at path sets."""
    try:
        with open(path) as stream:
            text = stream.read()
    except OSError as error:
        raise ConfigFileError(f"--config-file {path}: {error.strerror}") from None
    try:
        import yaml
    except ImportError:
        raise ConfigFileError("--config-file needs PyYAML: pip install pyyaml") from None
    try:
        document = yaml.safe_load(text)
    except Exception as error:  # PyYAML's errors say where the file is malformed
        raise ConfigFileError(f"--config-file {path} is not valid YAML: {error}") from None
    return settings_from(document, path)


def settings_from(document, path):
    """(HVDLITE_* -> value, [warning lines]) for a parsed config file's document."""
    if document is None:
        return {}, []
    if not isinstance(document, dict):
        raise ConfigFileError(f"--config-file {path}: expected sections such as 'params:' at the top, "
                              f"found {type(document).__name__}")
    env, warnings = {}, []
    for section, entries in document.items():
        if section == "controller":
            if str(entries).lower() != "mpi":
                raise ConfigFileError(f"--config-file {path}: controller {entries!r}: hvdlite's only controller "
                                      f"is mpi")
            continue
        if section not in KEYS:
            raise ConfigFileError(f"--config-file {path}: unknown section {section!r} (known: controller, "
                                  f"{', '.join(KEYS)})")
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise ConfigFileError(f"--config-file {path}: section {section!r} should hold 'key: value' lines, "
                                  f"found {entries!r}")
        for key, value in entries.items():
            where = f"--config-file {path}: {section}.{key}"
            meaning = KEYS[section].get(key)
            if meaning is None:
                raise ConfigFileError(f"{where} is not a setting (known in {section}: "
                                      f"{', '.join(KEYS[section])})")
            if isinstance(meaning, _Ignored):
                warnings.append(f"{where} ignored: {meaning.reason}")
                continue
            if value is None:
                continue
            name, value = _setting_value(meaning, value, where)
            setting = config.SETTINGS_BY_NAME[name]
            try:
                env[setting.env] = setting.flag_to_env(value)
            except ValueError as error:
                raise ConfigFileError(f"{where}: {value!r} is invalid: {_reason(error)}") from None
    return env, warnings


def _setting_value(meaning, value, where):
    """(setting name, the value as its hvdliterun flag takes it) for one key of the file."""
    inverted = isinstance(meaning, _Inverted)
    name = meaning.setting if inverted else meaning
    setting = config.SETTINGS_BY_NAME[name]
    if name == "allreduce_algorithm":  # params.hierarchical_allreduce, a boolean
        return name, "hierarchical" if _boolean(value, where) else "auto"
    if setting.type_name == "bool":
        flag = _boolean(value, where)
        return name, not flag if inverted else flag
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise ConfigFileError(f"{where}: expected a {setting.type_name}, found {value!r}")
    return name, str(value)


def _boolean(value, where):
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    raise ConfigFileError(f"{where}: expected true or false, found {value!r}")


def _reason(error):
    """A setting's own validation message without the flag it names (the file's key is named instead)."""
    text = str(error)
    return text.split(" is invalid: ", 1)[-1]
