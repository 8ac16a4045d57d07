"""bench/tf_synthetic.py runs hvdlite and MultiWorkerMirroredStrategy side by side and writes its JSON."""
import json
import os
import sys

import pytest

from harness.processes import ROOT, run


@pytest.mark.long  # the whole benchmark, run short
@pytest.mark.timeout(300)
def test_tf_synthetic_compares_hvdlite_with_multi_worker_mirrored_strategy(tmp_path):
    result_file = tmp_path / "bench.json"
    command = [sys.executable, os.path.join(ROOT, "bench", "tf_synthetic.py"), "--np", "2", "--hidden", "64",
               "--steps", "5", "--warmup-steps", "2", "--json", str(result_file)]
    returncode, output = run(command, timeout=280)
    assert returncode == 0, output[-6000:]
    assert "MultiWorkerMirroredStrategy, custom loop" in output and "samples/s" in output, output[-3000:]
    with open(result_file) as stream:
        results = json.load(stream)["results"]
    assert [r["framework"] for r in results] == ["hvdlite-fit", "hvdlite-loop", "mwms-loop"]
    for r in results:
        assert r["processes"] == 2 and r["samples_per_second"] > 0, r
