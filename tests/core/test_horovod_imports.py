"""python -m hvdlite.horovod_imports: a script written for Horovod runs unchanged, its ``horovod`` imports giving
hvdlite's own modules: a real 2-rank job (hvdliterun) whose script imports Horovod's names, takes its arguments
and all-reduces (checked on every rank against float64 sums); a name hvdlite has no module for is an ImportError
naming both."""
import os
import sys
import textwrap

from harness.processes import ROOT, run, venv_tool, with_hvdlite_importable

HOROVOD_SCRIPT = textwrap.dedent("""
    import os
    import sys

    import numpy as np

    import horovod as hvd
    import horovod.runner
    from horovod.elastic import ObjectState
    import hvdlite
    import hvdlite.elastic
    import hvdlite.runner

    assert __name__ == "__main__"
    assert hvd is hvdlite and horovod.runner is hvdlite.runner and ObjectState is hvdlite.elastic.ObjectState
    assert hvdlite.__name__ == "hvdlite" and sys.modules["horovod.runner"] is hvdlite.runner
    assert sys.path[0] == os.path.dirname(os.path.abspath(__file__)), sys.path[0]
    hvd.init()
    x = np.arange(5, dtype=np.float64) * (hvd.rank() + 1) + float(sys.argv[1])
    total = hvd.allreduce(x, name="x", op=hvd.Sum)
    expected = sum(np.arange(5, dtype=np.float64) * (r + 1) + float(sys.argv[1]) for r in range(hvd.size()))
    np.testing.assert_array_equal(total, expected)
    try:
        import horovod.mxnet
    except ImportError as missing:
        print(f"rank {hvd.rank()} refused: {missing}")
    print(f"rank {hvd.rank()} of {hvd.size()} ran {sys.argv[1:]} OK")
    hvd.shutdown()
    """)


def test_a_horovod_script_runs_unchanged_on_two_ranks(tmp_path):
    script = tmp_path / "horovod_script.py"
    script.write_text(HOROVOD_SCRIPT)
    code, output = run([venv_tool("hvdliterun"), "-np", "2", sys.executable, "-m", "hvdlite.horovod_imports",
                        str(script), "0.5", "extra"], timeout=120, env=with_hvdlite_importable(dict(os.environ)),
                       cwd=ROOT)
    assert code == 0, output[-6000:]
    for rank in range(2):
        assert f"rank {rank} of 2 ran ['0.5', 'extra'] OK" in output, output[-6000:]
        assert (f"rank {rank} refused: No module named 'horovod.mxnet': hvdlite has no hvdlite.mxnet for it"
                in output), output[-6000:]


def test_without_a_script_it_says_how_it_is_used():
    code, output = run([sys.executable, "-m", "hvdlite.horovod_imports"], timeout=60)
    assert code == 2 and "python -m hvdlite.horovod_imports train.py" in output, output
