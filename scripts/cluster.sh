#!/usr/bin/env bash
# A test cluster on one machine: N network namespaces ("nodes") joined by veth pairs to a bridge,
# each with its own address and a shaped link, so that multi-node runs (OpenMPI over TCP, the
# watchdog, a slow or cut link) can be tried without several machines.
#
#   scripts/cluster.sh up N [--name NAME] [--owner PID] [--bandwidth 1gbit] [--delay 1ms] [--loss 0%]
#   scripts/cluster.sh down [--name NAME]
#   scripts/cluster.sh env [--name NAME]         # the OpenMPI settings, as shell exports
#   scripts/cluster.sh run NODE -- COMMAND...     # COMMAND on NODE, as when logged in there
#   scripts/cluster.sh link NODE up|down [--name NAME]
#   scripts/cluster.sh pids [--name NAME]        # processes still inside the cluster's nodes
#   scripts/cluster.sh hide NODE DIR             # DIR looks empty to what OpenMPI starts on NODE
#
# Without --name the nodes are node1..nodeN; with --name c they are c-node1..c-nodeN, so several
# clusters (tests running in parallel) do not meet. Every node name resolves through a block of
# /etc/hosts that `up` adds and `down` removes; each node's own /etc/hosts (ip netns exec mounts
# /etc/netns/<node>/hosts over it) lists the same names. `up` first removes a leftover cluster of
# the same name, and every cluster whose --owner process has ended (a test killed before it could
# take its cluster down), and removes what it made when it fails halfway.
#
# OpenMPI starts its daemons on the nodes through scripts/cluster-agent.sh instead of ssh
# (`env` prints OMPI_MCA_plm_rsh_agent and the interface settings), so after
#   eval "$(scripts/cluster.sh env)"
#   tessera launch -n 2 --hosts node1:1,node2:1 -- train ...
# runs as on two machines, over TCP through the bridge, launched from this machine; or launched
# from the first node, as one would on two real machines:
#     scripts/cluster.sh run node1 -- tessera launch -n 2 --hosts node1:1,node2:1 -- train ...
#
# Every node gives up on a TCP connection whose data goes unacknowledged after 3 retransmissions
# (net.ipv4.tcp_retries2 = 3, a few seconds; the kernel's default of 15 takes about 15 minutes). A cut
# link then ends the job in seconds: the watchdog of a rank that waits names the operation, and the
# OpenMPI daemons on either side of the cut find their connection lost and end their ranks. A job
# launched from outside the nodes has this machine's mpirun on the far side of the cut, which waits
# for the lost node as long as this machine's own setting says.
#
# Needs root and iproute2 (ip, tc). Where namespaces cannot be made, it says why and exits with
# status 77 (the usual "skipped" code), which the tests report as a skip.
set -Eeuo pipefail

readonly kSkip=77
readonly kStateDir=/run/tessera-cluster
readonly kLock=/run/tessera-cluster.lock
# Per node, folders that the agent covers with an empty one (a node that lacks a file the others
# have); named by the node, which is unique on this machine.
readonly kHiddenDir=/run/tessera-cluster/nodes
agent="$(cd "$(dirname "$0")" && pwd)/cluster-agent.sh"
export PATH="$PATH:/usr/sbin:/sbin"

usage() {
  grep '^#   scripts/cluster.sh' "$0" | sed 's/^#   //' >&2
  exit 2
}

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

skip() {
  echo "cluster.sh: cannot make a test cluster here: $*" >&2
  exit "$kSkip"
}

check_can_make_namespaces() {
  command -v ip >/dev/null || skip "the 'ip' command (iproute2) is missing"
  command -v tc >/dev/null || skip "the 'tc' command (iproute2) is missing"
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (running as uid $(id -u))"
  local probe="tessera-probe-$$" why=""
  ip netns add "$probe" 2>/dev/null || skip "'ip netns add' fails here (no CAP_SYS_ADMIN, or no network namespaces in this kernel)"
  # What a cluster is made of, tried once: a container may allow namespaces but not these.
  if ! ip link add "tcprobe$$" type veth peer name eth0 netns "$probe" 2>/dev/null; then
    why="veth pairs cannot be made here (no veth driver, or not allowed)"
  elif ! ip link add "tcprobeb$$" type bridge 2>/dev/null; then
    why="bridges cannot be made here (no bridge driver, or not allowed)"
  elif ! ip netns exec "$probe" unshare --uts true 2>/dev/null; then
    why="'unshare --uts' fails here (the nodes' host names need it)"
  fi
  ip link del "tcprobeb$$" 2>/dev/null || true
  ip netns del "$probe"
  [ -z "$why" ] || skip "$why"
}

name=""
node_prefix() { [ -n "$name" ] && echo "${name}-node" || echo "node"; }
bridge_name() { [ -n "$name" ] && echo "tcb-${name}" || echo "tcb"; }
veth_name() { echo "tcv${name}-$1"; }
hosts_marker() { echo "# tessera-cluster ${name:-default}"; }

# The cluster's subnet: 10.213.X.0/24 with X taken from the name, moved on while another
# interface of this machine already has it.
pick_subnet() {
  local x
  x=$(( $(printf '%s' "${name:-default}" | cksum | cut -d' ' -f1) % 200 + 20 ))
  while ip -4 addr show | grep -q "inet 10\.213\.${x}\."; do x=$(( (x - 19) % 200 + 20 )); done
  echo "10.213.${x}"
}

remove_hosts_block() {
  [ -f /etc/hosts ] || return 0
  local marker tmp
  marker="$(hosts_marker)"
  grep -qF "$marker" /etc/hosts || return 0
  tmp="$(mktemp)"
  grep -vF "$marker" /etc/hosts >"$tmp" || true
  # Written in place: /etc/hosts may be a bind mount (containers), which a rename would not replace.
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

cluster_nodes() {
  local prefix
  prefix="$(node_prefix)"
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" || true
}

cluster_pids() {
  local node
  for node in $(cluster_nodes); do ip netns pids "$node" 2>/dev/null || true; done
}

# Everything of the cluster `name`; also what a failed `up` or a killed test left.
teardown() {
  local node pid
  # A namespace lives on while a process is in it, so whatever still runs there is ended first.
  for pid in $(cluster_pids); do kill -9 "$pid" 2>/dev/null || true; done
  for node in $(cluster_nodes); do
    ip netns del "$node" 2>/dev/null || true
    rm -rf "/etc/netns/${node}" "${kHiddenDir}/${node}.hidden"
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$(veth_name '')[0-9]+$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$(bridge_name)" 2>/dev/null || true
  remove_hosts_block
  rm -rf "${kStateDir:?}/${name:-default}"
  rmdir /etc/netns "$kHiddenDir" "$kStateDir" 2>/dev/null || true
}

# Clusters whose owner process has ended: what a test killed on its timeout left.
remove_orphaned_clusters() {
  local state owner mine="$name"
  for state in "$kStateDir"/*/owner; do
    [ -f "$state" ] || continue
    owner="$(cat "$state")"
    kill -0 "$owner" 2>/dev/null && continue
    name="$(basename "$(dirname "$state")")"
    [ "$name" = default ] && name=""
    echo "cluster.sh: removing cluster ${name:-(default)}, whose owner (process $owner) has ended" >&2
    teardown
  done
  name="$mine"
}

shape_link() {  # shape_link <netns or ""> <device> <bandwidth> <delay> <loss>
  local ns="$1" dev="$2" bandwidth="$3" delay="$4" loss="$5"
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  local netem=()
  [ -n "$delay" ] && netem+=(delay "$delay")
  [ -n "$loss" ] && netem+=(loss "$loss")
  if [ -n "$bandwidth" ]; then
    # A token bucket: the burst holds a few milliseconds at the rate (at least 32 KiB), the queue
    # 100 ms of it, so a slow link queues instead of dropping.
    "${run[@]}" tc qdisc add dev "$dev" root handle 1: tbf rate "$bandwidth" burst 64kb latency 100ms
    if [ "${#netem[@]}" -gt 0 ]; then
      "${run[@]}" tc qdisc add dev "$dev" parent 1:1 handle 10: netem "${netem[@]}"
    fi
  elif [ "${#netem[@]}" -gt 0 ]; then
    "${run[@]}" tc qdisc add dev "$dev" root netem "${netem[@]}"
  fi
}

cmd_up() {
  local count="$1"
  shift
  local bandwidth="" delay="" loss="" owner=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      --owner) owner="$2"; shift 2 ;;
      --bandwidth) bandwidth="$2"; shift 2 ;;
      --delay) delay="$2"; shift 2 ;;
      --loss) loss="$2"; shift 2 ;;
      *) die "up: unknown option '$1'; options: --name NAME --owner PID --bandwidth 1gbit --delay 1ms --loss 1%" ;;
    esac
  done
  if ! [[ "$count" =~ ^[0-9]+$ ]] || [ "$count" -lt 1 ] || [ "$count" -gt 200 ]; then
    die "up: the node count is '$count'; give a whole number from 1 to 200, such as: cluster.sh up 2"
  fi
  [[ "$owner" =~ ^[0-9]*$ ]] || die "--owner '$owner': give the id of the process the cluster belongs to"
  [[ "$name" =~ ^[a-z0-9]{0,8}$ ]] ||
    die "--name '$name': use up to 8 lower-case letters and digits (interface names are short)"
  check_can_make_namespaces
  if [ -n "$delay$loss" ]; then
    local probe="tessera-probe-$$"
    ip netns add "$probe"
    ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null ||
      { ip netns del "$probe"; skip "--delay and --loss need the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM); leave them out"; }
    ip netns del "$probe"
  fi
  exec 9>"$kLock"
  flock 9
  remove_orphaned_clusters
  teardown
  trap 'echo "cluster.sh: up failed; removing what it made" >&2; teardown' ERR

  local subnet bridge prefix i node veth addresses=""
  subnet="$(pick_subnet)"
  bridge="$(bridge_name)"
  prefix="$(node_prefix)"
  ip link add "$bridge" type bridge
  ip addr add "${subnet}.254/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq 1 "$count"); do
    addresses+="${subnet}.${i} ${prefix}${i} $(hosts_marker)"$'\n'
  done
  for i in $(seq 1 "$count"); do
    node="${prefix}${i}"
    veth="$(veth_name "$i")"
    ip netns add "$node"
    ip link add "$veth" type veth peer name eth0 netns "$node"
    ip link set "$veth" master "$bridge" up
    ip netns exec "$node" ip link set lo up
    ip netns exec "$node" ip addr add "${subnet}.${i}/24" dev eth0
    ip netns exec "$node" ip link set eth0 up
    # net.ipv4.tcp_retries2 of the node's own network namespace (/proc/sys/net is per namespace).
    ip netns exec "$node" sh -c 'echo 3 >/proc/sys/net/ipv4/tcp_retries2'
    # Traffic leaving the node is shaped inside it, traffic to it on the bridge side: each
    # direction of the node's link gets the bandwidth, delay and loss once.
    shape_link "$node" eth0 "$bandwidth" "$delay" "$loss"
    shape_link "" "$veth" "$bandwidth" "$delay" "$loss"
    mkdir -p "/etc/netns/${node}"
    { echo "127.0.0.1 localhost"; printf '%s' "$addresses" | sed 's/ #.*//'; } \
      >"/etc/netns/${node}/hosts"
  done
  # A file that does not end its last line would have that line run into the block.
  if [ -s /etc/hosts ] && [ -n "$(tail -c 1 /etc/hosts)" ]; then echo >>/etc/hosts; fi
  printf '%s' "$addresses" >>/etc/hosts
  mkdir -p "${kStateDir}/${name:-default}"
  echo "${subnet}.0/24" >"${kStateDir}/${name:-default}/subnet"
  [ -z "$owner" ] || echo "$owner" >"${kStateDir}/${name:-default}/owner"
  trap - ERR
  echo "cluster.sh: ${count} node(s) ${prefix}1..${prefix}${count} on ${subnet}.0/24 (bridge ${bridge}, this machine ${subnet}.254)" \
    "link: ${bandwidth:-unlimited}${delay:+, delay $delay}${loss:+, loss $loss}" >&2
}

cmd_down() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      *) die "down: unknown option '$1'; options: --name NAME" ;;
    esac
  done
  exec 9>"$kLock"
  flock 9
  teardown
}

cmd_env() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      *) die "env: unknown option '$1'; options: --name NAME" ;;
    esac
  done
  local state="${kStateDir}/${name:-default}/subnet"
  [ -f "$state" ] || die "no cluster ${name:-(default)} is up; start one with: cluster.sh up 2${name:+ --name $name}"
  local subnet
  subnet="$(cat "$state")"
  # The daemons start through the agent instead of ssh; the ranks and daemons talk over the
  # cluster's subnet only, and between nodes over TCP (shared memory stays within a node).
  echo "export OMPI_MCA_plm_rsh_agent='${agent}'"
  echo "export OMPI_MCA_btl=tcp,self"
  echo "export OMPI_MCA_btl_tcp_if_include=${subnet}"
  echo "export OMPI_MCA_oob_tcp_if_include=${subnet}"
}

cmd_link() {
  local node="$1" state="$2"
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      *) die "link: unknown option '$1'; options: --name NAME" ;;
    esac
  done
  [[ "$state" == up || "$state" == down ]] || die "link: give up or down, not '$state'"
  [[ "$node" =~ ^$(node_prefix)([0-9]+)$ ]] || die "link: '$node' is not a node of this cluster (nodes: $(cluster_nodes | tr '\n' ' '))"
  ip link set "$(veth_name "${BASH_REMATCH[1]}")" "$state"
}

cmd_run() {
  local node="$1"
  shift
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || die "run: give the command after the node, such as: cluster.sh run node1 -- hostname"
  ip netns list | awk '{print $1}' | grep -qxF "$node" ||
    die "run: no node '$node' (nodes: $(ip netns list | awk '{print $1}' | tr '\n' ' '))"
  # The caller's environment stays (as a login shell's exports would); the node's own host name.
  exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
}

cmd_hide() {
  local node="$1" dir="$2"
  ip netns list | awk '{print $1}' | grep -qxF "$node" ||
    die "hide: no node '$node' (nodes: $(ip netns list | awk '{print $1}' | tr '\n' ' '))"
  [ -d "$dir" ] || die "hide: '$dir' is not a folder"
  mkdir -p "$kHiddenDir"
  realpath "$dir" >>"${kHiddenDir}/${node}.hidden"
}

cmd_pids() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="$2"; shift 2 ;;
      *) die "pids: unknown option '$1'; options: --name NAME" ;;
    esac
  done
  local node pid
  for node in $(cluster_nodes); do
    for pid in $(ip netns pids "$node" 2>/dev/null || true); do
      echo "$node $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    done
  done
}

[ $# -ge 1 ] || usage
command="$1"
shift
case "$command" in
  up) [ $# -ge 1 ] || usage; cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  env) cmd_env "$@" ;;
  link) [ $# -ge 2 ] || usage; cmd_link "$@" ;;
  pids) cmd_pids "$@" ;;
  run) [ $# -ge 2 ] || usage; cmd_run "$@" ;;
  hide) [ $# -eq 2 ] || usage; cmd_hide "$@" ;;
  *) usage ;;
esac
