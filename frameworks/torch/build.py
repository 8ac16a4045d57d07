"""``python -m hvdlite.torch.build``: compiles the torch.distributed backend for the installed PyTorch ahead of use.

Run it once where a C++ compiler and ninja are (an image's build stage, a cluster's setup script): training processes
then load the built backend with neither. $HVDLITE_TORCH_EXTENSION_DIR (or --dir) names the folder it is kept in; a
folder that every rank's machine reads serves them all, as long as they run this same installation of hvdlite.
"""
import argparse
import os
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hvdlite.torch.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="the folder to keep it in (default: $HVDLITE_TORCH_EXTENSION_DIR, else "
                                      "~/.cache/hvdlite)")
    args = parser.parse_args(argv)
    if args.dir:
        os.environ["HVDLITE_TORCH_EXTENSION_DIR"] = os.path.abspath(args.dir)
    import torch

    from hvdlite.torch.distributed import extension, library_cache

    started = time.monotonic()
    extension.load()
    folder = library_cache.cache_dir()
    print(f"hvdlite: the torch.distributed backend for PyTorch {torch.__version__} is built in {folder} "
          f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
