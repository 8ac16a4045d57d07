"""Elastic training by restart, with real jobs under hvdliterun on this host: a rank killed with SIGKILL mid-epoch,
the job restarted from its last commit and finishing bitwise equal to an uninterrupted run (PyTorch and Keras);
a job that shrinks after a failure and grows when its discovery script finds room, with reset callbacks and
ElasticSampler neither repeating nor skipping a sample; the launcher's limits and its one line per restart; a job
whose starts another program makes (an engine's elastic run) keeping its commits for the next; and damaged commit
files (single-rank, in process).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import numpy as np
import pytest

from harness.elastic_folders import commit_folders_here
from harness.processes import QUIET_THREADS, TESTS_DIR, read_until, run, venv_tool
from hvdlite.runner.job import processes_with_environment

WORKERS = os.path.join(TESTS_DIR, "elastic", "workers")
GIVEN_UP = os.path.join(WORKERS, "given_up.py")
TF_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


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


# Commits every 4 steps: make check (make test keeps commits every step).
@pytest.mark.parametrize("commit_every,resumed_at", [(1, 10), pytest.param(4, 8, marks=pytest.mark.long)])
def test_a_killed_rank_resumes_from_the_last_commit_bitwise_equal(tmp_path, uninterrupted_torch, commit_every,
                                                                  resumed_at):
    before = commit_folders_here()
    code, output, weights, resumed = train(tmp_path, "torch_train.py", "killed", ["-np", 2, "--max-restarts", 1],
                                           ["--kill-at", 10, "--commit-every", commit_every])
    assert code == 0, output[-4000:]
    assert "hvdliterun: restart 1: the job failed with exit code 9 (failure 1 of at most 1)" in output, output[-3000:]
    # restart number, rank, size, epoch, step: the second start resumed from the last commit on both ranks.
    assert sorted(resumed) == [(0, 0, 2, 0, 0), (0, 1, 2, 0, 0), (1, 0, 2, 0, resumed_at), (1, 1, 2, 0, resumed_at)]
    assert weights == uninterrupted_torch, "final parameters differ from the uninterrupted run's"
    assert commit_folders_here() == before, "the finished job left its commits behind"


@pytest.mark.long  # make check: make test resumes the torch program (above) through the same launcher and commits
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


@pytest.mark.long  # the whole elastic program; its parts have quick tests (discovery, host-change checks, resumes)
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
    from hvdlite.elastic import ObjectState, commits, memory_slots
    monkeypatch.setenv("HVDLITE_ELASTIC_COMMIT_DIR", str(tmp_path))
    hvdlite.init()
    state = ObjectState(step=0, weights=np.arange(4.0))
    for step in (1, 2, 3):
        state.step = step
        state.weights = state.weights + 1
        state.commit()
        commits.flush()  # on disk, fsynced, and older commits removed, in the background: each before the next
    memory = commits.memory_directory()
    assert sorted(os.listdir(memory)) == ["slot-0", "slot-1"]  # in line: commits 2 and 3
    assert [memory_slots.read(os.path.join(memory, f"slot-{i}"))[0] for i in (0, 1)] == [2, 3]
    files = sorted(tmp_path.glob("commit-*.pkl"))
    assert [f.name for f in files] == ["commit-000000000002.pkl", "commit-000000000003.pkl"]  # two kept
    sequence, payload = commits.agree_and_load()
    assert sequence == 3 and payload["state"]["step"] == 3
    # The memory copy outlives the process, not the host: a host that restarts has only its disk.
    shutil.rmtree(memory)
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


@pytest.mark.ranks(1)
def test_restore_goes_back_to_the_commit_kept_in_memory(tmp_path, monkeypatch):
    """The rank that writes its host's memory copy keeps no second copy: restore() reads that one back, also after
    the state's tensors changed (the optimizer's state appears at its first step) between two commits into the
    same memory slot."""
    import torch
    import hvdlite.torch as hvd
    from hvdlite.elastic import commits
    monkeypatch.setenv("HVDLITE_ELASTIC_COMMIT_DIR", str(tmp_path))
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, optimizer, epoch=3)

    def train_step():
        optimizer.zero_grad()
        model(torch.randn(5, 8)).square().sum().backward()
        optimizer.step()

    state.commit()  # 1: no optimizer state yet
    train_step()
    state.commit()
    train_step()
    state.commit()  # 3: into the slot of 1, with more tensors
    assert not commits.host_memory().given_up and state._saved_sequence == 3 and state._saved_tensors is None
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    momentum = [optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    train_step()
    state.epoch = 4
    state.restore()
    assert state.epoch == 3
    for name, value in model.state_dict().items():
        assert torch.equal(value, committed[name]), name
    for p, buffer in zip(model.parameters(), momentum):
        assert torch.equal(optimizer.state[p]["momentum_buffer"], buffer)
    commits.remove()


@pytest.mark.ranks(1)
def test_a_commit_filled_in_the_background_is_waited_for_by_whatever_reads_or_reuses_the_slots(tmp_path,
                                                                                                monkeypatch):
    """The machinery of commits whose arrays come from a GPU (commits.write_filled_later, filler.py), on real
    memory slots. The fill here is NumPy's copy of one buffer laid out as the slot's arrays into the slot's span:
    it stands in for the GPU's transfer (tests/gpu/elastic_commit.py checks that one on a GPU) and is held back by
    an event, so that the test sees what waits for it: reading the commit, the next commit, the end of a process.
    A fill that fails is raised at the next wait."""
    import threading
    import hvdlite
    from hvdlite.elastic import commit_body, commits
    from hvdlite.elastic.array_block import ArrayBlock
    monkeypatch.setenv("HVDLITE_ELASTIC_COMMIT_DIR", str(tmp_path))
    hvdlite.init()
    specs = (("<f4", (3, 5)), ("<i2", (7,)), ("<f8", (0,)), ("|u1", (1,)), ("<f8", (33,)))
    order, released = [], threading.Event()

    def commit(sequence, hold=False, fail=False):
        random = np.random.default_rng(sequence)
        want = [(random.standard_normal(shape) * 100).astype(dtype) for dtype, shape in specs]
        offsets, end = commit_body.layout([a.nbytes for a in want])
        laid_out = np.zeros(end - offsets[0], np.uint8)  # the GPU's buffer, laid out as the slot's arrays
        for array, offset in zip(want, offsets):
            laid_out[offset - offsets[0]:offset - offsets[0] + array.nbytes] = array.view(np.uint8).reshape(-1)
        arrays, span = commits.memory_arrays(sequence, specs, span=True)

        def fill():
            if hold:
                released.wait()
            if fail:
                raise RuntimeError("the transfer failed")
            span[...] = laid_out
            order.append(sequence)
        commits.write_filled_later(sequence, {"step": sequence, "arrays": ArrayBlock(arrays)}, fill)
        return want

    def assert_committed(sequence, want):
        payload = commits.read_memory(sequence)
        assert payload["step"] == sequence
        for got, array in zip(payload["arrays"].arrays, want, strict=True):
            assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)

    first = commit(1)
    second = commit(2, hold=True)
    reader = threading.Thread(target=lambda: order.append(("read", commits.agree_and_load()[0])))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive() and order == [1]  # the newest commit is still coming: reading it waits
    released.set()
    reader.join(30)
    assert order == [1, 2, ("read", 2)]
    assert_committed(1, first)
    assert_committed(2, second)
    released.clear()
    commit(3, hold=True)
    committer = threading.Thread(target=lambda: commit(4))  # into the slot of 2: waits until 3 is whole
    committer.start()
    committer.join(0.5)
    assert committer.is_alive() and order[-1] == ("read", 2)
    released.set()
    committer.join(30)
    commits.wait_filled()
    assert order[-2:] == [3, 4]
    commit(5, fail=True)
    with pytest.raises(RuntimeError, match="the transfer failed"):
        commits.wait_filled()
    commit(6)
    commits.finish_in_memory()  # what a process about to end does: 6 is whole, 5 never was
    assert order[-1] == 6 and commits.agree_and_load()[0] == 6
    commits.remove()


@pytest.mark.ranks(2)
def test_restore_and_snapshots_of_adam_and_bfloat16_state(tmp_path, monkeypatch):
    """On the rank that writes its host's memory copy and on the one that saves its own (into the buffers of the
    save before: nothing allocated per commit), restore() and a snapshot written and read back give the committed
    parameters, bfloat16 buffer and Adam state (0-d step tensors) bitwise."""
    import torch
    import hvdlite.torch as hvd
    from hvdlite.elastic import commits
    monkeypatch.setenv("HVDLITE_ELASTIC_COMMIT_DIR", str(tmp_path))
    hvd.init()

    def build():
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        model.register_buffer("scale", torch.linspace(0, 1, 4, dtype=torch.bfloat16))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    model, optimizer = build()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)

    def train_step():
        optimizer.zero_grad()
        (model(torch.randn(5, 8)) * model.scale.float()).square().sum().backward()
        optimizer.step()
        with torch.no_grad():
            model.scale += 0.125

    def everything():
        return [t.clone() for t in model.state_dict().values()] + [
            t.clone() for p in model.parameters() for t in optimizer.state[p].values()]

    train_step()
    state.commit()
    buffers = None if state._saved_tensors is None else [t.data_ptr() for t in state._saved_tensors]
    train_step()
    state.epoch = 1
    state.commit()
    committed = everything()
    if hvd.local_rank() == 0:
        assert state._saved_sequence == 2 and state._saved_tensors is None
    else:
        assert [t.data_ptr() for t in state._saved_tensors] == buffers, "a save allocated new buffers"
    written = commits.decode(b"".join(bytes(part) for part in commits.encode(state.snapshot())))
    train_step()
    state.epoch = 5
    state.restore()
    assert state.epoch == 1
    for got, want in zip(everything(), committed, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)
    model2, optimizer2 = build()
    other = hvd.elastic.TorchState(model2, optimizer2, epoch=0)
    model, optimizer = model2, optimizer2
    other.load_snapshot(written)
    assert other.epoch == 1
    for got, want in zip(everything(), committed, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)
    commits.remove()


KILLED_AFTER_COMMIT = """
import os, signal, numpy as np, hvdlite
from hvdlite.elastic import ObjectState
hvdlite.init()
state = ObjectState(step=0, weights=np.zeros(1 << 20))  # 8 MB: the disk writer is still busy at the kill
for step in range(1, 6):
    state.step, state.weights = step, state.weights + 1
    state.commit()
os.kill(os.getpid(), signal.SIGKILL)
"""
RESUME = """
import os, numpy as np, hvdlite
from hvdlite.elastic import commits
hvdlite.init()
sequence, payload = commits.agree_and_load()
assert np.all(payload["state"]["weights"] == payload["state"]["step"])
print("RESUMED", sequence, payload["state"]["step"])
commits.remove()
print("LEFT", [folder for folder in (commits.memory_directory(), commits.directory()) if os.path.exists(folder)])
"""


def test_a_rank_killed_right_after_commit_loses_nothing(tmp_path):
    """The commit is in the host's memory when commit() returns: a SIGKILL then (the disk copy still being
    written in the background) leaves the newest commit to the next start."""
    env = {"HVDLITE_ELASTIC_COMMIT_DIR": str(tmp_path)}
    code, output = run([sys.executable, "-c", KILLED_AFTER_COMMIT], timeout=120, env=env)
    assert code == -9, output
    code, output = run([sys.executable, "-c", RESUME], timeout=120, env=env)
    assert code == 0 and "RESUMED 5 5" in output, output
    assert "LEFT []" in output, output  # remove() cleared memory and disk


FULL_SHM_COMMITS = {
    "numpy": """
import numpy as np, hvdlite
from hvdlite.elastic import ObjectState, commits
from hvdlite.runner import commit_folders
commit_folders.MEMORY_ROOT = {root!r}
hvdlite.init()
state = ObjectState(step=0, weights=np.zeros(1 << 17))  # 1 MB
for step in (1, 2):
    state.step = step
    state.commit()
""",
    "torch": """
import torch, hvdlite.torch as hvd
from hvdlite.elastic import commits
from hvdlite.runner import commit_folders
commit_folders.MEMORY_ROOT = {root!r}
hvd.init()
model = torch.nn.Linear(512, 512)  # 1 MB, and as much momentum
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
state = hvd.elastic.TorchState(model, optimizer, step=0)
for step in (1, 2):
    optimizer.zero_grad()
    model(torch.ones(2, 512)).sum().backward()
    optimizer.step()
    state.step = step
    state.commit()
committed = [t.clone() for t in model.state_dict().values()]
with torch.no_grad():
    model.weight.zero_()
state.load_snapshot(commits.agree_and_load()[1]["state"])
print("SAME", all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), committed)))
""",
}


@pytest.mark.root  # mounts a small tmpfs as the memory root
@pytest.mark.parametrize("kind", FULL_SHM_COMMITS)
def test_a_full_dev_shm_sends_commits_to_disk_in_line(tmp_path, kind):
    """Where the memory folder has no room (a container's small /dev/shm), commits go to disk in line, with a
    message once, NumPy values as a torch state's tensors (which otherwise go straight into memory). A 64 kB tmpfs
    stands in for the full /dev/shm (needs root, as the multi-host tests do)."""
    small = tmp_path / "shm"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], capture_output=True,
                             text=True)
    assert mounted.returncode == 0, mounted.stderr
    try:
        code, output = run([sys.executable, "-c", FULL_SHM_COMMITS[kind].format(root=str(small)) + """
print("ON DISK", sorted(p.split("/")[-1] for p in commits._commit_files(commits.directory())))
print("NEWEST", commits.agree_and_load()[0])
"""], timeout=120, env={"HVDLITE_ELASTIC_COMMIT_DIR": str(tmp_path / "disk")})
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert code == 0, output
    assert output.count("cannot keep commits in") == 1 and "writing them to disk in line instead" in output, output
    assert "ON DISK ['commit-000000000001.pkl', 'commit-000000000002.pkl']" in output and "NEWEST 2" in output
    assert kind != "torch" or "SAME True" in output, output


def test_a_job_given_up_leaves_no_commits_unless_their_folder_is_the_users(tmp_path):
    """When the launcher gives a job up, the job's own commit folders go, on disk and in memory; commits in a folder
    the user chose stay, and a new start of the job with that folder resumes from the last of them."""
    before = commit_folders_here()
    code, output = hvdliterun("-np", 2, "--max-restarts", 1, sys.executable, GIVEN_UP, "fail", timeout=120)
    assert code == 3, output[-3000:]
    assert "hvdliterun: the job failed with exit code 3; no restart left (--max-restarts 1)" in output
    assert "hvdliterun: removed the job's commits on this host" in output, output[-3000:]
    assert commit_folders_here() == before, "the job given up left its commits behind"
    kept = tmp_path / "commits"
    env = {"HVDLITE_ELASTIC_COMMIT_DIR": str(kept)}
    code, output = hvdliterun("-np", 2, "--max-restarts", 1, sys.executable, GIVEN_UP, "fail", timeout=120,
                              env=env)
    assert code == 3, output[-3000:]
    assert (f"hvdliterun: the job's commits stay in {kept} on each host: start the job again with the same "
            "HVDLITE_ELASTIC_COMMIT_DIR to resume from the last one") in output, output[-3000:]
    assert sorted(p.name for p in kept.iterdir()) == ["commit-000000000001.pkl", "commit-000000000002.pkl"]
    code, output = hvdliterun("-np", 2, sys.executable, GIVEN_UP, "succeed", timeout=120, env=env)
    assert code == 0, output[-3000:]
    # Both ranks resumed from the second commit (the ranks' lines may interleave in the output).
    assert sorted(re.findall(r"STEP (\d) (\d+)", output)) == [("0", "3"), ("1", "3")], output[-3000:]
    assert not kept.exists() and commit_folders_here() == before, "the finished job left its commits behind"


def test_a_job_without_restarts_leaves_no_commits_and_one_that_never_committed_costs_no_removal(tmp_path):
    """hvd.elastic in a job launched without --max-restarts: it fails after committing, and the launcher removes its
    commits, which no later start could find. A failing job that never committed is not followed by a removal."""
    before = commit_folders_here()
    code, output = hvdliterun("-np", 2, sys.executable, GIVEN_UP, "fail", timeout=120)
    assert code == 3, output[-3000:]
    assert "hvdliterun: removed the job's commits on this host" in output, output[-3000:]
    assert commit_folders_here() == before, "the failed job left its commits behind"
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nimport hvdlite\nhvdlite.init()\nsys.exit(3)\n")
    code, output = hvdliterun("-np", 2, sys.executable, failing, timeout=120)
    assert code == 3 and "commits" not in output, output[-3000:]


def test_a_job_whose_starts_another_program_makes_keeps_its_commits_for_the_next_start():
    """HVDLITE_ELASTIC_OUTER_JOB (set by an engine's elastic run, which starts hvdliterun again itself): the job's
    commits go under that id and stay when it fails, and the next start with the same id resumes from them."""
    before = commit_folders_here()
    env = {"HVDLITE_ELASTIC_OUTER_JOB": f"outer{uuid.uuid4().hex[:12]}"}
    code, output = hvdliterun("-np", 2, sys.executable, GIVEN_UP, "fail", timeout=120, env=env)
    assert code == 3 and "commits" not in output, output[-3000:]
    left = commit_folders_here() - before
    assert left and all(env["HVDLITE_ELASTIC_OUTER_JOB"] in path or path.startswith("/dev/shm") for path in left), left
    code, output = hvdliterun("-np", 2, sys.executable, GIVEN_UP, "succeed", timeout=120, env=env)
    assert code == 0, output[-3000:]
    assert sorted(re.findall(r"STEP (\d) (\d+)", output)) == [("0", "2"), ("1", "2")], output[-3000:]
    assert commit_folders_here() == before, "the finished job left its commits behind"


@pytest.mark.parametrize("restarts", [["--max-restarts", "3"], []], ids=["max-restarts", "plain"])
def test_a_launcher_told_to_stop_starts_nothing_again_and_removes_the_commits(restarts):
    """SIGTERM to hvdliterun (a scheduler cancelling the job, Ctrl-C alike) while an elastic job runs: the job ends
    and is not started again, whatever restarts are left; its commits are removed and no process is left."""
    before = commit_folders_here()
    token = uuid.uuid4().hex
    launcher = subprocess.Popen([venv_tool("hvdliterun"), "-np", "2", *restarts, sys.executable, GIVEN_UP, "wait"],
                                env=dict(os.environ, **QUIET_THREADS, HVDLITE_TEST_TOKEN=token),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = read_until(launcher, "STEP", 2, "both ranks committed")
    launcher.send_signal(signal.SIGTERM)
    output = seen + launcher.communicate(timeout=90)[0]
    assert launcher.returncode not in (0, None), output[-3000:]
    assert "restart 1" not in output and output.count("STEP") == 2, output[-3000:]
    assert not restarts or "after the launcher was told to stop; not starting it again" in output, output[-3000:]
    assert "hvdliterun: removed the job's commits on this host" in output, output[-3000:]
    assert commit_folders_here() == before, "the stopped job left its commits behind"
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


def test_a_launcher_told_to_stop_while_it_waits_for_slots_ends_at_once(tmp_path):
    """SIGINT to hvdliterun while it waits (--elastic-timeout 600) for slots its discovery script does not list:
    it ends within seconds, says so, and exits as a process ended by that signal would."""
    discovery = tmp_path / "hosts"
    discovery.write_text("localhost:1\n")
    launcher = subprocess.Popen([venv_tool("hvdliterun"), "--min-np", "2", "--host-discovery-script",
                                 f"cat {discovery}", "--elastic-timeout", "600", sys.executable, "-c", "pass"],
                                env=dict(os.environ, **QUIET_THREADS), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    time.sleep(3)  # past the first look at the hosts
    assert launcher.poll() is None, launcher.communicate()[0][-3000:]
    stopped = time.monotonic()
    launcher.send_signal(signal.SIGINT)
    output = launcher.communicate(timeout=60)[0]
    assert launcher.returncode == 128 + signal.SIGINT and time.monotonic() - stopped < 10, output[-3000:]
    assert "hvdliterun: told to stop (SIGINT) before the next start; not starting the job again" in output, output
    assert "Traceback" not in output, output


def test_discovery_output_and_the_blacklist_cooldown(tmp_path, monkeypatch):
    """The launcher's pure parts: the discovery script's lines and a blacklisted host's return."""
    from hvdlite.runner import elastic
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


@pytest.mark.ranks(2)
def test_fast_checks_for_host_changes_make_few_allreduces_and_stop_every_rank_at_the_same_one(monkeypatch):
    """check_host_updates() called as fast as a loop can (a commit every short step): rank 0 paces the allreduce
    that carries the launcher's answer, so far fewer checks than made communicate; when the launcher (its real
    answering server) says the hosts changed, every rank learns it at the same check, within the pacing bound."""
    import hvdlite as hvd
    from hvdlite import ops
    from hvdlite.elastic import host_updates
    from hvdlite.runner.elastic import HostNews
    from hvdlite.runner.protocol import NOTIFY_VARIABLE
    hvd.init()
    news = HostNews() if hvd.rank() == 0 else None
    monkeypatch.setenv(NOTIFY_VARIABLE, ops.broadcast_object(news.address if news else None, root_rank=0))
    monkeypatch.setattr(host_updates, "_checks", {"count": 0, "next": 0, "count_at_last": 0, "time_at_last": None})
    allreduces = [0]
    real_allreduce = ops.allreduce

    def counting_allreduce(*args, **kwargs):  # counts, then does the real collective
        allreduces[0] += 1
        return real_allreduce(*args, **kwargs)
    monkeypatch.setattr(host_updates.ops, "allreduce", counting_allreduce)
    checks = 2000
    assert not any(host_updates.agreed() for _ in range(checks))
    assert checks // (host_updates.MAX_SKIPPED + 1) <= allreduces[0] <= checks // 20, allreduces[0]
    if news:
        news.updated.set()  # from the next check on, the launcher answers "1"
    seen = next(i for i in range(10 * host_updates.MAX_SKIPPED) if host_updates.agreed())
    assert seen <= host_updates.MAX_SKIPPED + 1
    assert ops.allgather_object(seen) == [seen] * hvd.size()
    if news:
        news.close()
