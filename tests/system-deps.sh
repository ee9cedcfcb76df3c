#!/usr/bin/env bash
# Install the system programs the tests drive for real, when this machine lets us.
set -u
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# A C++ compiler: torch.compile's inductor generates C++ for the CPU.
command -v g++ >/dev/null 2>&1 || need+=(g++)
# A real single-node Slurm for the cluster tests.
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld slurmd slurm-client munge)
# Network namespaces, veth pairs and a bridge for the two-node Slurm; nsenter and unshare.
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: cannot install ${need[*]} (needs root and apt-get); their tests will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
  || echo "system-deps: apt-get install ${need[*]} failed; their tests will skip" >&2
