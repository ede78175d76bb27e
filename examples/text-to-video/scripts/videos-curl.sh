#!/usr/bin/env bash
# The videos API with nothing but curl (and sed): create a video, follow it to its end, download
# it and its thumbnail, list, delete. What docs/guides/videos-api.md walks through, as one script.
#   bash examples/text-to-video/scripts/videos-curl.sh "a red fox running in snow" [out-dir]
# GALLEY_URL: the server's HTTP address (default http://localhost:8000); GALLEY_VIDEOS_API_KEY: a
# key when the server has keys; VIDEO_SIZE, VIDEO_FRAMES, VIDEO_STEPS: what to ask for.
set -euo pipefail
url=${GALLEY_URL:-http://localhost:8000}
prompt=${1:?give a prompt}
out=${2:-.}
auth=()
[ -n "${GALLEY_VIDEOS_API_KEY:-}" ] && auth=(-H "Authorization: Bearer $GALLEY_VIDEOS_API_KEY")
# The prompt as a JSON string: backslashes and quotes escaped (no control characters expected).
json_prompt=$(printf '%s' "$prompt" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p" | head -n 1; }

body="{\"model\":\"text_to_video\",\"prompt\":\"$json_prompt\",\"size\":\"${VIDEO_SIZE:-128x128}\""
body+=",\"frames\":${VIDEO_FRAMES:-16},\"steps\":${VIDEO_STEPS:-20}}"
created=$(curl -sS --fail-with-body "${auth[@]}" -H 'Content-Type: application/json' -d "$body" "$url/v1/videos")
id=$(printf '%s' "$created" | field id)
[ -n "$id" ] || { echo "no video id in: $created" >&2; exit 1; }
echo "created $id"

# Poll once a second until it ends (the events stream, curl -N .../events, is the live view).
while :; do
  video=$(curl -sS --fail-with-body "${auth[@]}" "$url/v1/videos/$id")
  status=$(printf '%s' "$video" | field status)
  echo "$status $(printf '%s' "$video" | field progress)%"
  case $status in
    completed) break ;;
    failed | cancelled) echo "$video" >&2; exit 1 ;;
  esac
  sleep 1
done

# MP4 when the server has ffmpeg, else GIF: the content type says which.
type=$(curl -sS --fail-with-body "${auth[@]}" -o "$out/$id.video" -w '%{content_type}' "$url/v1/videos/$id/content")
case $type in video/mp4*) ext=mp4 ;; image/gif*) ext=gif ;; *) echo "unexpected content type $type" >&2; exit 1 ;; esac
mv "$out/$id.video" "$out/$id.$ext"
curl -sS --fail-with-body "${auth[@]}" -o "$out/$id.png" "$url/v1/videos/$id/content?variant=thumbnail"
echo "downloaded $out/$id.$ext and $out/$id.png"
curl -sS --fail-with-body "${auth[@]}" "$url/v1/videos?limit=5" | grep -q "\"$id\"" && echo "listed"
[ "${KEEP_VIDEO:-}" = 1 ] || { curl -sS --fail-with-body "${auth[@]}" -X DELETE "$url/v1/videos/$id" >/dev/null && echo "deleted"; }
