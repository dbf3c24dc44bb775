#!/usr/bin/env bash
# Builds CoreDNS (main.go: only the plugins the local cluster needs, from the pinned module in go.mod) into
# $COREDNS_BIN, outside the repository so a fresh clone on this machine reuses it. A no-op once built for
# this go.mod/go.sum/main.go.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
COREDNS_VERSION="$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$HERE/go.mod")"
COREDNS_BIN="${COREDNS_BIN:-${TOOLS_CACHE:-$HOME/.cache/training-jobs}/coredns-$COREDNS_VERSION}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
ID="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/main.go" | sha256sum | cut -c1-16)"
mkdir -p "$COREDNS_BIN"
exec 9>"$COREDNS_BIN/.lock"
flock 9
if [[ "$(cat "$COREDNS_BIN/.build-id" 2>/dev/null)" == "$ID" && -x "$COREDNS_BIN/coredns" ]]; then
    exit 0
fi
[[ -x "$GO" ]] || { echo "Go not found (set GO=/path/to/go; CoreDNS $COREDNS_VERSION needs Go >= 1.26)" >&2; exit 1; }
echo "building CoreDNS $COREDNS_VERSION into $COREDNS_BIN (cold: ~10 min on 2 busy cores)"
start=$(date +%s)
(cd "$HERE" && CGO_ENABLED=0 GOFLAGS="-p=${BUILD_PARALLELISM:-1} -buildvcs=false" \
    nice -n 10 "$GO" build -mod=readonly -trimpath -ldflags "-s -w" -o "$COREDNS_BIN/coredns.tmp" .)
mv -f "$COREDNS_BIN/coredns.tmp" "$COREDNS_BIN/coredns"
echo "$ID" > "$COREDNS_BIN/.build-id"
echo "CoreDNS built in $(( $(date +%s) - start ))s"
