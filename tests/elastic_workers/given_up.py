"""An elastic job that commits one step at each start and then, given "fail", fails (exit code 3), so that the
launcher gives it up after its restarts; given "succeed", it finishes (and removes its commits). Each rank prints
"STEP rank step" for the step it committed."""
import sys

import hvdlite
from hvdlite.elastic import ObjectState, run


@run
def train(state):
    state.step += 1
    print(f"STEP {hvdlite.rank()} {state.step}", flush=True)
    state.commit()
    if sys.argv[1] == "fail":
        sys.exit(3)


hvdlite.init()
train(ObjectState(step=0))
