#!/bin/sh
# Entrypoint of the sentinel1..3 services (docker-compose.yml, profile "sentinel"):
#   sh /etc/redis-sentinel/start.sh NAME [redis-sentinel options...]
# Sentinel rewrites its config file, so each one runs on its own writable copy of the read-only
# template beside this script. NAME (the service name) is what it announces to the others.
set -eu
name=$1
shift
cp "$(dirname "$0")/sentinel.conf" "/tmp/$name.conf"
exec redis-sentinel "/tmp/$name.conf" --sentinel announce-ip "$name" "$@"
