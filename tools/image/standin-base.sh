#!/usr/bin/env bash
# Make a stand-in for the Dockerfile's base image (python:3.11-slim) from Debian packages, for
# machines that can reach Debian's archive but no container registry, and tag it as that image.
# debootstrap bookworm minbase with python3 (3.11), python3-venv, python-is-python3 and
# ca-certificates. The build environment's trust store and pip settings go into the stand-in
# only, because the image build's package downloads pass through them; the Dockerfile itself
# stays what a user builds against the real base (docs/image.md says what differs).
set -euo pipefail
TAG=${1:?usage: standin-base.sh IMAGE_TAG}
source "$(dirname "$0")/engine.sh"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# The build machine's trust store (it may hold a proxy's CA the downloads need).
for bundle in /etc/ssl/certs/ca-certificates.crt; do
    [ -f "$bundle" ] && cp "$bundle" "$root$bundle"
done
# pip's settings that reach an index over the network: the CA bundle and the index URLs.
# Local file:// indexes and find-links of the build machine mean nothing inside the build.
python3 - "$root/etc/pip.conf" <<'PY'
import configparser, os, subprocess, sys
settings = {}
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
for line in listed.splitlines():
    key, _, value = line.partition("=")
    name = key.split(".", 1)[-1]
    value = value.strip().strip("'")
    if name in ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout"):
        kept = " ".join(v for v in value.split() if not v.startswith("file:"))
        if kept:
            settings[name] = kept
settings["cert"] = "/etc/ssl/certs/ca-certificates.crt"
for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"):
    if os.environ.get(name):
        settings[name[4:].lower().replace("_", "-")] = os.environ[name]
config = configparser.ConfigParser()
config["global"] = settings
with open(sys.argv[1], "w") as out:
    config.write(out)
PY
tar -C "$root" -c . | "$ENGINE" import --quiet --change 'CMD ["python3"]' - "$TAG" >/dev/null
echo "stand-in base $TAG: $("$ENGINE" image inspect --format '{{.Size}}' "$TAG") bytes"
