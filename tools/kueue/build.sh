#!/usr/bin/env bash
# Builds the Kueue controller (kubernetes-sigs/kueue, the job-queueing controller the Kubernetes launcher's
# queues rely on) from its Go module at a pinned release into $KUEUE_DIR (outside the repository, so a fresh
# clone on this machine reuses it), with the CRDs that release ships (config/components/crd/bases).
# Does nothing when that release is built there already.
set -euo pipefail
KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
KUEUE_DIR="${KUEUE_DIR:-${TOOLS_CACHE:-$HOME/.cache/training-jobs}/kueue-$KUEUE_VERSION}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
# -p: the Go build's parallelism; keep it low on shared machines (it is nice'd too).
BUILD_PARALLELISM="${BUILD_PARALLELISM:-2}"

ID="sigs.k8s.io/kueue@$KUEUE_VERSION"
mkdir -p "$KUEUE_DIR"
exec 9>"$KUEUE_DIR/.lock"
flock 9  # one build at a time per cache directory
if [[ "$(cat "$KUEUE_DIR/.build-id" 2>/dev/null)" == "$ID" && -x "$KUEUE_DIR/kueue" && -d "$KUEUE_DIR/crds" ]]; then
    exit 0
fi
[[ -x "$GO" ]] || { echo "Go not found (set GO=/path/to/go; Go >= 1.25 is needed)" >&2; exit 1; }
echo "building Kueue $KUEUE_VERSION into $KUEUE_DIR (cold: ~15 min on 2 cores)"
start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS="-p=$BUILD_PARALLELISM -buildvcs=false"
# The module's own go.mod pins every dependency (go install module@version honours it; no replace directives).
GOBIN="$KUEUE_DIR/bin.tmp" nice -n 10 "$GO" install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
mv -f "$KUEUE_DIR/bin.tmp/kueue" "$KUEUE_DIR/kueue" && rmdir "$KUEUE_DIR/bin.tmp"
# The CRDs of the same release, from the module the binary was built from.
SRC="$(cd "$KUEUE_DIR" && "$GO" mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$SRC/config/components/crd/bases" ]] || { echo "no CRDs in $SRC" >&2; exit 1; }
rm -rf "$KUEUE_DIR/crds" && mkdir -p "$KUEUE_DIR/crds"
cp "$SRC"/config/components/crd/bases/*.yaml "$KUEUE_DIR/crds/"
chmod -R u+w "$KUEUE_DIR/crds"
echo "$ID" > "$KUEUE_DIR/.build-id"
echo "$(( $(date +%s) - start ))" > "$KUEUE_DIR/.build-seconds"
echo "Kueue $KUEUE_VERSION built in $(( $(date +%s) - start ))s: $KUEUE_DIR/kueue, $(ls "$KUEUE_DIR/crds" | wc -l) CRDs"
