"""Commits finished in the background: for states whose tensors live on GPUs.

Such a state's commit copies its tensors within the GPU (ordered after the step on the GPU's stream, nothing
waited for on the host), pickles the rest of the commit in line and hands both to the one thread here, which
moves the copies into the host's memory slot (``fill``) and stores the commit there (commits.write's second half).
Training goes on meanwhile: the transfer runs on the GPU's copy engine beside the next step's kernels. One commit
is under way at a time: the next one, and anything that reads the host's commits or ends the process, waits for it
first (``wait``), so that a commit reaches the host's memory in the order made and before the process goes.
"""
import sys
import threading


class Filler:
    """The thread that finishes commits handed to ``submit``, one at a time."""

    def __init__(self, finish):
        self._finish = finish  # finish(sequence, data, views): stores a filled commit (in the host's memory)
        self._condition = threading.Condition()
        self._job = None     # (sequence, data, views, fill) handed over, not yet finished
        self._error = None   # what finishing the last one raised, for the next wait
        threading.Thread(target=self._run, name="hvdlite-commit-fill", daemon=True).start()

    def submit(self, sequence, data, views, fill):
        """Hands over commit ``sequence`` (commit_body.pickled's data and views) whose arrays ``fill()`` writes;
        waits first for the one before (raising what it raised)."""
        self.wait()
        with self._condition:
            self._job = (sequence, data, views, fill)
            self._condition.notify_all()

    def wait(self, timeout=None):
        """Until the commit handed over is in the host's memory (False when ``timeout`` seconds passed first);
        raises what finishing it raised."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._job is None, timeout=timeout):
                return False
            error, self._error = self._error, None
        if error is not None:
            raise error
        return True

    def _run(self):
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._job is not None)
                sequence, data, views, fill = self._job
            error = None
            try:
                fill()
                self._finish(sequence, data, views)
            except BaseException as caught:  # noqa: BLE001 (a CUDA error too: raised at the next wait, not lost)
                error = caught
            with self._condition:
                self._job, self._error = None, error
                self._condition.notify_all()


def wait_at_exit(filler, rank, timeout):
    """At a process's end: lets the commit under way reach the host's memory (it is local work: bounded by a
    transfer from the GPU), saying so where it failed or did not finish in ``timeout`` seconds."""
    try:
        if not filler.wait(timeout):
            print(f"[hvdlite rank {rank}] elastic: the last commit did not reach the host's memory in {timeout} s",
                  file=sys.stderr, flush=True)
    except Exception as error:  # noqa: BLE001
        print(f"[hvdlite rank {rank}] elastic: the last commit did not reach the host's memory: {error}",
              file=sys.stderr, flush=True)
