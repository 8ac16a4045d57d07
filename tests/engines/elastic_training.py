"""What the engines' elastic tests run on their ranks (sent by value: the ranks cannot import the tests' modules):
a small torch model trained with DistributedOptimizer under ``hvd.elastic.run``, committing after every step, whose
data depend only on the step and the rank, so that a run interrupted and resumed from a commit ends with the very
parameters of an uninterrupted one. On the first start (or on every one), the last rank can kill the engine's
process holding it (its slot) right after the commit of the start's n-th step, as an engine loses a task or an
actor."""
import os
import signal
import time

from harness.process_tree import ancestor_with

STEPS = 12


def train(kill_after_steps=None, slot_word=None, kill_on_every_start=False):
    """Trains STEPS steps; returns this rank's parameters (float64 arrays), how many restarts the job had and the
    step this start resumed at."""
    import numpy as np
    import torch

    import hvdlite.torch as hvd
    from hvdlite.elastic.resume import restarts

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0)
    resumed_at = []

    @hvd.elastic.run
    def loop(state):
        resumed_at.append(state.step)
        while state.step < STEPS:
            data = np.random.default_rng(1000 * state.step + hvd.rank()).standard_normal((8, 7))
            inputs, targets = torch.from_numpy(data[:, :6]), torch.from_numpy(data[:, 6:])
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
            state.step += 1
            state.commit()
            if (state.step - resumed_at[0] == kill_after_steps and hvd.rank() == hvd.size() - 1
                    and (restarts() == 0 or kill_on_every_start)):
                os.kill(ancestor_with(slot_word), signal.SIGKILL)
                time.sleep(600)  # the job ends around this rank: its slot is gone

    loop(state)
    return {"parameters": [p.detach().numpy().copy() for p in model.parameters()], "restarts": restarts(),
            "resumed_at": resumed_at[0], "size": hvd.size()}
