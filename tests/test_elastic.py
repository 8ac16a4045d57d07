"""Elastic training by restart, with real jobs under hvdliterun on this host: a rank killed with SIGKILL mid-epoch,
the job restarted from its last commit and finishing bitwise equal to an uninterrupted run (PyTorch and Keras);
a job that shrinks after a failure and grows when its discovery script finds room, with reset callbacks and
ElasticSampler neither repeating nor skipping a sample; the launcher's limits and its one line per restart; and
damaged commit files (single-rank, in process).
"""
import os
import sys
import tempfile
from collections import defaultdict

import numpy as np
import pytest

from harness.processes import run, venv_tool

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_workers")
TF_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def commit_folders():
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("hvdlite-elastic-")}


def hvdliterun(*args, timeout=300, env=None):
    return run([venv_tool("hvdliterun"), *map(str, args)], timeout=timeout, env=env)


def train(tmp_path, worker, name, launcher_args, worker_args=(), env=None):
    """Runs the worker under hvdliterun; returns (exit code, output, final weights' bytes, resume lines)."""
    out = tmp_path / name
    code, output = hvdliterun(*launcher_args, sys.executable, os.path.join(WORKERS, worker), "--out", out,
                              *worker_args, env=env)
    weights = out.read_bytes() if out.exists() else None
    resumed = (tmp_path / f"{name}.resumed").read_text().split("\n")[:-1] if weights is not None else []
    return code, output, weights, [tuple(map(int, line.split())) for line in resumed]


@pytest.fixture(scope="module")
def uninterrupted_torch(tmp_path_factory):
    code, output, weights, _ = train(tmp_path_factory.mktemp("torch"), "torch_train.py", "clean", ["-np", 2])
    assert code == 0 and weights, output[-4000:]
    return weights


@pytest.mark.parametrize("commit_every,resumed_at", [(1, 10), (4, 8)])
def test_a_killed_rank_resumes_from_the_last_commit_bitwise_equal(tmp_path, uninterrupted_torch, commit_every,
                                                                  resumed_at):
    before = commit_folders()
    code, output, weights, resumed = train(tmp_path, "torch_train.py", "killed", ["-np", 2, "--max-restarts", 1],
                                           ["--kill-at", 10, "--commit-every", commit_every])
    assert code == 0, output[-4000:]
    assert "hvdliterun: restart 1: the job failed with exit code 9 (failure 1 of at most 1)" in output, output[-3000:]
    # restart number, rank, size, epoch, step: the second start resumed from the last commit on both ranks.
    assert sorted(resumed) == [(0, 0, 2, 0, 0), (0, 1, 2, 0, 0), (1, 0, 2, 0, resumed_at), (1, 1, 2, 0, resumed_at)]
    assert weights == uninterrupted_torch, "final parameters differ from the uninterrupted run's"
    assert commit_folders() == before, "the finished job left its commits behind"


@pytest.mark.parametrize("loop", ["model.fit", "custom loop"])
def test_keras_and_a_tensorflow_custom_loop_resume_bitwise_equal(tmp_path, loop):
    env = dict(TF_QUIET)
    mode = ["--custom-loop"] if loop == "custom loop" else []
    code, output, clean, _ = train(tmp_path, "keras_train.py", "clean", ["-np", 2], mode, env=env)
    assert code == 0 and clean, output[-4000:]
    code, output, killed, resumed = train(tmp_path, "keras_train.py", "killed", ["-np", 2, "--max-restarts", 1],
                                          ["--kill-at", 10, "--commit-every", 1, *mode], env=env)
    assert code == 0, output[-4000:]
    assert sorted(resumed) == [(0, 0, 0, 0), (0, 1, 0, 0), (1, 0, 0, 10), (1, 1, 0, 10)], resumed
    assert killed == clean, "final weights differ from the uninterrupted run's"


def test_the_job_shrinks_after_a_failure_and_grows_when_hosts_appear(tmp_path):
    discovery = tmp_path / "hosts"
    discovery.write_text("localhost:2\n")
    code, output, weights, resumed = train(
        tmp_path, "torch_train.py", "elastic",
        ["-np", 1, "--min-np", 1, "--max-np", 2, "--host-discovery-script", f"cat {discovery}"],
        ["--kill-at", 20, "--discovery-file", discovery, "--shrink-to", "localhost:1", "--grow-to", "localhost:2",
         "--grow-at", 40, "--step-seconds", 0.1])  # paced: news takes up to 2 s to reach the ranks
    assert code == 0 and weights, output[-4000:]
    lines = [line for line in output.splitlines() if line.startswith("hvdliterun: restart")]
    assert lines == ["hvdliterun: restart 1: the job failed with exit code 9; starting again from the last commit",
                     "hvdliterun: restart 2: the hosts changed; starting again on them from the last commit"], lines
    starts = sorted(resumed)
    assert [s[:3] for s in starts] == [(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 2), (2, 1, 2)], starts
    assert starts[2][4] == 20, "the 1-rank start resumes at the step of the last commit"
    assert starts[3][3:] == starts[4][3:] and starts[3][4] > 40, "the 2-rank start resumes where the 1-rank one stopped"
    resets = sorted(tuple(map(int, line.split())) for line in (tmp_path / "elastic.resets").read_text().split("\n")[:-1])
    assert resets == [(1, 0, 1), (2, 0, 2), (2, 1, 2)], "reset callbacks run on every rank when the size changes"
    # Every sample of every epoch was trained on, none twice but for padding (at most size - 1 per epoch).
    seen = defaultdict(list)
    for line in (tmp_path / "elastic.samples").read_text().split("\n")[:-1]:
        epoch, _step, _rank, ids = line.split()
        seen[int(epoch)] += map(int, ids.split(","))
    assert sorted(seen) == [0, 1]
    for epoch, ids in seen.items():
        assert set(ids) == set(range(1792)), f"epoch {epoch} skipped {sorted(set(range(1792)) - set(ids))[:10]}"
        assert len(ids) - 1792 <= 1, f"epoch {epoch} repeated {len(ids) - 1792} samples"


def test_the_launcher_gives_up_when_restarts_or_slots_run_out(tmp_path):
    code, output = hvdliterun("-np", 2, "--max-restarts", 1, sys.executable, "-c", "import sys; sys.exit(3)",
                              timeout=120)
    assert code == 3, output[-3000:]
    assert "hvdliterun: restart 1: the job failed with exit code 3 (failure 1 of at most 1)" in output
    assert "hvdliterun: the job failed with exit code 3; no restart left (--max-restarts 1)" in output
    discovery = tmp_path / "hosts"
    discovery.write_text("localhost:1\n")
    code, output = hvdliterun("--min-np", 2, "--host-discovery-script", f"cat {discovery}", "--elastic-timeout", 2,
                              sys.executable, "-c", "pass", timeout=120)
    assert code == 1, output[-3000:]
    assert "hvdliterun: only 1 slots available (at least 2 needed) after waiting 2 s (--elastic-timeout)" in output


@pytest.mark.ranks(1)
def test_a_damaged_commit_is_skipped_for_the_previous_one(tmp_path, monkeypatch):
    import hvdlite
    from hvdlite.elastic import ObjectState, commits
    monkeypatch.setenv("HVDLITE_ELASTIC_COMMIT_DIR", str(tmp_path))
    hvdlite.init()
    state = ObjectState(step=0, weights=np.arange(4.0))
    for step in (1, 2, 3):
        state.step = step
        state.weights = state.weights + 1
        state.commit()
    commits.flush()  # fsynced, and older commits removed, in the background
    files = sorted(tmp_path.glob("commit-*.pkl"))
    assert [f.name for f in files] == ["commit-000000000002.pkl", "commit-000000000003.pkl"]  # two kept
    sequence, payload = commits.agree_and_load()
    assert sequence == 3 and payload["state"]["step"] == 3
    data = bytearray(files[-1].read_bytes())
    data[-5] ^= 0xFF  # one flipped byte in the newest commit
    files[-1].write_bytes(bytes(data))
    sequence, payload = commits.agree_and_load()
    assert sequence == 2 and payload["state"]["step"] == 2
    assert np.array_equal(payload["state"]["weights"], np.arange(4.0) + 2)
    files[-1].write_bytes(bytes(data[:20]))  # torn
    assert commits.agree_and_load()[0] == 2
    fresh = ObjectState(step=-1, weights=None)
    fresh.resume(*commits.agree_and_load())
    assert fresh.step == 2 and np.array_equal(fresh.weights, np.arange(4.0) + 2)


def test_discovery_output_and_the_blacklist_cooldown(tmp_path, monkeypatch):
    """The launcher's pure parts: the discovery script's lines and a blacklisted host's return."""
    from hvdlite.run import elastic
    script = tmp_path / "hosts.sh"
    script.write_text("echo 'a:4'\necho '# a comment'\necho 'b'\necho ''\necho 'c:2'\n")
    hosts = elastic.discover(f"sh {script}", slots_per_host=3)
    assert [(h.name, h.slots) for h in hosts] == [("a", 4), ("b", 3), ("c", 2)]
    with pytest.raises(RuntimeError, match="exit code 7"):
        elastic.discover("echo broken >&2; exit 7", 1)
    assert elastic.Supervisor._fill(hosts, 6) == ([elastic.Host("a", 4), elastic.Host("b", 2)], 6)
    now = [100.0]
    monkeypatch.setattr(elastic.time, "monotonic", lambda: now[0])
    cooling = elastic.Blacklist(cooldown_range=(10, 20))
    cooling.add("a")
    forever = elastic.Blacklist()
    forever.add("a")
    assert cooling.excludes("a") and forever.excludes("a") and not cooling.excludes("b")
    now[0] += 21
    assert not cooling.excludes("a") and forever.excludes("a")
