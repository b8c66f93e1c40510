#!/bin/sh
# Entrypoint of the one-shot redis-cluster-init service (docker-compose.yml, profile "cluster"):
#   sh /etc/redis-cluster/create.sh HOST:PORT...
# Makes one cluster of the nodes, half of them masters sharing the 16384 slots and half replicas
# (redis-cli --cluster create --cluster-replicas 1), unless the first node already belongs to a
# cluster (a restarted stack: each node kept its nodes.conf); then waits until every node reports
# cluster_state:ok and knows every node.
set -eu
[ $# -ge 6 ] || { echo "usage: $0 HOST:PORT... (six or more)" >&2; exit 2; }
cli() { node=$1; shift; redis-cli -h "${node%:*}" -p "${node##*:}" "$@"; }

known=$(cli "$1" cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
if [ "${known:-0}" -gt 1 ]; then
    echo "$1 already knows $known nodes: no cluster created"
else
    # CLUSTER MEET wants addresses: resolve the service names (the nodes announce the names
    # themselves, cluster-announce-hostname).
    addrs=""
    for node in "$@"; do
        ip=$(getent ahostsv4 "${node%:*}" | awk 'NR == 1 { print $1 }')
        [ -n "$ip" ] || { echo "cannot resolve ${node%:*}" >&2; exit 1; }
        addrs="$addrs $ip:${node##*:}"
    done
    # shellcheck disable=SC2086 # one word per node
    redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes
fi
# Done when every node reports cluster_state:ok and knows every node (gossip spreads the last
# ones a moment after the slots are ok).
for node in "$@"; do
    tries=0
    until info=$(cli "$node" cluster info | tr -d '\r') &&
          echo "$info" | grep -q '^cluster_state:ok' &&
          echo "$info" | grep -q "^cluster_known_nodes:$#\$"; do
        tries=$((tries + 1))
        [ "$tries" -le 60 ] || { echo "$node: not ok and knowing all $# nodes within 30 s" >&2; exit 1; }
        sleep 0.5
    done
done
echo "cluster ok: $*"
