#!/bin/sh
# Install the Debian packages ftrain needs, when they are missing.
# When every one is installed it does nothing (no apt-get, no root needed).
# Otherwise, as root it runs apt-get; as another user it prints the exact
# command and fails.
set -u
PKGS="build-essential pkg-config openmpi-bin libopenmpi-dev libzstd-dev zstd
libarchive-dev libjansson-dev libxxhash-dev libopenblas-dev zlib1g-dev
dataset-fashion-mnist python3 perl procps slurmd slurmctld slurm-client munge
python3-numpy python3-torch python3-zstandard python3-xxhash man-db bzip2 xz-utils
python3-venv python3-pip python3-setuptools"
# python3-numpy and python3-torch: the Python binding's tests and the
# PyTorch example run in make check (and PyTorch is the benchmark's peer);
# python3-zstandard and python3-xxhash: the format test's independent reader
# (tests/ckpt/format_spec.sh), written from docs/checkpoint-format.md alone;
# man-db renders the man pages' check; bzip2 and xz-utils make the refused-filter archives;
# python3-venv, python3-pip and python3-setuptools: the offline
# `pip install ./python` into a venv (tests/python/packaging.sh).

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
    echo "deps: missing packages:$missing" >&2
    echo "deps: run as root: apt-get update && $cmd" >&2
    exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "deps: apt-get update failed" >&2; exit 1; }
log=$(mktemp "${TMPDIR:-/tmp}/ftrain-deps.XXXXXX") || { echo "deps: mktemp failed" >&2; exit 1; }
# Package scripts must not start daemons here; the tests start their own.
$cmd -qq >"$log" 2>&1 || {
    tail -20 "$log" >&2
    echo "deps: '$cmd' failed (log above, in $log)" >&2
    exit 1
}
rm -f "$log"
echo "deps: done"
