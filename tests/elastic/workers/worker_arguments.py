"""The command line both elastic training workers share (each adds its own options)."""
import argparse


def parser():
    """--out (where rank 0 writes the final weights' bytes; logs beside it), --epochs, --commit-every, and the
    failure to inject on the job's first start: rank --kill-rank SIGKILLs itself at --kill-at."""
    arguments = argparse.ArgumentParser()
    arguments.add_argument("--out", required=True)
    arguments.add_argument("--epochs", type=int, default=2)
    arguments.add_argument("--commit-every", type=int, default=1)
    arguments.add_argument("--kill-at", type=int, default=-1)
    arguments.add_argument("--kill-rank", type=int, default=1)
    return arguments
