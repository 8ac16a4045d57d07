"""bench/scale_model.py, started as a user runs it on the recorded measurements: the model meets the measured
1 MiB all-reduce within its tolerance from 2 to 8 simulated hosts (from 16 on, 8 and more ranks share each of the
2 cores, and the measurement is the scheduler's), and its figures for Horovod's and NCCL's
published settings bracket or meet the published ones. Reads bench/results/ only: no hosts are made."""
import json
import subprocess
import sys

from harness.processes import ROOT


def test_the_model_meets_measurement_and_the_published_figures(tmp_path):
    path = tmp_path / "scale_model.json"
    result = subprocess.run([sys.executable, "bench/scale_model.py", "--json", str(path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    model = json.loads(path.read_text())
    assert {2, 4, 8} <= set(model["hosts_within_tolerance"]), model["checks"]
    for row in model["horovod"]:  # published efficiency between the model's bounds (no overlap, overlapped)
        assert row["no_overlap_efficiency"] <= row["published"] <= row["model_efficiency"], row
    assert abs(model["nccl"]["ratio"] - 1) <= model["tolerance"], model["nccl"]
    # Up to 1024 hosts, and a step's communication never shrinks as hosts are added.
    for name in ("ResNet-50", "BERT-large"):
        rows = [r for r in model["predictions"] if (r["model"], r["ranks_per_host"], r["link_gbit"]) == (name, 8, 100)]
        assert [r["hosts"] for r in rows][-1] == 1024
        totals = [r["total_ms"] for r in rows]
        assert totals == sorted(totals), totals
