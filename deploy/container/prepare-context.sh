#!/usr/bin/env bash
# Write the build context for deploy/container/Containerfile into DEST:
#   DEST/app     -> /opt/galley: the built server and the workspace packages it imports (dist/ and
#                   package.json), production node_modules from `npm ci --omit=dev` against the
#                   committed lockfile, onnxruntime-node's binaries for this platform only
#   DEST/models  -> /models: the model repository (default: examples/model_repository)
# Build first (`npx nx run @galley/server:build`). Usage: prepare-context.sh DEST [MODEL_REPOSITORY]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:?usage: prepare-context.sh DEST [MODEL_REPOSITORY]}
models=${2:-$root/examples/model_repository}

if [ ! -f "$root/packages/server/dist/cli/galley.js" ]; then
  echo "prepare-context: packages/server/dist is missing; run 'npx nx run @galley/server:build' first" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/app"
app=$(cd "$dest/app" && pwd)

# npm ci needs the root manifest, the lockfile and every workspace's package.json to accept the lockfile.
cp "$root/package.json" "$root/package-lock.json" "$root/.npmrc" "$app/"
workspaces=$(cd "$root" && npm query .workspace 2>/dev/null |
  node -e 'let s="";process.stdin.on("data",(d)=>{s+=d}).on("end",()=>{for(const w of JSON.parse(s))console.log(w.location)})')
for location in $workspaces; do
  mkdir -p "$app/$location"
  cp "$root/$location/package.json" "$app/$location/"
done
# Only @galley/server's dependencies; no install scripts (onnxruntime-node ships its CPU binaries).
(cd "$app" && npm ci --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --workspace @galley/server --loglevel=error >/dev/null)

# Copy dist/ of each workspace package the server links to; drop the manifests of the others.
linked=""
for link in "$app"/node_modules/@galley/*; do
  location=$(readlink "$link")
  location=${location#../../}
  linked="$linked $location"
  cp -R "$root/$location/dist" "$app/$location/dist"
done
for location in $workspaces; do
  case " $linked " in *" $location "*) ;; *) rm -rf "${app:?}/$location" ;; esac
done
find "$app" -depth -type d -empty -delete
rm -rf "$app/node_modules/.bin"

# onnxruntime-node ships binaries for every platform; keep this one's (CPU execution provider).
platform=$(node -p process.platform)
arch=$(node -p process.arch)
for napi in "$app"/node_modules/onnxruntime-node/bin/napi-v*; do
  for dir in "$napi"/*/*; do
    [ "$dir" = "$napi/$platform/$arch" ] || rm -rf "$dir"
  done
  find "$napi" -depth -type d -empty -delete
done
ort=$(find "$app/node_modules/onnxruntime-node/bin" -name 'libonnxruntime.so*' | head -n 1)
if [ -z "$ort" ] || [ ! -f "$(dirname "$ort")/onnxruntime_binding.node" ]; then
  echo "prepare-context: onnxruntime-node has no $platform/$arch CPU binaries" >&2
  exit 1
fi

cp -R "$models" "$dest/models"
echo "prepare-context: $(du -sh "$app" | cut -f1) app, $(du -sh "$dest/models" | cut -f1) models in $dest"
