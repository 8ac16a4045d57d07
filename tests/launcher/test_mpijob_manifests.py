"""examples/kubernetes/*.yaml, checked without a cluster: against the MPIJob v2beta1 schema (jsonschema), and against
what the MPIJob image and hvdliterun expect of them (the launcher's command parses as hvdliterun's, on the
operator's files; the workers run the image's sshd; the key is mounted where the image's user has its .ssh). The
pods running that contract are tested in tests/hosts/test_mpijob.py."""
import glob
import os
import re
import shlex

import pytest
import yaml

from harness.processes import ROOT
from hvdlite.runner.arguments import parse_args

MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "examples", "kubernetes", "*.yaml")))

# The MPIJob v2beta1 spec as the CRD's openAPIV3Schema states it (kubeflow/mpi-operator, kubeflow.org_mpijobs.yaml:
# the spec's own fields, their types and allowed values), written out here for the fields an MPIJob's spec may hold;
# a pod template is checked for what these examples set in it. Unknown fields are refused (the API server would
# drop them without a word, and a misspelled field silently does nothing).
_CONTAINER = {
    "type": "object", "required": ["name", "image"],
    "properties": {"name": {"type": "string"}, "image": {"type": "string"},
                   "command": {"type": "array", "items": {"type": "string"}},
                   "args": {"type": "array", "items": {"type": "string"}},
                   "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                   "resources": {"type": "object", "properties": {"limits": {"type": "object"},
                                                                  "requests": {"type": "object"}},
                                 "additionalProperties": False},
                   "securityContext": {"type": "object"}, "volumeMounts": {"type": "array"},
                   "workingDir": {"type": "string"}},
    "additionalProperties": False,
}
_REPLICA_SPEC = {
    "type": "object", "required": ["template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object", "required": ["spec"], "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["containers"], "properties": {
                "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
                "securityContext": {"type": "object", "properties": {"runAsUser": {"type": "integer"}}},
                "volumes": {"type": "array"}, "nodeSelector": {"type": "object"}, "tolerations": {"type": "array"},
                "affinity": {"type": "object"}, "hostNetwork": {"type": "boolean"}}, "additionalProperties": False},
        }, "additionalProperties": False},
    },
    "additionalProperties": False,
}
MPIJOB_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}},
        "spec": {
            "type": "object", "required": ["mpiReplicaSpecs"],
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "sshAuthMountPath": {"type": "string"},
                "runLauncherAsWorker": {"type": "boolean"},
                "runPolicy": {"type": "object", "properties": {
                    "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                    "ttlSecondsAfterFinished": {"type": "integer"}, "activeDeadlineSeconds": {"type": "integer"},
                    "backoffLimit": {"type": "integer"}, "suspend": {"type": "boolean"},
                    "schedulingPolicy": {"type": "object"}, "managedBy": {"type": "string"}},
                    "additionalProperties": False},
                "mpiReplicaSpecs": {"type": "object", "required": ["Launcher", "Worker"],
                                    "properties": {"Launcher": _REPLICA_SPEC, "Worker": _REPLICA_SPEC},
                                    "additionalProperties": False},
            },
            "additionalProperties": False,
        },
    },
}


def _validate(job):
    # Imported here: the Open MPI stage's venv (make test-openmpi) has no jsonschema, and collects this file.
    import jsonschema
    jsonschema.validate(job, MPIJOB_SCHEMA)


def _load(path):
    with open(path) as stream:
        return yaml.safe_load(stream)


def _container(job, role):
    return job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def _image_user():
    """(name, uid) of the non-root user of the CPU image, which the MPIJob image runs as."""
    with open(os.path.join(ROOT, "Dockerfile")) as stream:
        found = re.search(r"useradd\b.*--uid (\d+) (\w+)", stream.read())
    return found.group(2), int(found.group(1))


def test_there_are_manifests():
    assert [os.path.basename(path) for path in MANIFESTS] == ["mpijob-elastic.yaml", "mpijob.yaml"]


@pytest.mark.parametrize("path", MANIFESTS, ids=os.path.basename)
def test_each_manifest_is_an_mpijob_the_schema_takes(path):
    _validate(_load(path))


def test_the_schema_refuses_what_the_operator_would_not_take():
    """The schema can fail: a misspelled field, an unknown implementation, a missing worker spec."""
    job = _load(MANIFESTS[1])
    for broken in ({"slotPerWorker": 4}, {"mpiImplementation": "MVAPICH"}, {"launcherCreationPolicy": "Now"}):
        spec = dict(job["spec"], **broken)
        with pytest.raises(Exception, match="Failed validating"):
            _validate(dict(job, spec=spec))
    specs = {"Launcher": job["spec"]["mpiReplicaSpecs"]["Launcher"]}
    with pytest.raises(Exception, match="'Worker' is a required property"):
        _validate(dict(job, spec=dict(job["spec"], mpiReplicaSpecs=specs)))


@pytest.mark.parametrize("path", MANIFESTS, ids=os.path.basename)
def test_each_manifest_runs_hvdliterun_on_the_operators_files_and_the_images_sshd(path, tmp_path):
    job = _load(path)
    user, uid = _image_user()
    assert job["spec"]["sshAuthMountPath"] == f"/home/{user}/.ssh"
    launcher, worker = _container(job, "Launcher"), _container(job, "Worker")
    assert worker["command"] == ["/usr/sbin/sshd", "-De", "-f", f"/home/{user}/.sshd_config"]
    with open(os.path.join(ROOT, "docker", "mpijob", "sshd_config")) as stream:
        assert f"HostKey /home/{user}/.ssh/id_rsa" in stream.read()
    for role in ("Launcher", "Worker"):
        assert job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["securityContext"]["runAsUser"] == uid
    assert launcher["command"][0] == "hvdliterun"
    slots = job["spec"]["slotsPerWorker"]
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    # The hostfile as the operator writes it for MPICH, where the launcher pod has it.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{job['metadata']['name']}-worker-{n}:{slots}\n" for n in range(workers)))
    args = parse_args([str(hostfile) if arg == "/etc/mpi/hostfile" else arg for arg in launcher["command"][1:]])
    if args.host_discovery_script:
        assert args.host_discovery_script == "/etc/mpi/discover_hosts.sh"
        assert args.slots_per_host == slots, "the discovery script names the pods only: --slots gives their slots"
        assert args.min_np <= workers * slots <= (args.max_np or workers * slots)
    else:
        assert args.hostfile.path == str(hostfile) and args.num_proc == sum(h.slots for h in args.hostfile.hosts)
    assert shlex.join(args.command).startswith("python ")
