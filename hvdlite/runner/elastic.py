"""hvdliterun's restarts: ``--max-restarts N`` for a job of fixed size, and Horovod's elastic flags
(``--host-discovery-script`` with ``--min-np``/``--max-np``/``--slots-per-host``/``--elastic-timeout``/
``--reset-limit``/``--blacklist-cooldown-range``) for a job that follows the hosts it is given.

Each start of the job is one mpiexec run. When it fails (a rank died, a host was lost) the supervisor starts it
again: on the same hosts for a fixed-size job; for an elastic one on the hosts the discovery script lists
now, minus those that failed (blacklisted, for a cooldown if one is given), with as many ranks as they have
slots (at most --max-np), waiting up to --elastic-timeout for at least --min-np. While an elastic job runs, the
discovery script is polled; when it finds room for more ranks, the ranks hear it at their next commit
(HVDLITE_ELASTIC_NOTIFY), stop there with exit code 75, and the job starts again larger without counting a
failure; likewise when the script stops listing a host the job runs on. The ranks resume from the newest commit
(hvdlite.elastic). One line on stderr says why for each start.
"""
import random
import signal
import socket
import subprocess
import threading
import time

from .arguments import job_hosts
from .commit_removal import remove_commits
from .protocol import EXIT_HOSTS_UPDATED, JOB_VARIABLE, NOTIFY_VARIABLE, RESTART_VARIABLE
from .hosts import Host
from .job import STOP_SIGNALS, new_job_id, run_job
from .protocol import COMMITTED
from .reachability import host_problems
from .report_port import report_addresses

DISCOVERY_INTERVAL_SECONDS = 1.0


def discover(script, slots_per_host, timeout=30.0):
    """Hosts listed by the discovery script: one per line, 'host:slots' or 'host' (then --slots-per-host)."""
    result = subprocess.run(script, shell=True, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"host discovery script {script!r} failed with exit code {result.returncode}: "
                           f"{result.stderr.strip()[:500]}")
    hosts = []
    for line in result.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, slots = line.partition(":")
        hosts.append(Host(name.strip(), int(slots) if slots else slots_per_host))
    return hosts


class Blacklist:
    """Hosts that failed, each left out until its cooldown ends (forever without a cooldown range)."""

    def __init__(self, cooldown_range=None):
        self.cooldown_range = cooldown_range
        self.until = {}

    def add(self, name):
        if self.cooldown_range:
            low, high = self.cooldown_range
            self.until[name] = time.monotonic() + random.uniform(low, high)
        else:
            self.until[name] = float("inf")

    def excludes(self, name):
        return self.until.get(name, 0.0) > time.monotonic()


class HostNews:
    """Answers the ranks' question "have the hosts changed?" on a TCP port (hvdlite.elastic.host_updates)."""

    def __init__(self):
        self.updated = threading.Event()
        self.server = socket.create_server(("", 0))
        self.address = f"{socket.gethostname()}:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                try:
                    connection.sendall(b"1\n" if self.updated.is_set() else b"0\n")
                except OSError:
                    pass

    def close(self):
        self.server.close()


class Supervisor:
    """Starts the job again after failures (and, elastic, when hosts are added) until it succeeds or may not."""

    def __init__(self, args, build_argv, env, log):
        self.args = args
        self.build_argv = build_argv  # (hosts or None, num_proc, what=the job's program) -> mpiexec argv
        self.env = env
        self.log = log
        self.elastic = bool(args.host_discovery_script)
        self.blacklist = Blacklist(args.blacklist_cooldown_range)
        self.job = new_job_id()  # the same for every start: where the ranks find their commits
        self.ran_on = []  # names of the hosts of every start so far (none: this host only)
        self.reports = set()  # what the ranks of every start so far reported (job.REPORTS)
        self.stop_signal = None  # the signal that told the launcher to stop between starts (see run)
        self._stopping = threading.Event()

    def run(self):
        """Runs the job to its end; returns the exit code. A job given up after it committed leaves no commits
        behind, unless they are where the user keeps them (a new start with the same folder resumes from them)."""
        # A signal while a start runs reaches run_job's handlers (forwarded to the job, which then ends for good);
        # one between starts (waiting for slots, asking the discovery script) reaches these.
        previous = {sig: signal.signal(sig, self._told_to_stop) for sig in STOP_SIGNALS}
        try:
            code = self._run_starts()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if code != 0 and COMMITTED in self.reports:
            remove_commits(self.job, [name for name in self.ran_on if not self.blacklist.excludes(name)], self.env,
                           self.build_argv, self.args.launcher_exec, self.log, self.args.ssh_args,
                           self.args.launcher)
        return code

    def _told_to_stop(self, signum, _frame):
        self.stop_signal = signum
        self._stopping.set()

    def _run_starts(self):
        failures = starts = 0
        news = HostNews() if self.elastic else None
        try:
            while True:
                placement = self._placement()
                if self._stopping.is_set():
                    self.log(f"told to stop ({signal.Signals(self.stop_signal).name}) before the next start; not "
                             "starting the job again")
                    return 128 + self.stop_signal
                if placement is None:
                    return 1
                hosts, num_proc = placement
                self.ran_on = list(dict.fromkeys([*self.ran_on, *(h.name for h in hosts or [])]))
                env = dict(self.env, **{JOB_VARIABLE: self.job, RESTART_VARIABLE: str(starts)})
                stop_polling = threading.Event()
                if news:
                    news.updated.clear()
                    env[NOTIFY_VARIABLE] = news.address
                    threading.Thread(target=self._poll, args=(hosts, num_proc, news, stop_polling),
                                     daemon=True).start()
                outcome = run_job(self.build_argv(hosts, num_proc), env, new_job_id(), log=self.log, ranks=num_proc,
                                  start_timeout=self.args.start_timeout,
                                  listen_on=report_addresses([h.name for h in hosts or []], self.args.interfaces))
                stop_polling.set()
                self.reports |= outcome.reports
                code = outcome.code
                starts += 1
                if code == 0:
                    return 0
                if outcome.interrupted:
                    self.log(f"the job ended with exit code {code} after the launcher was told to stop; "
                             "not starting it again")
                    return code
                if self.args.reset_limit is not None and starts > self.args.reset_limit:
                    self.log(f"the job ended with exit code {code} after {starts - 1} restarts, the --reset-limit")
                    return code
                if code == EXIT_HOSTS_UPDATED and self.elastic:
                    self.log(f"restart {starts}: the hosts changed; starting again on them from the last commit")
                    continue
                if failures >= self.args.max_restarts and not self.elastic:
                    self.log(f"the job failed with exit code {code}; no restart left (--max-restarts "
                             f"{self.args.max_restarts})")
                    return code
                failures += 1
                lost = self._blacklist_unreachable(hosts) if self.elastic else []
                self.log(f"restart {starts}: the job failed with exit code {code}"
                         + (f", hosts {', '.join(lost)} unreachable and blacklisted" if lost else "")
                         + (f" (failure {failures} of at most {self.args.max_restarts})" if not self.elastic else "")
                         + "; starting again from the last commit")
        finally:
            if news:
                news.close()

    def _placement(self):
        """(hosts, num_proc) for the next start; None when too few slots appear in time (logged) or the launcher is
        told to stop meanwhile."""
        if not self.elastic:
            return job_hosts(self.args), self.args.num_proc
        deadline = time.monotonic() + self.args.elastic_timeout
        while True:
            hosts = self._usable_hosts()
            slots = sum(h.slots for h in hosts)
            if slots >= self.args.min_np:
                return self._fill(hosts, min(slots, self.args.max_np or slots))
            if time.monotonic() >= deadline:
                self.log(f"only {slots} slots available (at least {self.args.min_np} needed) after waiting "
                         f"{self.args.elastic_timeout:g} s (--elastic-timeout); giving up")
                return None
            if self._stopping.wait(DISCOVERY_INTERVAL_SECONDS):
                return None

    def _usable_hosts(self):
        try:
            found = discover(self.args.host_discovery_script, self.args.slots_per_host)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as error:
            self.log(str(error))
            return []
        return [h for h in found if not self.blacklist.excludes(h.name)]

    @staticmethod
    def _fill(hosts, num_proc):
        """The first hosts whose slots hold num_proc ranks, the last one given only what it needs."""
        chosen, left = [], num_proc
        for host in hosts:
            if left <= 0:
                break
            take = min(host.slots, left)
            chosen.append(Host(host.name, take))
            left -= take
        return chosen, num_proc

    def _poll(self, hosts, num_proc, news, stop):
        """While the job runs: flags news when discovery finds room for more ranks (up to --max-np) or no longer
        lists a host the job runs on (say, one about to be taken away): the ranks stop at their next commit and
        the job starts again on what is listed then."""
        limit = self.args.max_np or float("inf")
        running = {h.name for h in hosts}
        while not stop.wait(DISCOVERY_INTERVAL_SECONDS):
            listed = self._usable_hosts()
            if not listed:
                continue  # a failing or empty discovery run is no reason to stop a healthy job
            grows = min(sum(h.slots for h in listed), limit) > num_proc
            if grows or not running <= {h.name for h in listed}:
                news.updated.set()
                return

    def _blacklist_unreachable(self, hosts):
        lost = list(host_problems([h.name for h in hosts or []], self.args.launcher_exec,
                                  ssh_args=self.args.ssh_args))
        for name in lost:
            self.blacklist.add(name)
        return lost
