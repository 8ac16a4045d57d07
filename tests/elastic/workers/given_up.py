"""An elastic job that commits one step at each start and then, given "fail", fails (exit code 3), so that the
launcher gives it up after its restarts; given "succeed", it finishes (and removes its commits); given "wait", it
waits to be stopped. Each rank prints "STEP rank step" for the step it committed."""
import sys
import time

import hvdlite
from hvdlite.elastic import ObjectState, run


@run
def train(state):
    state.step += 1
    state.commit()
    print(f"STEP {hvdlite.rank()} {state.step}", flush=True)
    if sys.argv[1] == "fail":
        sys.exit(3)
    while sys.argv[1] == "wait":
        time.sleep(1)


hvdlite.init()
train(ObjectState(step=0))
