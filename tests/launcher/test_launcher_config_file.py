"""hvdliterun --config-file: horovodrun's YAML file of tuning settings. Reading it (our own logic, no job), then a
real 2-rank job whose core runs with what the file set."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness.processes import with_hvdlite_importable
from harness.timeline import timeline_phases

from hvdlite.runner.arguments import parse_args

PYTHON = sys.executable

# Every section and key horovodrun's file knows, as a Horovod user would have written it.
HOROVOD_FILE = """\
controller: mpi

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: 'autotune_log.csv'
  warmup_samples: 5
  steps_per_sample: 12
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: 'timeline.json'
  mark_cycles: true

stall_check:
  enabled: false
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  ccl_bgt_affinity: 1
  gloo_timeout_seconds: 60

logging:
  level: INFO
  hide_timestamp: true
"""


def _config(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_every_horovodrun_key_sets_its_variable_or_is_reported_ignored(tmp_path):
    args = parse_args(["-np", "2", "--config-file", _config(tmp_path, HOROVOD_FILE), "python", "t.py"])
    assert args.tuning_env == {
        "HVDLITE_FUSION_THRESHOLD": str(32 * 1024 * 1024), "HVDLITE_CYCLE_TIME": "10",
        "HVDLITE_CACHE_CAPACITY": "2048", "HVDLITE_ALLREDUCE_ALGORITHM": "hierarchical",
        "HVDLITE_AUTOTUNE": "1", "HVDLITE_AUTOTUNE_LOG": "autotune_log.csv", "HVDLITE_AUTOTUNE_WARMUP_SAMPLES": "5",
        "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE": "12", "HVDLITE_TIMELINE": "timeline.json",
        "HVDLITE_TIMELINE_MARK_CYCLES": "1", "HVDLITE_STALL_CHECK_DISABLE": "1",
        "HVDLITE_STALL_CHECK_TIME_SECONDS": "120", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "240",
        "HVDLITE_LOG_LEVEL": "INFO"}
    ignored = sorted(warning.split(": ")[1].split(" ignored")[0] for warning in args.warnings)
    assert ignored == sorted(["params.hierarchical_allgather", "autotune.bayes_opt_max_samples",
                              "autotune.gaussian_process_noise", "library_options.mpi_threads_disable",
                              "library_options.num_nccl_streams", "library_options.ccl_bgt_affinity",
                              "library_options.gloo_timeout_seconds", "logging.hide_timestamp"])
    assert all(" ignored: " in warning and warning.split(" ignored: ")[1] for warning in args.warnings)


def test_a_flag_given_on_the_command_line_wins_over_the_file(tmp_path):
    path = _config(tmp_path, """
        params:
          fusion_threshold_mb: 32
          cycle_time_ms: 10
          hierarchical_allreduce: true
        stall_check:
          enabled: true
    """)
    args = parse_args(["-np", "2", "--config-file", path, "--cycle-time-ms", "2.5", "--allreduce-algorithm", "ring",
                       "python", "t.py"])
    assert args.tuning_env == {"HVDLITE_FUSION_THRESHOLD": str(32 << 20), "HVDLITE_CYCLE_TIME": "2.5",
                               "HVDLITE_ALLREDUCE_ALGORITHM": "ring", "HVDLITE_STALL_CHECK_DISABLE": "0"}
    assert args.warnings == []


@pytest.mark.parametrize("text, expected", [
    ("params:\n  fusion_treshold_mb: 32\n", ["params.fusion_treshold_mb is not a setting", "fusion_threshold_mb"]),
    ("parms:\n  cycle_time_ms: 1\n", ["unknown section 'parms'", "params"]),
    ("params:\n  cycle_time_ms: soon\n", ["params.cycle_time_ms: 'soon' is invalid", "number"]),
    ("params:\n  cache_capacity: -1\n", ["params.cache_capacity: '-1' is invalid", ">= 0"]),
    ("timeline:\n  mark_cycles: often\n", ["timeline.mark_cycles: expected true or false, found 'often'"]),
    ("logging:\n  level: loud\n", ["logging.level: 'loud' is invalid", "debug"]),
    ("controller: gloo\n", ["controller 'gloo'", "only controller is mpi"]),
    ("params: [1, 2]\n", ["section 'params' should hold 'key: value' lines"]),
    ("- params\n", ["expected sections such as 'params:'", "list"]),
    ("params:\n  cycle_time_ms: [1\n", ["is not valid YAML"]),
])
def test_a_bad_file_is_a_usage_error_naming_the_key_and_what_it_holds(tmp_path, capsys, text, expected):
    path = _config(tmp_path, text)
    err = _usage_error(capsys, ["-np", "2", "--config-file", path, "python", "t.py"])
    assert f"--config-file {path}" in err, err
    for words in expected:
        assert words in err, err


def test_a_missing_file_is_a_usage_error(tmp_path, capsys):
    err = _usage_error(capsys, ["-np", "2", "--config-file", str(tmp_path / "nowhere.yaml"), "python", "t.py"])
    assert "nowhere.yaml: No such file or directory" in err, err


def test_an_empty_file_sets_nothing(tmp_path):
    args = parse_args(["-np", "2", "--config-file", _config(tmp_path, ""), "python", "t.py"])
    assert args.tuning_env == {} and args.warnings == []


# ---- a real job ----

@pytest.mark.timeout(120)
def test_ranks_run_with_the_files_settings(tmp_path):
    """The core of both ranks starts with what the file set: each rank reports the settings hvd.init resolved, rank 0
    writes the timeline the file names (marking cycles), and the launcher reports the ignored keys once."""
    timeline = tmp_path / "timeline.json"
    path = _config(tmp_path, f"""
        params:
          fusion_threshold_mb: 3
          cycle_time_ms: 4
          cache_capacity: 0
        timeline:
          filename: {timeline}
          mark_cycles: true
        stall_check:
          warning_time_seconds: 7
        library_options:
          num_nccl_streams: 2
    """)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import json
        import numpy as np
        import hvdlite as hvd
        from hvdlite import config
        hvd.init()
        total = hvd.allreduce(np.full(5, hvd.rank() + 1.0), name="x", op=hvd.Sum)
        settings = config.resolve()
        print("RANK", json.dumps([hvd.rank(), total.tolist(), settings["fusion_threshold_bytes"],
                                  settings["cycle_time_ms"], settings["cache_capacity"],
                                  settings["stall_check_seconds"], settings["timeline_mark_cycles"]]), flush=True)
        hvd.shutdown()
    """))
    env = with_hvdlite_importable(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    result = subprocess.run([PYTHON, "-m", "hvdlite.runner", "-np", "2", "--config-file", path, PYTHON, str(script)],
                            env=env, capture_output=True, text=True, timeout=100)
    assert result.returncode == 0, result.stderr
    reports = sorted(json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines()
                     if line.startswith("RANK "))
    assert reports == [[rank, [3.0] * 5, 3 * 1024 * 1024, 4.0, 0, 7.0, True] for rank in (0, 1)], result.stdout
    assert result.stderr.count("library_options.num_nccl_streams ignored: ") == 1, result.stderr
    assert "x" in timeline_phases(timeline)
    assert '"CYCLE_START"' in timeline.read_text()  # timeline.mark_cycles reached the core too
