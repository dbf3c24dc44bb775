#!/usr/bin/env bash
# Builds the local control plane's binaries into $K8S_BIN (outside the repository, so a fresh clone on
# this machine reuses them): `k8s` (kube-apiserver, kube-controller-manager, kube-scheduler and etcd,
# from the pinned modules of tools/k8s/go.mod; one link instead of four) with a symlink per component,
# and kwok. Does nothing when the binaries for this go.mod/go.sum/source are there already.
#   K8S_TAGS=nodes adds kubelet and kube-proxy (tools/k8s/nodes.go).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
K8S_BIN="${K8S_BIN:-${TOOLS_CACHE:-$HOME/.cache/training-jobs}/k8s-$K8S_VERSION}"
K8S_TAGS="${K8S_TAGS:-}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
# -p: the Go build's parallelism; keep it low on shared machines (it is nice'd too).
BUILD_PARALLELISM="${BUILD_PARALLELISM:-2}"

ID="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE"/*.go | sha256sum | cut -c1-16)-$KWOK_VERSION-tags=$K8S_TAGS"
mkdir -p "$K8S_BIN"
exec 9>"$K8S_BIN/.lock"
flock 9  # one build at a time per cache directory (CI and a developer may start one together)
if [[ "$(cat "$K8S_BIN/.build-id" 2>/dev/null)" == "$ID" && -x "$K8S_BIN/k8s" && -x "$K8S_BIN/kwok" ]]; then
    exit 0
fi
[[ -x "$GO" ]] || { echo "Go not found (set GO=/path/to/go; Go >= 1.24 is needed)" >&2; exit 1; }
echo "building the control plane $K8S_VERSION and kwok $KWOK_VERSION into $K8S_BIN (cold: ~25 min on 2 cores)"
start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS="-p=$BUILD_PARALLELISM -buildvcs=false"
V=k8s.io/component-base/version
MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
LDFLAGS="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
(cd "$HERE" && nice -n 10 "$GO" build -mod=readonly -trimpath -tags "$K8S_TAGS" -ldflags "$LDFLAGS" -o "$K8S_BIN/k8s.tmp" .)
mv -f "$K8S_BIN/k8s.tmp" "$K8S_BIN/k8s"
for name in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    ln -sfn k8s "$K8S_BIN/$name"
done
echo "control plane built in $(( $(date +%s) - start ))s"
GOBIN="$K8S_BIN/kwok.tmp" nice -n 10 "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
mv -f "$K8S_BIN/kwok.tmp/kwok" "$K8S_BIN/kwok" && rmdir "$K8S_BIN/kwok.tmp"
echo "$ID" > "$K8S_BIN/.build-id"
echo "$(( $(date +%s) - start ))" > "$K8S_BIN/.build-seconds"
echo "built in $(( $(date +%s) - start ))s: $(ls "$K8S_BIN" | tr '\n' ' ')"
