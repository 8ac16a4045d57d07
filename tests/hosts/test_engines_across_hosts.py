"""The cluster engines across simulated hosts (hvdlite/testing/simulated_hosts.py; needs root): a Spark standalone master
with a worker on each of two hosts, and a Ray head on one host with a worker node on the other, each started here
as an operator would and stopped by the teardown (every process of the hosts), also when the test fails. The
driver runs on the first host; the job's two ranks land one on each host (each says its host name), see one
rank per host, and all-reduce across the bridge, through hvdlite and through torch.distributed started from torchrun's
variables (MASTER_ADDR naming rank 0's host). On the Spark cluster the TorchEstimator then fits scikit-learn's
digits (its Store on a path both hosts reach) and transforms them in the executors of both hosts."""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from hvdlite.testing.simulated_hosts import SimulatedHosts

pytestmark = pytest.mark.simulated_hosts

START_SECONDS = 60  # for a master, worker or node to come up

RANK_REPORT = '''
def report():
    import socket
    import numpy as np
    import torch
    import torch.distributed as dist
    import hvdlite as hvd
    import hvdlite.torch  # registers the "hvdlite" backend
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="total")
    # torch.distributed as a torchrun script starts it (env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE).
    dist.init_process_group("hvdlite")
    summed = torch.tensor([hvd.rank() + 1.0])
    dist.all_reduce(summed)
    dist.destroy_process_group()
    return hvd.rank(), socket.gethostname(), hvd.local_size(), float(total[0]), float(summed[0])
'''

SPARK_DRIVER = RANK_REPORT + '''
import json, sys
from pyspark.sql import SparkSession
import hvdlite.spark
spark = (SparkSession.builder.master(sys.argv[1]).appName("hvdlite-across-hosts")
         .config("spark.driver.host", sys.argv[2]).config("spark.ui.enabled", "false")
         .config("spark.pyspark.python", sys.executable).config("spark.executor.cores", "1")
         .config("spark.executor.memory", "512m").config("spark.cores.max", "2").getOrCreate())
print("RESULT " + json.dumps(hvdlite.spark.run(report, num_proc=2, env={"OMP_NUM_THREADS": "1"})), flush=True)

# The TorchEstimator on the same cluster: the Store on a path both hosts reach, the ranks and the predictions in the
# executors of both hosts.
import numpy as np
import torch
from pyspark.ml.linalg import Vectors
from sklearn.datasets import load_digits
from hvdlite.spark.common.store import Store
from hvdlite.spark.torch import TorchEstimator
x, y = load_digits(return_X_y=True)
df = spark.createDataFrame([(Vectors.dense(x[i] / 16.0), int(y[i])) for i in range(len(y))], ["features", "label"])
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
def accuracy(outputs, labels):  # a metric's name in the history is its function's
    return (outputs.argmax(dim=1) == labels).float().mean()
trained = TorchEstimator(num_proc=2, store=Store.create(sys.argv[3]), model=model, loss=torch.nn.CrossEntropyLoss(),
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.3), metrics=[accuracy], validation=0.2,
                         feature_cols=["features"], label_cols=["label"], epochs=4, random_seed=1, verbose=0,
                         backend=None).fit(df)
scored = trained.transform(df).select("label", "label__output").collect()
print("ESTIMATOR " + json.dumps({"val_accuracy": trained.getHistory()["val_accuracy"][-1],
                                 "accuracy": float(np.mean([np.argmax(r[1]) == r[0] for r in scored]))}), flush=True)
spark.stop()
'''

RAY_DRIVER = RANK_REPORT + '''
import json, sys
import ray
from hvdlite.ray import RayExecutor
ray.init(address=sys.argv[1])
executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2, num_workers_per_host=1)
executor.start(extra_env_vars={"OMP_NUM_THREADS": "1"})
print("RESULT " + json.dumps(executor.run(report)), flush=True)
executor.shutdown()
ray.shutdown()
'''


def wait_for_line(path, text, what):
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return
        time.sleep(0.2)
    log = open(path, errors="replace").read()[-3000:] if os.path.exists(path) else "(no log)"
    raise TimeoutError(f"{what} did not come up within {START_SECONDS} s:\n{log}")


def start(hosts, host, command, log):
    with open(log, "w") as stream:
        return hosts.popen(host, command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True)


def check_results(output):
    assert "RESULT " in output, output[-6000:]
    results = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert [rank for rank, *_ in results] == [0, 1]
    assert sorted(host for _, host, _, _, _ in results) == ["h1", "h2"], results
    assert all(local_size == 1 and total == summed == 3.0 for _, _, local_size, total, summed in results), results


@pytest.mark.timeout(480)
def test_a_spark_standalone_cluster_runs_the_ranks_on_both_hosts_and_the_torch_estimator(tmp_path):
    import pyspark
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    driver = tmp_path / "driver.py"
    driver.write_text(SPARK_DRIVER)
    with SimulatedHosts(2) as hosts:
        master_address = hosts.address("h1")
        master = f"spark://{master_address}:7077"
        start(hosts, "h1", [spark_class, "org.apache.spark.deploy.master.Master", "--host", master_address,
                            "--port", "7077", "--webui-port", "18080"], tmp_path / "master.log")
        wait_for_line(tmp_path / "master.log", "I have been elected leader", "the Spark master")
        for host in hosts.names:
            start(hosts, host, [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host",
                                hosts.address(host), "--cores", "1", "--memory", "1g", "--webui-port", "18081",
                                "--work-dir", str(tmp_path / f"work-{host}")], tmp_path / f"worker-{host}.log")
        for host in hosts.names:
            wait_for_line(tmp_path / f"worker-{host}.log", "Successfully registered with master",
                          f"the Spark worker on {host}")
        result = hosts.run("h1", [sys.executable, str(driver), master, master_address, str(tmp_path / "store")],
                           timeout=360)  # minutes when the machine is busy
        assert result.returncode == 0, result.stdout[-6000:]
        check_results(result.stdout)
        assert "ESTIMATOR " in result.stdout, result.stdout[-6000:]
        fitted = json.loads(result.stdout.split("ESTIMATOR ", 1)[1].splitlines()[0])
        assert fitted["val_accuracy"] > 0.8 and fitted["accuracy"] > 0.8, fitted


@pytest.mark.timeout(300)
def test_a_ray_cluster_runs_the_ranks_on_both_hosts(tmp_path):
    ray_tool = os.path.join(os.path.dirname(sys.executable), "ray")
    driver = tmp_path / "driver.py"
    driver.write_text(RAY_DRIVER)
    sessions = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    # The cluster's token, as an operator hands it to every node and driver.
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    try:
        with SimulatedHosts(2) as hosts:
            head = hosts.address("h1")
            for host in hosts.names:
                common = ["--node-ip-address", hosts.address(host), "--num-cpus", "1", "--temp-dir",
                          os.path.join(sessions, host), "--disable-usage-stats"]
                command = ([ray_tool, "start", "--head", "--port", "6379", "--include-dashboard", "false", *common]
                           if host == "h1" else [ray_tool, "start", "--address", f"{head}:6379", *common])
                started = hosts.run(host, command, timeout=START_SECONDS, env=env)
                assert started.returncode == 0, started.stdout[-4000:]
            result = hosts.run("h1", [sys.executable, str(driver), f"{head}:6379"], timeout=200, env=env)
    finally:
        shutil.rmtree(sessions, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-6000:]
    check_results(result.stdout)
