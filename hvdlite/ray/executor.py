"""RayExecutor: ranks that live in Ray actors.

``start()`` places one actor per rank with a placement group; each actor runs a slot agent (hvdlite/runner/slots.py)
and registers it with this driver, which then starts an hvdliterun job on the actors (slot_job.run_on_slots): a
node's ranks are children of its first actor, and rank r runs rank_server.serve, connected by loopback to the r-th
actor, on its node. Each call (``run``, ``execute``, ...) is an actor method that hands the function to its rank and
returns what the rank returned, so ``run_remote`` gives real ObjectRefs. An actor that dies ends the job at once
(its registration connection drops); a function that raises ends it too (the other ranks may wait for it in a
collective). Either way the next call raises and the executor needs ``shutdown()`` and ``start()`` again.

An elastic executor (``min_workers``) places its actors at each ``run`` instead and runs the function itself on
them (slot_elastic.run_elastic_on_slots): a lost actor gives the actors back and places new ones, the ranks
resuming from their last ``hvd.elastic`` commit.
"""
import socket
import sys
import threading
import types

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy
except ImportError:
    raise ImportError("hvdlite.ray needs Ray: pip install 'hvdlite[ray]' (or pip install ray)") from None

import cloudpickle

from hvdlite.runner.function_runner import RankFailed, receive_block, send_block
from hvdlite.runner.protocol import JOB_VARIABLE
from hvdlite.runner.slot_elastic import SlotSource, run_elastic_on_slots
from hvdlite.runner.slot_job import SlotLost, run_on_slots
from hvdlite.runner.slots import ALIAS, SlotAgent, SlotRegistry, register_and_wait

from . import rank_server

END_SECONDS = 60  # for the job to end after stop, and for actors to go
REMOVAL_SECONDS = 60  # for a given-up elastic run's commits to be removed on every node


@ray.remote(num_cpus=0)
def _remove_commits_here(job):
    from hvdlite.runner import commit_folders
    commit_folders.remove_here({JOB_VARIABLE: job})


@ray.remote
class _SlotActor:
    """One rank's actor: the slot agent that starts the rank, and the port its rank takes calls from."""

    def __init__(self, registry_address, secret, index):
        self._secret = secret
        self._calls = socket.create_server(("127.0.0.1", 0))
        self._rank = None
        self._connected = threading.Condition()
        agent = SlotAgent(secret)
        extra = {"call_port": self._calls.getsockname()[1]}
        threading.Thread(target=register_and_wait, args=(registry_address, secret, index, agent, extra),
                         daemon=True).start()
        threading.Thread(target=self._accept_rank, daemon=True).start()

    def _accept_rank(self):
        while True:
            try:
                connection, _ = self._calls.accept()
            except OSError:
                return
            try:
                connection.settimeout(60)
                if receive_block(connection) != self._secret.encode():
                    connection.close()
                    continue
                connection.settimeout(None)
            except (OSError, ConnectionError):
                connection.close()
                continue
            with self._connected:
                self._rank = connection
                self._connected.notify_all()

    def call(self, payload, timeout):
        """Runs a call (rank_server's) on this actor's rank; its value, or RuntimeError with what went wrong."""
        with self._connected:
            if not self._connected.wait_for(lambda: self._rank is not None, timeout=timeout):
                raise RuntimeError(f"the rank did not connect to its actor within {timeout:g} s")
            rank = self._rank
        try:
            send_block(rank, payload)
            kind, value = cloudpickle.loads(receive_block(rank))
        except (OSError, ConnectionError):
            raise RuntimeError("the rank's process ended before answering: the job is over (a rank raised or an "
                               "actor was lost); start the executor again") from None
        if kind == "error":
            raise RuntimeError(value)
        return value

    def stop(self):
        with self._connected:
            rank = self._rank
        if rank is not None:
            try:
                send_block(rank, rank_server.STOP)
            except OSError:
                pass


class _RaySlots(SlotSource):
    """Slots as _SlotActors placed with a placement group, one group per acquire: a bundle per rank packed onto as
    few nodes as Ray can, or (``per_host``) a bundle of that many ranks per node, each on its own node."""

    def __init__(self, resources, per_host, placement_timeout):
        self.caller_host = ray.util.get_node_ip_address()
        self._resources, self._per_host, self._placement_timeout = resources, per_host, placement_timeout
        self._placed = {}  # id(registry) -> (placement group, actors by slot index)

    def available(self):
        free = ray.available_resources()
        return min(int(free.get(name, 0) // amount) for name, amount in self._resources.items() if amount)

    def acquire(self, count, timeout):
        if self._per_host is None:
            bundles, strategy, per_bundle = [dict(self._resources)] * count, "PACK", 1
        else:
            bundles = [{name: amount * self._per_host for name, amount in self._resources.items()}] * (
                count // self._per_host)
            strategy, per_bundle = "STRICT_SPREAD", self._per_host
        group = placement_group(bundles, strategy=strategy)
        try:
            ray.get(group.ready(), timeout=self._placement_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise TimeoutError(f"Ray could not place {count} workers ({strategy} of {bundles[0]}) within "
                               f"{self._placement_timeout:g} s") from None
        registry = SlotRegistry(count)
        self._placed[id(registry)] = (group, [_SlotActor.options(
            num_cpus=self._resources["CPU"], num_gpus=self._resources.get("GPU", 0),
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i // per_bundle),
        ).remote((self.caller_host, registry.port), registry.secret, i) for i in range(count)])
        return self.registered(registry, timeout)

    def remove_commits(self, job, log):
        """A task on every live node (taking no CPU, so it runs whatever the node is busy with)."""
        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        refs = [_remove_commits_here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                .remote(job) for node in nodes]
        try:
            ray.get(refs, timeout=REMOVAL_SECONDS)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as error:
            log(f"could not remove the job's commits on every node: {error}")

    def actors(self, registry):
        """The actors by rank: rank r takes its calls from the r-th, on its node (slot_job numbers ranks machine by
        machine)."""
        actors = self._placed[id(registry)][1]
        return [actors[index] for index in registry.rank_order()]

    def release(self, registry, failed):
        group, actors = self._placed.pop(id(registry))
        registry.release()
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)


class RayExecutor:
    """horovod.ray.RayExecutor: ``RayExecutor(settings, num_workers=4, cpus_per_worker=1, use_gpu=False)``, or
    ``num_hosts`` x ``num_workers_per_host``; ``start()``, ``run(fn)``, ``run_remote``, ``execute(fn)``,
    ``execute_single``, ``shutdown()``. Elastic with ``min_workers`` (and ``max_workers``): then ``run`` only,
    which starts the ranks again after an actor is lost (runner/slot_elastic.py)."""

    @staticmethod
    def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None):
        """Horovod's settings: ``timeout_s`` (for the ranks to start), ``placement_group_timeout_s``, ``nics``
        (network interfaces for the ranks' traffic). The ssh arguments are taken and not needed: no ssh is used."""
        return types.SimpleNamespace(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                                     nics=list(nics) if nics else None)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=1200,
                 override_discovery=True):
        self.elastic = min_workers is not None or max_workers is not None
        if self.elastic and num_hosts is not None:
            raise ValueError("an elastic RayExecutor places workers one by one: give min_workers/max_workers "
                             "(and num_workers for the first start), not num_hosts")
        if not self.elastic and (num_workers is None) == (num_hosts is None):
            raise ValueError("give either num_workers or num_hosts (with num_workers_per_host)")
        self.settings = settings
        self.num_workers = num_workers if num_hosts is None else num_hosts * num_workers_per_host
        self._elastic = dict(min_workers=min_workers or 1, max_workers=max_workers, reset_limit=reset_limit,
                             elastic_timeout=elastic_timeout)
        self._resources = {"CPU": cpus_per_worker}
        if use_gpu:
            self._resources["GPU"] = gpus_per_worker or 1
        self._per_host = None if num_hosts is None else num_workers_per_host
        self._source = None  # made at start (Ray's driver address is known once Ray is initialised)
        self._actors, self._registry, self._job, self._env, self._started = [], None, None, None, False

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Places the actors and starts the ranks in them (each with an ``executable_cls(*args, **kwargs)`` for
        ``execute``, if given). An elastic executor places them at each ``run``."""
        if self._started:
            raise RuntimeError("the executor is started already")
        self._source = _RaySlots(self._resources, self._per_host, self.settings.placement_group_timeout_s)
        self._env, self._started = extra_env_vars, True
        if self.elastic:
            if executable_cls is not None:
                raise ValueError("an elastic RayExecutor runs functions only (run): executable_cls is not taken")
            return
        try:
            self._registry = self._source.acquire(self.num_workers, self.settings.timeout_s)
        except BaseException:
            self._started = False
            raise
        self._actors = self._source.actors(self._registry)
        ports = [self._registry.slots[index]["call_port"] for index in self._registry.rank_order()]
        executable = (executable_cls, executable_args, executable_kwargs) if executable_cls else None
        self._job = _Job(self._registry, self._source.caller_host, (ports, self._registry.secret, executable),
                         extra_env_vars, self.settings.nics)

    def run_remote(self, fn, args=None, kwargs=None):
        """``fn(*args, **kwargs)`` on every rank: a list of ObjectRefs, by rank."""
        self._not_elastic("run_remote")
        return self._call_all(("run", fn, list(args or ()), dict(kwargs or {})))

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """``fn(*args, **kwargs)`` on every rank: their values, by rank. Elastic: on ``num_workers`` ranks first
        (else as many as Ray has room for, within min..max), started again from the last ``hvd.elastic`` commit
        after an actor or a rank's process is lost, at most ``reset_limit`` times."""
        _no_callbacks(callbacks)
        if self.elastic:
            return self._run_elastic(fn, args, kwargs)
        return self._get(self.run_remote(fn, args, kwargs))

    def _run_elastic(self, fn, args, kwargs):
        if not self._started:
            raise RuntimeError("start() the executor first")
        low, high = self._elastic["min_workers"], self._elastic["max_workers"]
        first = self.num_workers or max(low, min(self._source.available(), high or float("inf")))
        return run_elastic_on_slots(fn, list(args or ()), dict(kwargs or {}), self._source, first, low, high,
                                    self._elastic["elastic_timeout"], self._elastic["reset_limit"], _log,
                                    env=self._env, start_timeout=self.settings.timeout_s,
                                    network_interfaces=self.settings.nics)

    def execute(self, fn, callbacks=None):
        """``fn(executable)`` on every rank (the executable_cls instance made at start, or None)."""
        _no_callbacks(callbacks)
        self._not_elastic("execute")
        return self._get(self._call_all(("execute", fn, None, None)))

    def execute_single(self, fn):
        """``fn(executable)`` on rank 0 only (it must not wait for the other ranks)."""
        self._not_elastic("execute_single")
        return self._get([self._call(self._actors[0], ("execute", fn, None, None))])[0]

    def _not_elastic(self, what):
        if self.elastic:
            raise ValueError(f"{what} is not offered by an elastic RayExecutor (as in Horovod's): use run")

    def _check_started(self):
        if not self._actors:
            raise RuntimeError("start() the executor first")
        if not self._job.running():
            raise RuntimeError(f"the ranks' job has ended ({self._job.error or 'it stopped'}); shutdown() and "
                               f"start() the executor again")

    def _call_all(self, call):
        self._check_started()
        payload = cloudpickle.dumps(call)
        return [actor.call.remote(payload, self.settings.timeout_s) for actor in self._actors]

    def _call(self, actor, call):
        self._check_started()
        return actor.call.remote(cloudpickle.dumps(call), self.settings.timeout_s)

    def _get(self, refs):
        try:
            return ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            pass
        said, dead = [], []
        for rank, ref in enumerate(refs):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                dead.append(rank)
            except ray.exceptions.RayTaskError as error:
                said.append(f"--- rank {rank} ---\n{getattr(error, 'cause', None) or error}")
        if dead or self._registry.lost:  # an actor died: that is the cause, whatever the other ranks said
            lost = [f"{ALIAS.format(index)} (host {host})" for index, host in self._registry.lost]
            lost += [f"rank {rank}" for rank in dead if not self._registry.lost]
            raise SlotLost(f"the job ended: lost the actor of {', '.join(lost)}")
        raise RankFailed("the function failed on the ranks below; the executor must be started again:\n"
                         + "\n".join(said))

    def shutdown(self):
        """Ends the ranks and the actors and frees the placement group."""
        for actor in self._actors:
            actor.stop.remote()
        if self._job is not None:
            self._job.end()
        if self._registry is not None:
            self._source.release(self._registry, failed=False)
        self._actors, self._registry, self._job, self._started = [], None, None, False


def _log(message):
    print(f"hvdlite.ray: {message}", file=sys.stderr, flush=True)


def _no_callbacks(callbacks):
    if callbacks:
        raise ValueError("callbacks (values logged by rank 0, for Horovod's elastic executor) are not provided")


class _Job:
    """The hvdliterun job of the ranks, run by a thread until they stop (or fail)."""

    def __init__(self, registry, driver, serve_args, env, nics):
        self.error = None
        self._thread = threading.Thread(target=self._run, args=(registry, driver, serve_args, env, nics),
                                        daemon=True, name="hvdlite-ray-job")
        self._thread.start()

    def _run(self, registry, driver, serve_args, env, nics):
        try:
            run_on_slots(rank_server.serve, serve_args, {}, registry, driver, env=env, network_interfaces=nics)
        except Exception as error:  # noqa: BLE001 (the calls say what failed; kept for shutdown's report)
            self.error = error

    def running(self):
        return self._thread.is_alive()

    def end(self):
        self._thread.join(END_SECONDS)
