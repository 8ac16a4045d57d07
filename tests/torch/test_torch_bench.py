"""bench/torch_synthetic.py runs hvdlite and DDP side by side and reports throughput and scaling efficiency."""
import json
import os
import subprocess
import sys

import pytest

from harness.processes import ROOT

pytestmark = pytest.mark.long  # whole benchmark programs (make check)

BENCH = os.path.join(ROOT, "bench", "torch_synthetic.py")


def test_synthetic_benchmark_reports_hvdlite_ddp_and_single(tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, BENCH, "--np", "2", "--rounds", "1", "--batch-size", "4", "--image-size", "16",
               "--width", "8", "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "2",
               "--timeout", "200", "--json", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for label in ("hvdlite DistributedOptimizer", "PyTorch DDP (gloo)", "single process", "hvdlite / DDP"):
        assert label in result.stdout, result.stdout
    payload = json.loads(out.read_text())
    results = payload["results"]
    assert results["single"]["processes"] == 1
    for framework in ("hvdlite", "ddp"):
        assert results[framework]["processes"] == 2
        assert results[framework]["samples_per_s"] > 0
        efficiency = results[framework]["scaling_efficiency"]
        expected = results[framework]["samples_per_s"] / (2 * results["single"]["samples_per_s"])
        assert abs(efficiency - expected) < 1e-9
    assert results["hvdlite_over_ddp"] > 0


def test_autotune_benchmark_compares_runs_with_autotune_off_and_on(tmp_path):
    out = tmp_path / "autotune.json"
    command = [sys.executable, os.path.join(ROOT, "bench", "autotune.py"), "--rounds", "1", "--iters", "3",
               "--tail", "2", "--json", str(out),
               # passed on to torch_synthetic.py's worker: a tiny model
               "--batch-size", "4", "--image-size", "16", "--width", "8", "--num-warmup-batches", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    payload = json.loads(out.read_text())
    for mode in ("off", "on"):
        (per_iter,) = payload["iterations"][mode]
        assert len(per_iter) == 3 and all(rate > 0 for rate in per_iter)
        assert payload["tail_samples_per_s"][mode] == [sum(per_iter[-2:]) / 2]
    off, on = payload["tail_samples_per_s"]["off"][0], payload["tail_samples_per_s"]["on"][0]
    assert abs(payload["gain"] - on / off) < 1e-9
    assert "autotune off" in result.stdout and "on/off" in result.stdout
