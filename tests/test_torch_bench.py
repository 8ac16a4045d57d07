"""bench/torch_synthetic.py runs hvdlite and DDP side by side and reports throughput and scaling efficiency."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
