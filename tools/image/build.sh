#!/usr/bin/env bash
# `make image`: build the image from the Dockerfile with the engine this machine has. When the
# Dockerfile's base cannot be pulled (no registry reachable), a stand-in is made from Debian
# packages first (standin-base.sh). Prints the image's size.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/image/engine.sh
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' gpu_admission/__init__.py)
IMAGE=${IMAGE:-gpu-admission:$VERSION}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
base=$(sed -n 's/^FROM \([^ ]*\) AS build$/\1/p' Dockerfile)
case "$base" in */*) ;; *) base=docker.io/library/$base ;; esac
if ! "$ENGINE" image inspect "$base" >/dev/null 2>&1; then
    if ! timeout 60 "$ENGINE" pull -q "$base" >/dev/null 2>&1; then
        echo "cannot pull $base: building a stand-in from Debian packages (docs/image.md)" >&2
        bash tools/image/standin-base.sh "$base"
    fi
fi
build=(build -t "$IMAGE" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION")
# The same two as labels of the build itself: buildah reuses a cached LABEL step whose ARG
# changed (podman 4.3), and a commit's image must name that commit.
build+=(--label "org.opencontainers.image.version=$VERSION")
build+=(--label "org.opencontainers.image.revision=$REVISION")
[ "$ENGINE" = podman ] && build+=(--isolation=chroot)
"$ENGINE" "${build[@]}" . >&2
echo "$IMAGE: $("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE") bytes"
