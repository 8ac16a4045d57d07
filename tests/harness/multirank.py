"""Multi-rank tests are plain pytest tests.

A test marked ``@pytest.mark.ranks(2, 3)`` is collected once per rank count, as ``test_x[2 ranks]`` and
``test_x[3 ranks]``, and runs on that many real MPI processes. The first count is the test's own (``make test``
runs it); the others are marked ``extra_ranks`` (``make check`` adds them). Every rank runs the same test function, with
the environment of its ``@pytest.mark.hvd_env(NAME=value)`` marks (on the test, its module, or a parameter;
``{shared}`` in a value is a folder that every rank of the job sees).

How it runs. The pytest a user starts (the *outer* one) starts no MPI. When it reaches the first multi-rank
test of a group (same file, rank count and environment), it launches one job,
``mpiexec -n N python -m pytest <the group's selected tests>``, in which every rank is an *inner* pytest that
runs those tests and writes one report line per test phase to a file of its own. Each outer test then passes
when the test passed on every rank, and fails with the report of every rank that failed. A rank whose test
outlives its limit (``@pytest.mark.timeout(S)``, else TEST_TIMEOUT_S) prints every thread's stack and exits,
which ends the job (faulthandler's watchdog: it fires even while a C call holds the GIL); a job that dies or hangs fails the test that was running, and the group's remaining tests run in a new job.
So ``pytest -k name`` selects one behaviour, and one failure never hides the checks after it.

Across hosts. ``--hosts 2x2`` runs the jobs on simulated hosts (hvdlite/testing/simulated_hosts.py: network namespaces, needs
root): 2 hosts with 2 ranks each, placed in ``--placement blocks`` or ``round-robin``, over MPICH's ``--network
ofi`` or ``ucx`` layer (TCP between hosts). Only the multi-rank tests marked for that many ranks run.
"""
import faulthandler
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from hvdlite.testing import simulated_hosts
from harness.processes import venv_tool

JOB_SIZE = "HVDLITE_TEST_JOB_SIZE"        # set in a launched job: its number of ranks
JOB_RESULTS = "HVDLITE_TEST_JOB_RESULTS"  # set in a launched job: the folder its ranks write reports to
TEST_TIMEOUT_S = 180                      # a test's limit on each rank unless @pytest.mark.timeout says more
MANY_RANKS = (16, 32, 64)                 # the counts tests marked at_scale also run at (marked many_ranks)
MAX_MARKED_RANKS = max(MANY_RANKS)        # ranks_N marks are registered up to this count
JOB_START_S = 60                          # what a job may spend on starting (imports, MPI) beside its tests


def job_size():
    """The job's number of ranks inside a launched job, else None (the outer pytest)."""
    value = os.environ.get(JOB_SIZE)
    return int(value) if value else None


def job_rank():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):  # hydra, Open MPI: known before MPI_Init
        if name in os.environ:
            return int(os.environ[name])
    return 0


def pytest_addoption(parser):
    group = parser.getgroup("multirank", "multi-rank jobs")
    group.addoption("--hosts", metavar="HxP", help="run multi-rank jobs on H simulated hosts with P ranks each")
    group.addoption("--placement", choices=simulated_hosts.PLACEMENTS, default="blocks",
                    help="with --hosts: consecutive ranks on one host (blocks) or on the next host (round-robin)")
    group.addoption("--network", choices=sorted(simulated_hosts.NETWORK_LAYERS), default="ofi",
                    help="with --hosts: MPICH's network layer between hosts")


class AcrossHosts:
    """The outer pytest's simulated hosts (made at the first job, removed when the session ends)."""

    def __init__(self, config):
        self.count, self.per_host = simulated_hosts.parse_layout(config.getoption("hosts"))
        self.placement = config.getoption("placement")
        self.network = simulated_hosts.NETWORK_LAYERS[config.getoption("network")]
        self.hosts = None

    @property
    def size(self):
        return self.count * self.per_host

    def popen(self, program, env, **kwargs):
        if self.hosts is None:
            self.hosts = simulated_hosts.SimulatedHosts(self.count)
            self.hosts.up()
        argv = simulated_hosts.mpiexec_argv(self.hosts, venv_tool("mpiexec"), self.per_host, self.placement, program,
                                            env=self.network.items())
        return self.hosts.popen(self.hosts.names[0], argv, env=env, **kwargs)

    def kill(self):
        if self.hosts:
            self.hosts.kill_processes()

    def close(self):
        if self.hosts:
            self.hosts.down()
            self.hosts = None


def pytest_unconfigure(config):
    across = getattr(config, "hvd_across_hosts", None)
    if across:
        across.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "ranks(*counts): run the test as one job per count of MPI ranks")
    config.addinivalue_line("markers", "fewest_ranks: a multi-rank test's job of its fewest ranks (set by the harness)")
    config.addinivalue_line("markers", f"at_scale(check_long=False, up_to=None): a multi-rank test that also runs at "
                                       f"{MANY_RANKS} ranks (up to up_to; those jobs are marked many_ranks: "
                                       "harness/marks.py; and check_long with check_long=True)")
    for n in range(1, MAX_MARKED_RANKS + 1):
        config.addinivalue_line("markers", f"ranks_{n}: a multi-rank test's job of {n} ranks (set by the harness)")
    config.addinivalue_line("markers", "hvd_env(**variables): environment variables of the job that runs it")
    # Jobs run without pytest-timeout (each rank keeps the limit itself: RankReporter), which would register it.
    config.addinivalue_line("markers", "timeout(seconds): a test's time limit on each rank")
    config.hvd_across_hosts = AcrossHosts(config) if config.getoption("hosts") and job_size() is None else None
    if config.hvd_across_hosts:  # tests, collected here and run in the jobs, read the layout (job_layout)
        os.environ[simulated_hosts.LAYOUT_VARIABLE] = config.getoption("hosts")
        os.environ[simulated_hosts.PLACEMENT_VARIABLE] = config.getoption("placement")
    if job_size() is None:
        # Importing a test module here (to collect it) must not start MPI in this process.
        import mpi4py
        mpi4py.rc.initialize = False
        return
    rank = job_rank()
    results = os.environ[JOB_RESULTS]
    config.option.basetemp = os.path.join(results, f"tmp-rank{rank}")  # ranks must not share pytest's tmp dirs
    config.pluginmanager.register(RankReporter(os.path.join(results, f"rank{rank}.jsonl")), "multirank-reporter")


@pytest.fixture(autouse=True)
def ranks(request):
    """The test's rank count (its parameter), or None for a single-process test."""
    return getattr(request, "param", None)


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("ranks")
    if marker is not None:
        # The first count is the test's own; the others are variants that make check adds (extra_ranks). Each job
        # is also marked with its count (ranks_N), so that a stage can leave out a count with -m.
        # Tests marked at_scale run at the many-rank counts too, as jobs marked many_ranks (their own stage).
        # at_scale(check_long=True): all of them are check_long too; at_scale(up_to=N): the counts up to N only.
        at_scale = metafunc.definition.get_closest_marker("at_scale")
        up_to = at_scale.kwargs.get("up_to", max(MANY_RANKS)) if at_scale else 0
        many = [n for n in MANY_RANKS if n <= up_to and n not in marker.args]
        many_marks = [pytest.mark.extra_ranks, pytest.mark.many_ranks] + (
            [pytest.mark.check_long] if at_scale and at_scale.kwargs.get("check_long") else [])
        # The job of its fewest ranks is marked fewest_ranks too (what ThreadSanitizer runs).
        counts = [pytest.param(n, marks=[getattr(pytest.mark, f"ranks_{n}")] + ([pytest.mark.extra_ranks] if i else [])
                               + ([pytest.mark.fewest_ranks] if n == min(marker.args) else []),
                               id=f"{n} ranks") for i, n in enumerate(marker.args)]
        counts += [pytest.param(n, marks=[getattr(pytest.mark, f"ranks_{n}"), *many_marks], id=f"{n} ranks")
                   for n in many]
        metafunc.parametrize("ranks", counts)


def rank_count(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("ranks") if callspec else None


def job_environment(item):
    env = {}
    for marker in reversed(list(item.iter_markers("hvd_env"))):  # the closest mark wins
        env.update({name: str(value) for name, value in marker.kwargs.items()})
    return env


def keep_only_ranks(config, items, size):
    """Deselects every test but the multi-rank ones of size ranks."""
    dropped = [item for item in items if rank_count(item) != size]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [item for item in items if rank_count(item) == size]


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(session, config, items):
    size = job_size()
    if size is not None:
        # Inside a job: only the multi-rank tests of this size.
        keep_only_ranks(config, items, size)
        return
    across = config.hvd_across_hosts
    if across:
        # Across hosts: the multi-rank tests of the hosts' rank count, and nothing else.
        keep_only_ranks(config, items, across.size)
    groups = {}
    for index, item in enumerate(items):
        count = rank_count(item)
        if count is None:
            continue
        env = job_environment(item)
        key = (str(item.path), count, tuple(sorted(env.items())))
        group = groups.setdefault(key, Job(config, count, env))
        items[index] = MultiRankItem.from_parent(item.parent, name=item.name, original=item, job=group)
        group.items.append(items[index])


class RankReporter:
    """Inside a job: appends each test phase's report to this rank's file, as it happens, and ends the
    process when a test outlives its limit."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.file = open(path, "a", buffering=1)
        self.stacks = open(path.replace(".jsonl", ".stacks"), "w")  # pytest captures stderr during a test

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        faulthandler.dump_traceback_later(time_limit(item), exit=True, file=self.stacks)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()

    def pytest_runtest_logreport(self, report):
        sections = "".join(f"--- {title} ---\n{text}\n" for title, text in report.sections)
        self.file.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                                    "longrepr": report.longreprtext if report.failed or report.skipped else "",
                                    "sections": sections if report.failed else ""}) + "\n")


class MultiRankFailure(Exception):
    pass


class MultiRankItem(pytest.Item):
    """What the outer pytest runs in place of a multi-rank test: its job's verdict on every rank."""

    def __init__(self, *, original, job, **kwargs):
        super().__init__(**kwargs)
        self.job = job
        self.limit = time_limit(original)  # read before the marks below hide it
        # The job keeps its tests' time limits itself: pytest-timeout must not stop this process.
        self.own_markers = [pytest.mark.timeout(0).mark] + [m for m in original.own_markers if m.name != "timeout"]
        self.keywords.update(original.keywords)
        self._location = original.location

    @property
    def location(self):
        return self._location

    def runtest(self):
        verdict = self.job.verdict(self)
        if verdict.skipped:
            pytest.skip(verdict.text)
        if not verdict.passed:
            raise MultiRankFailure(verdict.text)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MultiRankFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, self._location[1], self.name


class Verdict:
    def __init__(self, passed, text="", skipped=False):
        self.passed, self.text, self.skipped = passed, text, skipped


class Job:
    """One group of multi-rank tests (same file, rank count and environment) and the jobs that run them."""

    def __init__(self, config, size, env):
        self.config, self.size, self.env = config, size, env
        self.items = []
        self.verdicts = {}

    def verdict(self, item):
        while item.nodeid not in self.verdicts:
            self.launch([i for i in self.items if i.nodeid not in self.verdicts])
        return self.verdicts.pop(item.nodeid)

    def launch(self, pending):
        results = tempfile.mkdtemp(prefix="hvdlite-job-")
        try:
            self.run_job(pending, results)
        finally:
            shutil.rmtree(results, ignore_errors=True)  # what a verdict needs of it is in its text by now

    def run_job(self, pending, results):
        shared = os.path.join(results, "shared")
        os.makedirs(shared)
        log_path = os.path.join(results, "job.log")
        limit = JOB_START_S + sum(item.limit for item in pending)
        program = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:timeout",
                   *[item.nodeid for item in pending]]
        across = self.config.hvd_across_hosts
        command = program if across else [venv_tool("mpiexec"), "-n", str(self.size), *program]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        # "{shared}" in a value is the folder every rank of this job sees (a timeline's path, say).
        env.update({name: value.replace("{shared}", shared) for name, value in self.env.items()})
        env.update({JOB_SIZE: str(self.size), JOB_RESULTS: results})
        started = time.monotonic()
        with open(log_path, "w") as log:
            options = dict(cwd=str(self.config.rootpath), env=env, stdout=log, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, start_new_session=True)
            process = across.popen(command, **options) if across else subprocess.Popen(command, **options)
            try:
                process.wait(timeout=limit)
                ended = f"the job exited with {process.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                if across:
                    across.kill()
                process.wait()
                ended = "the job was killed at its time limit"
        if across:
            across.kill()  # nothing of the job outlives it on any host
        records = read_records(results, self.size)
        with open(log_path, errors="replace") as f:
            log_tail = f.read()[-8000:]
        for rank in range(self.size):
            stacks_path = os.path.join(results, f"rank{rank}.stacks")
            if os.path.exists(stacks_path) and os.path.getsize(stacks_path):
                with open(stacks_path, errors="replace") as f:
                    log_tail += f"\n--- rank {rank} outlived its time limit; its threads ---\n{f.read()[-6000:]}"
        how = (f"{ended} after {time.monotonic() - started:.0f} s: "
               f"{' '.join(shlex.quote(part) for part in command[:8])} ... ({len(pending)} tests)\n"
               f"environment: {self.env}\n--- the job's output (tail) ---\n{log_tail}")
        finished = [item for item in pending if complete_on_every_rank(records, item.nodeid, self.size)]
        for item in finished:
            self.verdicts[item.nodeid] = judge(records, item.nodeid, self.size)
        unfinished = [item for item in pending if item.nodeid not in self.verdicts]
        if not unfinished:
            if process.returncode != 0 and all(self.verdicts[item.nodeid].passed for item in pending):
                # Every test passed, yet a rank failed after them (at exit: a crash in shutdown, a sanitizer's
                # report): the last test carries it.
                self.verdicts[pending[-1].nodeid] = Verdict(False, f"every test passed, then the job failed.\n{how}")
            return
        # The first test the job did not finish is the one it died or hung in; if no rank reported anything,
        # the job never got going (collection or start-up failed), and no relaunch would do better.
        blamed = unfinished[:1] if records else unfinished
        for item in blamed:
            partial = judge(records, item.nodeid, self.size).text
            self.verdicts[item.nodeid] = Verdict(
                False, f"the job ended in this test (no report from some ranks).\n{partial}\n{how}")


def time_limit(item):
    """A test's limit in seconds on each rank: its @pytest.mark.timeout, else TEST_TIMEOUT_S."""
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return TEST_TIMEOUT_S
    return marker.args[0] if marker.args else marker.kwargs.get("timeout", TEST_TIMEOUT_S)


def read_records(results, size):
    records = {}
    for rank in range(size):
        path = os.path.join(results, f"rank{rank}.jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a killed rank
                    continue
                records.setdefault(record["nodeid"], {}).setdefault(rank, []).append(record)
    return records


def complete_on_every_rank(records, nodeid, size):
    per_rank = records.get(nodeid, {})
    return len(per_rank) == size and all(any(r["when"] == "teardown" for r in per_rank[rank]) for rank in per_rank)


def judge(records, nodeid, size):
    per_rank = records.get(nodeid, {})
    failures, skips = [], []
    for rank in range(size):
        for record in per_rank.get(rank, []):
            if record["outcome"] == "failed":
                failures.append(f"=== rank {rank} ({record['when']}) ===\n{record['longrepr']}\n{record['sections']}")
            elif record["outcome"] == "skipped":
                skips.append(f"rank {rank}: {record['longrepr']}")
    missing = [rank for rank in range(size) if rank not in per_rank]
    if failures:
        ranks_failed = sorted({int(f.split()[2]) for f in failures})
        return Verdict(False, f"failed on ranks {ranks_failed} of {size}\n" + "\n".join(failures))
    if skips:
        return Verdict(True, "; ".join(skips), skipped=True)
    if missing:
        return Verdict(False, f"no report from ranks {missing} of {size}")
    return Verdict(True)
