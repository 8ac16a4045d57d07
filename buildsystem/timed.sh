#!/usr/bin/env bash
# timed.sh WHAT COMMAND...: runs COMMAND and then says how long WHAT took, passed or failed, so that a CI log shows
# where its minutes went.
what=$1
shift
start=$(date +%s)
"$@"
status=$?
verdict=$([ $status -eq 0 ] && echo passed || echo "failed ($status)")
echo "time: $what $verdict in $(( $(date +%s) - start )) s"
exit $status
