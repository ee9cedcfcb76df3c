#!/bin/sh
# Status of a Slurm job for Snakemake's cluster-generic executor: prints running, success
# or failed. Asks the controller (scontrol), so it needs neither sacct (accounting) nor
# squeue; a job the controller has forgotten (MinJobAge after it ended, 300 s by default)
# is looked up with sacct where accounting exists, else reported failed.
#   usage: status-slurm.sh JOBID   (as sbatch --parsable printed it: ID or ID;CLUSTER)
set -u
jobid=${1%%;*}
state=$(scontrol -o show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -n 1)
state=${state#JobState=}
if [ -z "$state" ] && command -v sacct > /dev/null 2>&1; then
    state=$(sacct -n -X -P -j "$jobid" -o State 2>/dev/null | head -n 1 | cut -d ' ' -f 1)
fi
case "$state" in
    COMPLETED)
        echo success ;;
    PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUED | REQUEUE_FED | \
    REQUEUE_HOLD | RESIZING | SIGNALING | STAGE_OUT | RESV_DEL_HOLD | SPECIAL_EXIT | STOPPED)
        echo running ;;
    *)
        # FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL,
        # DEADLINE, or unknown
        echo failed ;;
esac
