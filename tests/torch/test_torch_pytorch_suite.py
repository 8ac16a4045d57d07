"""PyTorch's own distributed suite (`torch.testing._internal.distributed.distributed_test`, shipped in every torch
wheel) on the "hvdlite" backend, run as PyTorch runs it for gloo, NCCL and UCC: pytorch_suite/distributed_spawn.py
holds torch's tests, decorators and fixtures unchanged, in one pytest process per world size, whose JUnit report
these tests read.

The verdict: every test that gloo passes on this machine passes on hvdlite too, or is one that
docs/torch_distributed.md lists with the reason it cannot; hvdlite fails nothing else. hvdlite runs with torch's
gloo-only gates admitted (the tests of public calls that torch runs for gloo alone), gloo as torch runs it. What
gloo passes is recorded for the PyTorch release the tests install (pytorch_suite/gloo_passed.json): make
check-long compares hvdlite with the record at 2 ranks, and at 3 runs gloo again beside it and checks the record
against it (make test runs a slice of the suite). The
ranks are forked from the pytest process rather than spawned (both are torch's own ways to start them): a spawned
rank imports torch's test modules again, 5 s of CPU per rank and test on this machine's 2 cores.
"""
import importlib.metadata
import json
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from harness.processes import ROOT, run

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_suite", "distributed_spawn.py")
DOCS = os.path.join(ROOT, "docs", "torch_distributed.md")
# {"torch": version, "<world size>": [the tests gloo passes]}: written by hand from a run (python -m pytest -m
# check_long -k gloo_record prints it where it is stale).
GLOO_RECORD = os.path.join(os.path.dirname(SUITE), "gloo_passed.json")
# One or two per collective family, point-to-point, groups, objects, a gloo-gated call, DDP: the quick tier's sample.
SLICE = ("test_all_reduce_sum", "test_all_reduce_coalesced_max", "test_reduce_product", "test_broadcast_full_group",
         "test_all_gather_coalesced_simple", "test_gather", "test_scatter", "test_send_recv_with_tag", "test_irecv",
         "test_batch_isend_irecv_gloo", "test_scatter_object_list", "test_all_gather_object_subgroup",
         "test_sparse_all_reduce_sum", "test_destroy_group", "test_DistributedDataParallelCPU", "test_get_future")


def run_suite(tmp_path, backend, world_size, admit_gloo_gates, select=(), timeout=1800):
    """Runs the suite (the tests named in select, else all) on backend; returns {test name: (outcome, message)},
    the outcome passed, failed or skipped."""
    folder = tmp_path / f"{backend}-{world_size}"
    (folder / "barrier").mkdir(parents=True)
    report = folder / "report.xml"
    env = {"BACKEND": backend, "WORLD_SIZE": str(world_size), "TEMP_DIR": str(folder),
           # PyTorch's CI runs the suite with a file:// init method too (its barrier-timeout test needs it).
           "INIT_METHOD": f"file://{folder}/shared_init_file",
           # torch's harness ends each rank with os._exit (MPI not finalized): a rank whose exit still has a call in
           # flight (a barrier that timed out) waits for the gone peer this long, not the default 120 s.
           "HVDLITE_PROGRESS_TIMEOUT_SECONDS": "20",
           "HVDLITE_SUITE_START": "fork", "HVDLITE_ADMIT_GLOO_GATES": "1" if admit_gloo_gates else "0"}
    tests = [f"{SUITE}::TestDistBackendWithSpawn{backend.upper()}::{name}" for name in select] if select else [SUITE]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, f"--junitxml={report}"]
    code, output = run(command, timeout=timeout, env=env)
    assert report.exists(), f"the suite left no report (exit {code}):\n{output[-6000:]}"
    return read_report(report)


def read_report(path):
    outcomes = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag, meaning in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, message = meaning, (found.get("message") or "")
        outcomes[case.get("name")] = (outcome, message)
    return outcomes


def documented_differences():
    """The tests that docs/torch_distributed.md says hvdlite cannot pass, with the reason it gives."""
    rows = re.findall(r"^\| `(test_\w+)`[^|]*\| (.+?) \|$", open(DOCS).read(), flags=re.MULTILINE)
    assert rows, "docs/torch_distributed.md lists no test of PyTorch's suite"
    return dict(rows)


def failures(outcomes):
    return {name: message[:400] for name, (outcome, message) in outcomes.items() if outcome == "failed"}


def test_a_slice_of_pytorch_distributed_suite_passes_on_hvdlite(tmp_path):
    outcomes = run_suite(tmp_path, "hvdlite", 2, admit_gloo_gates=True, select=SLICE, timeout=600)
    assert not failures(outcomes), failures(outcomes)
    assert all(outcome == "passed" for outcome, _ in outcomes.values()) and len(outcomes) == len(SLICE), outcomes


def passed(outcomes):
    return sorted(name for name, (outcome, _) in outcomes.items() if outcome == "passed")


def gloo_passed(tmp_path, world_size, live):
    """The tests gloo passes at world_size: from the record where it is of this PyTorch, else (or when live) from a
    run, which must then agree with the record."""
    record = json.load(open(GLOO_RECORD))
    recorded = record.get(str(world_size)) if record.get("torch") == importlib.metadata.version("torch") else None
    if recorded is not None and not live:
        return recorded
    outcomes = run_suite(tmp_path, "gloo", world_size, admit_gloo_gates=False)
    assert len(outcomes) > 250 and not failures(outcomes), failures(outcomes)
    ran = passed(outcomes)
    if recorded is not None:
        assert ran == recorded, (f"{GLOO_RECORD} is stale for {world_size} ranks: gloo now passes "
                                 + json.dumps({str(world_size): ran}))
    return ran


def check_hvdlite_passes_what_gloo_passes(tmp_path, world_size, live_gloo):
    gloo = gloo_passed(tmp_path, world_size, live_gloo)
    hvdlite = run_suite(tmp_path, "hvdlite", world_size, admit_gloo_gates=True)
    assert len(hvdlite) > 250, len(hvdlite)
    documented = documented_differences()
    missing = {name: hvdlite.get(name) for name in gloo if hvdlite.get(name, ("",))[0] != "passed"
               and name not in documented}
    assert not missing, f"gloo passes these, hvdlite does not (and the docs do not say why): {missing}"
    unexplained = {name: message for name, message in failures(hvdlite).items() if name not in documented}
    assert not unexplained, unexplained
    stale = [name for name in documented if hvdlite.get(name, ("",))[0] == "passed"]
    assert not stale, f"docs/torch_distributed.md lists tests that hvdlite now passes: {stale}"


@pytest.mark.check_long
def test_pytorch_distributed_suite_passes_on_hvdlite_where_gloo_does_on_2_ranks(tmp_path):
    check_hvdlite_passes_what_gloo_passes(tmp_path, 2, live_gloo=False)


@pytest.mark.check_long
def test_pytorch_distributed_suite_passes_on_hvdlite_where_gloo_does_on_3_ranks(tmp_path):
    check_hvdlite_passes_what_gloo_passes(tmp_path, 3, live_gloo=True)


@pytest.mark.check_long
def test_gloo_record_of_2_ranks_is_what_gloo_passes_now(tmp_path):
    gloo_passed(tmp_path, 2, live=True)
