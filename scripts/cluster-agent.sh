#!/usr/bin/env bash
# OpenMPI's remote-launch agent for the test cluster of scripts/cluster.sh, in place of ssh
# (OMPI_MCA_plm_rsh_agent): mpirun calls it as `cluster-agent.sh [ssh options] HOST COMMAND...`
# and it runs COMMAND inside the network namespace named HOST, as ssh would run it on that
# machine: through a shell, with a fresh login-like environment (nothing of the caller's leaks in),
# and with the node's own host name.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

# ssh options mpirun may put first (-x: no X forwarding, -p PORT, -o Option=value).
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do
  case "$1" in
    -p | -o | -l | -i) shift 2 ;;
    *) shift ;;
  esac
done
[ $# -ge 2 ] || { echo "cluster-agent.sh: usage: cluster-agent.sh HOST COMMAND..." >&2; exit 255; }
host="$1"
shift
if ! ip netns list | awk '{print $1}' | grep -qxF "$host"; then
  # As ssh says it, with ssh's status, so mpirun reports a host it could not reach.
  echo "cluster-agent.sh: connect to host ${host}: no such node in the test cluster (nodes: $(ip netns list | awk '{print $1}' | tr '\n' ' '))" >&2
  exit 255
fi
# Folders this node lacks (cluster.sh hide): covered with an empty one in the mount namespace
# that ip netns exec gives the command, out of sight of every other node.
hidden="/run/tessera-cluster/nodes/${host}.hidden"
cover=""
if [ -f "$hidden" ]; then
  while read -r dir; do cover+="mount -t tmpfs -o size=64k tessera-hidden '${dir}' && "; done <"$hidden"
fi
# unshare --uts: the node gets a host name of its own, as a machine has (OpenMPI and the ranks'
# messages name it); the rest of the system (files, processes) stays shared, like a shared file system.
exec ip netns exec "$host" unshare --uts \
  env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="${HOME:-/root}" \
  LANG="${LANG:-C.UTF-8}" USER="$(id -un)" \
  sh -c "${cover}"'hostname "$0" && exec sh -c "$1"' "$host" "$*"
