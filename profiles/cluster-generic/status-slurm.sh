#!/bin/sh
# Status of a Slurm job for Snakemake's cluster-generic executor: prints running, success
# or failed. Asks the controller (scontrol), so it needs neither sacct (accounting) nor
# squeue; a job the controller has forgotten (MinJobAge after it ended, 300 s by default)
# is looked up with sacct where accounting exists, else reported failed. Any other error
# of scontrol (a busy or restarting controller: "Socket timed out", "Unable to contact
# slurm controller") says nothing of the job: it is reported running, and asked again at
# the next poll, rather than failed while it may still run.
#   usage: status-slurm.sh JOBID   (as sbatch --parsable printed it: ID or ID;CLUSTER)
set -u
jobid=${1%%;*}
answer=$(scontrol -o show job "$jobid" 2>&1)
state=$(printf '%s\n' "$answer" | grep -o 'JobState=[A-Z_]*' | head -n 1)
state=${state#JobState=}
forgotten=
if [ -z "$state" ]; then
    case "$answer" in
        *"Invalid job id"*) forgotten=1 ;;
    esac
    if command -v sacct > /dev/null 2>&1; then
        state=$(sacct -n -X -P -j "$jobid" -o State 2>/dev/null | head -n 1 | cut -d ' ' -f 1)
    fi
fi
if [ -z "$state" ] && [ -z "$forgotten" ]; then
    echo running
    exit 0
fi
case "$state" in
    COMPLETED)
        echo success ;;
    PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUED | REQUEUE_FED | \
    REQUEUE_HOLD | RESIZING | SIGNALING | STAGE_OUT | RESV_DEL_HOLD | SPECIAL_EXIT | STOPPED)
        echo running ;;
    *)
        # FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL,
        # DEADLINE, unknown, or a job nobody knows any more
        echo failed ;;
esac
