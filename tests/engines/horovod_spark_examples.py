"""Runs Horovod's own Spark Estimator examples, unchanged, from a Horovod source tree, on hvdlite: each through
``python -m hvdlite.horovod_imports`` (their ``horovod.spark...`` imports give hvdlite's modules), on local[2], with
scikit-learn's digits written where the examples look for MNIST (``--data-dir``/mnist.bz2, LIBSVM, 784 features:
each 8x8 digit scaled to 24x24 and centred in 28x28, values 0-255 as in MNIST's file), so nothing is downloaded.

    python tests/engines/horovod_spark_examples.py HOROVOD_SOURCE [--epochs 40] [--batch-size 16]

Prints each example's test accuracy and time; exits 1 when one fails or is under --min-accuracy. Horovod's examples
are not in this repository, nor on PyPI (Horovod's source distribution leaves them out), so this runs where a
Horovod checkout is at hand (`make horovod-spark-examples HOROVOD_SOURCE=...`; docs/testing.md).
"""
import argparse
import bz2
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

# The examples that need no download (they read mnist.bz2 when it is there), in Horovod's tree.
EXAMPLES = ["examples/spark/pytorch/pytorch_spark_mnist.py", "examples/spark/keras/keras_spark_mnist.py"]
# And one written for Lightning 1.x, which no Lightning 2 runs (with hvdlite or without): listed, not run there.
LIGHTNING_1_EXAMPLE = ("examples/spark/pytorch/pytorch_lightning_spark_mnist.py",
                       "its module implements validation_epoch_end and its callback on_init_start, on_init_end and "
                       "on_epoch_end, which Lightning 2.0 removed (Lightning raises NotImplementedError)")


def write_digits_as_mnist(path):
    """scikit-learn's digits in MNIST's LIBSVM layout: label, then index:value of the non-zero pixels (1-based)."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = np.pad(np.kron(digits.images, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2)))
    pixels = np.rint(images.reshape(len(images), -1) * 255 / 16).astype(int)
    with bz2.open(path, "wt") as stream:
        for label, row in zip(digits.target, pixels):
            stream.write(f"{label} " + " ".join(f"{i + 1}:{row[i]}" for i in np.flatnonzero(row)) + "\n")


def run_example(script, data_dir, work_dir, epochs, batch_size):
    """(exit code, accuracy or None, seconds, the output's last lines)."""
    command = [sys.executable, "-m", "hvdlite.horovod_imports", script, "--num-proc", "2", "--epochs", str(epochs),
               "--batch-size", str(batch_size), "--data-dir", data_dir, "--work-dir", work_dir]
    began = time.monotonic()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work_dir,
                            env=dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2"), timeout=1800)
    found = re.findall(r"Test accuracy: ([0-9.]+)", result.stdout)
    return (result.returncode, float(found[-1]) if found else None, time.monotonic() - began,
            "\n".join(result.stdout.splitlines()[-25:]))


def lightning_major():
    """The installed pytorch_lightning's major version (the package Horovod's example imports); 0 without it."""
    try:
        import pytorch_lightning
    except ImportError:
        return 0
    return int(pytorch_lightning.__version__.split(".")[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("horovod_source", help="a Horovod source tree (a git checkout)")
    # The digits are 1797 rows, not MNIST's 60000: smaller batches and more epochs give the examples steps enough
    # (at their own 12 epochs the PyTorch one, which starts slowly on 0-255 pixels, ended at 0.73 in one run).
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--min-accuracy", type=float, default=0.85)
    parser.add_argument("--only", help="run only the examples whose path contains this")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="horovod-examples-") as folder:
        data_dir = os.path.join(folder, "data")
        os.makedirs(data_dir)
        write_digits_as_mnist(os.path.join(data_dir, "mnist.bz2"))
        examples = list(EXAMPLES)
        if lightning_major() < 2:
            examples.append(LIGHTNING_1_EXAMPLE[0])
        elif not args.only or args.only in LIGHTNING_1_EXAMPLE[0]:
            print(f"{LIGHTNING_1_EXAMPLE[0]}: not run on Lightning {lightning_major()}: {LIGHTNING_1_EXAMPLE[1]}")
        for example in examples:
            if args.only and args.only not in example:
                continue
            work_dir = os.path.join(folder, os.path.basename(example)[:-3])
            os.makedirs(work_dir)
            code, accuracy, seconds, tail = run_example(os.path.join(args.horovod_source, example), data_dir,
                                                        work_dir, args.epochs, args.batch_size)
            passed = code == 0 and accuracy is not None and accuracy >= args.min_accuracy
            failed |= not passed
            print(f"{example}: {'passed' if passed else 'FAILED'}, exit {code}, test accuracy {accuracy}, "
                  f"{seconds:.0f} s", flush=True)
            if not passed:
                print(tail, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
