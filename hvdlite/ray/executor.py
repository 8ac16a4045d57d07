"""RayExecutor: ranks that live in Ray actors.

``start()`` places one actor per rank with a placement group; each actor runs a slot agent (hvdlite/runner/slots.py)
and registers it with this driver, which then starts an hvdliterun job on the actors (slot_job.run_on_slots): rank
i is a child process of actor i, and runs rank_server.serve, connected to its actor by loopback. Each call
(``run``, ``execute``, ...) is an actor method that hands the function to its rank and returns what the rank
returned, so ``run_remote`` gives real ObjectRefs. An actor that dies ends the job at once (its registration
connection drops); a function that raises ends it too (the other ranks may wait for it in a collective). Either
way the next call raises and the executor needs ``shutdown()`` and ``start()`` again.
"""
import socket
import threading
import types

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError:
    raise ImportError("hvdlite.ray needs Ray: pip install 'hvdlite[ray]' (or pip install ray)") from None

import cloudpickle

from hvdlite.runner.function_runner import RankFailed, receive_block, send_block
from hvdlite.runner.slot_job import SlotLost, run_on_slots
from hvdlite.runner.slots import ALIAS, SlotAgent, SlotRegistry, register_and_wait

from . import rank_server

END_SECONDS = 60  # for the job to end after stop, and for actors to go


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


class RayExecutor:
    """horovod.ray.RayExecutor: ``RayExecutor(settings, num_workers=4, cpus_per_worker=1, use_gpu=False)``, or
    ``num_hosts`` x ``num_workers_per_host``; ``start()``, ``run(fn)``, ``run_remote``, ``execute(fn)``,
    ``execute_single``, ``shutdown()``."""

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
        if min_workers is not None or max_workers is not None:
            raise ValueError("an elastic RayExecutor (min_workers/max_workers) is not provided: start a new executor "
                             "after a failure, with hvd.elastic commits carrying the state (docs/ray.md)")
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("give either num_workers or num_hosts (with num_workers_per_host)")
        self.settings = settings
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self._per_host = None if num_hosts is None else num_workers_per_host
        self._resources = {"CPU": cpus_per_worker}
        if use_gpu:
            self._resources["GPU"] = gpus_per_worker or 1
        self._actors, self._group, self._registry, self._job = [], None, None, None

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Places the actors and starts the ranks in them (each with an ``executable_cls(*args, **kwargs)`` for
        ``execute``, if given)."""
        if self._actors:
            raise RuntimeError("the executor is started already")
        if self._per_host is None:  # a bundle per rank, packed onto as few nodes as Ray can
            bundles, strategy = [dict(self._resources)] * self.num_workers, "PACK"
        else:  # a bundle per host, each host its own node
            bundles = [{name: amount * self._per_host for name, amount in self._resources.items()}] * (
                self.num_workers // self._per_host)
            strategy = "STRICT_SPREAD"
        self._group = placement_group(bundles, strategy=strategy)
        ray.get(self._group.ready(), timeout=self.settings.placement_group_timeout_s)
        self._registry = SlotRegistry(self.num_workers)
        driver = ray.util.get_node_ip_address()
        per_bundle = self._per_host or 1
        self._actors = [_SlotActor.options(
            num_cpus=self._resources["CPU"], num_gpus=self._resources.get("GPU", 0),
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=i // per_bundle),
        ).remote((driver, self._registry.port), self._registry.secret, i) for i in range(self.num_workers)]
        try:
            self._registry.wait_for_all(self.settings.timeout_s)
        except BaseException:
            self.shutdown()
            raise
        # Rank r talks to the r-th actor in rank order (an actor on its machine), and answers in rank order.
        self._actors = [self._actors[index] for index in self._registry.rank_order()]
        ports = [self._registry.slots[index]["call_port"] for index in self._registry.rank_order()]
        executable = (executable_cls, executable_args, executable_kwargs) if executable_cls else None
        self._job = _Job(self._registry, driver, (ports, self._registry.secret, executable), extra_env_vars,
                         self.settings.nics)

    def run_remote(self, fn, args=None, kwargs=None):
        """``fn(*args, **kwargs)`` on every rank: a list of ObjectRefs, by rank."""
        return self._call_all(("run", fn, list(args or ()), dict(kwargs or {})))

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """``fn(*args, **kwargs)`` on every rank: their values, by rank."""
        _no_callbacks(callbacks)
        return self._get(self.run_remote(fn, args, kwargs))

    def execute(self, fn, callbacks=None):
        """``fn(executable)`` on every rank (the executable_cls instance made at start, or None)."""
        _no_callbacks(callbacks)
        return self._get(self._call_all(("execute", fn, None, None)))

    def execute_single(self, fn):
        """``fn(executable)`` on rank 0 only (it must not wait for the other ranks)."""
        return self._get([self._call(self._actors[0], ("execute", fn, None, None))])[0]

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
            self._registry.release()
        for actor in self._actors:
            ray.kill(actor)
        if self._group is not None:
            remove_placement_group(self._group)
        self._actors, self._group, self._registry, self._job = [], None, None, None


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
