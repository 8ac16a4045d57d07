#!/usr/bin/env bash
# Runs "$@" with NCCL_HOSTID set per rank, so that NCCL older than 2.30 treats two ranks on one GPU as two hosts
# (it refuses two ranks of one host on one GPU: "Duplicate GPU detected").
export NCCL_HOSTID="hvdlite-gpu-check-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}"
exec "$@"
