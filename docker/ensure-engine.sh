#!/usr/bin/env bash
# Make a Docker engine answer on $DOCKER_HOST (default unix:///var/run/docker.sock), for `make test`.
#
# - An engine that already answers is used as it is (nothing installed, nothing started).
# - Otherwise, as root: installs Debian's docker.io (and debootstrap, which `make images` needs)
#   when dockerd is missing, then starts `dockerd` in the background. It keeps running after the
#   tests (so the next `make test` finds it and its image cache warm): pid in /run/training-dockerd.pid,
#   log in /var/log/training-dockerd.log; stop it with `kill $(cat /run/training-dockerd.pid)`.
# - Not root and no engine: says why and exits 0; the real-engine tests then skip with that reason.
#
# Concurrent callers (several `make test` on one machine) are serialised by a lock file.
set -euo pipefail

SOCK=${DOCKER_HOST:-unix:///var/run/docker.sock}
PIDFILE=/run/training-dockerd.pid
LOG=/var/log/training-dockerd.log

answers() { timeout 10 docker info >/dev/null 2>&1; }

if answers; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "ensure-engine: no Docker engine answers on $SOCK and this is not root: the real-engine tests will skip" >&2
    exit 0
fi
case "$SOCK" in
    unix://*) ;;
    *) echo "ensure-engine: DOCKER_HOST=$SOCK does not answer and is not a local socket; not starting an engine" >&2
       exit 0 ;;
esac

exec 9>/run/training-dockerd.lock
flock 9
answers && exit 0  # another caller started it while we waited for the lock

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    echo "ensure-engine: installing ${missing[*]} (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Another engineer's apt/dpkg may hold the lock: wait for it, and try the install twice.
    apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
    for try in 1 2; do
        if apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" \
                >/tmp/training-apt.log 2>&1; then
            break
        fi
        [ "$try" = 2 ] && { tail -20 /tmp/training-apt.log >&2; exit 1; }
        sleep 5
    done
fi

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "ensure-engine: dockerd (pid $(cat "$PIDFILE")) runs but does not answer yet; waiting" >&2
else
    echo "ensure-engine: starting dockerd in the background (log $LOG, pid file $PIDFILE)" >&2
    # setsid: not a child of make's process group, so it outlives this `make test`.
    setsid dockerd --host "$SOCK" --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null &
fi
for _ in $(seq 1 120); do
    answers && { echo "ensure-engine: dockerd answers ($(docker version --format '{{.Server.Version}}'))" >&2; exit 0; }
    sleep 0.5
done
echo "ensure-engine: dockerd did not answer within 60 s; see $LOG" >&2
tail -5 "$LOG" >&2 || true
exit 1
