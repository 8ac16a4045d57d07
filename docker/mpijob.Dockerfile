# The image of an MPIJob's pods (Kubeflow's MPI Operator, v2beta1): the CPU image plus OpenSSH. Each worker pod runs
# sshd as the image's non-root user (hvd, uid 1000) on port 2222, with the key pair the operator mounts at
# sshAuthMountPath (/home/hvd/.ssh) as its host key too; the launcher pod runs
#   hvdliterun -np N --hostfile /etc/mpi/hostfile python train.py
# which reaches the workers through ssh on that port. examples/kubernetes/mpijob.yaml runs it. Build from the
# repository root after the CPU image: make image-mpijob
ARG BASE=hvdlite:cpu
FROM ${BASE}
USER root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server openssh-client \
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*
# The client side, for every user: port 2222, and no known-hosts file (the mounted .ssh is a read-only Secret and
# the workers' host keys are the job's own key).
COPY docker/mpijob/ssh_config /etc/ssh/ssh_config.d/mpijob.conf
COPY --chown=hvd docker/mpijob/sshd_config /home/hvd/.sshd_config
USER hvd
WORKDIR /home/hvd
