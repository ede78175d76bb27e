#!/usr/bin/env bash
# The text-to-video benchmark at 8 users with the denoiser's max_queue_delay_microseconds at each
# of several values, and with the models' CUDA graphs on and off, interleaved (a round runs every
# variant once, in turn), so that the spread between calls on the lent machine falls on every
# variant alike. Each variant gets a copy of the models with only those lines changed (graphs off:
# every `optimization { cuda { graphs: true } }` line of the configs taken out). On the GPU
# machine, after device-run.sh's build step (it unpacks Node and builds the addons the bundle needs):
#   bash packages/backends-native/test/gpu/t2v-ab.sh
# GALLEY_AB_DELAYS ("6000 0"), GALLEY_AB_GRAPHS ("on"; "on off" for both), GALLEY_AB_ROUNDS (3),
# GALLEY_AB_ARGS ("--reps=1 --videos=5"), GALLEY_AB_CONFIG (gpu: the config name,
# configs/<name>.pbtxt; "default": config.pbtxt), GALLEY_AB_MODELS
# (examples/text-to-video/models), GALLEY_AB_BENCH (the bundled benchmark; on a CPU machine, for
# a check of this script: "npx tsx bench/text-to-video.ts" with a copy of the models whose GPU
# configs say KIND_CPU), GALLEY_AB_EXTRA ("name=dir ...": more variants, each a models folder
# served as it is, e.g. the previous version of a model against the current one). Logs go to $OUT
# (or /tmp/galley-ab-out); a summary is printed at the end.
set -uo pipefail
out=${OUT:-/tmp/galley-ab-out}
delays=${GALLEY_AB_DELAYS:-6000 0}
graphs=${GALLEY_AB_GRAPHS:-on}
rounds=${GALLEY_AB_ROUNDS:-3}
config=${GALLEY_AB_CONFIG:-gpu}
models=${GALLEY_AB_MODELS:-examples/text-to-video/models}
bench=${GALLEY_AB_BENCH:-node packages/backends-native/build/gpu-carry/text-to-video-bench.mjs}
[ -d /tmp/galley-node/bin ] && export PATH=/tmp/galley-node/bin:$PATH
case $rounds in '' | *[!0-9]* | 0) echo "GALLEY_AB_ROUNDS must be a whole number of rounds, at least 1: $rounds" >&2 && exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
case $config in '' | *[!A-Za-z0-9_-]*) echo "GALLEY_AB_CONFIG must be a config name (letters, digits, _ and -): $config" >&2 && exit 2 ;; esac
file=configs/$config.pbtxt
config_arg=--config=$config
if [ "$config" = default ]; then
  file=config.pbtxt
  config_arg=
fi
variants=
for delay in $delays; do
  case $delay in *[!0-9]*) echo "not a delay in microseconds: $delay" >&2 && exit 2 ;; esac
  for graph in $graphs; do
    case $graph in on) variant=$delay ;; off) variant=$delay-eager ;; *) echo "GALLEY_AB_GRAPHS takes on and off: $graph" >&2 && exit 2 ;; esac
    variants="$variants $variant"
    cp -r "$models" "$work/$variant"
    target=$work/$variant/denoiser/$file
    if ! grep -q "max_queue_delay_microseconds:" "$target"; then
      echo "$target has no max_queue_delay_microseconds line to change" >&2
      exit 2
    fi
    sed -i "s/max_queue_delay_microseconds: *[0-9]*/max_queue_delay_microseconds: $delay/" "$target"
    if [ "$graph" = off ]; then
      for f in "$work/$variant"/*/"$file"; do sed -i '/^optimization { cuda { graphs: true } }$/d' "$f"; done
    fi
  done
done
for extra in ${GALLEY_AB_EXTRA:-}; do
  name=${extra%%=*}
  dir=${extra#*=}
  case $name in '' | *[!A-Za-z0-9_-]*) echo "GALLEY_AB_EXTRA: not a variant name (letters, digits, _ and -): $name" >&2 && exit 2 ;; esac
  [ "$name" != "$extra" ] && [ -d "$dir" ] || { echo "GALLEY_AB_EXTRA takes name=dir, dir a models folder: $extra" >&2 && exit 2; }
  variants="$variants $name"
  cp -r "$dir" "$work/$name"
done
status=0
for round in $(seq 1 "$rounds"); do
  for variant in $variants; do
    log=$out/ab-$variant-$round.log
    # shellcheck disable=SC2086
    timeout "${GALLEY_AB_TIMEOUT:-150}" $bench $config_arg --models="$work/$variant" --users=8 --batch-reasons \
      ${GALLEY_AB_ARGS:---reps=1 --videos=5} >"$log" 2>&1
    rc=$?
    [ $rc = 0 ] || status=1
    echo "round $round, $variant: exit $rc ($log)"
  done
done
echo
echo "| variant (delay µs; -eager: graphs off) | round | pipeline videos/min | step by step videos/min | ratio | denoiser batch, pipeline / step by step |"
echo "| --- | --- | --- | --- | --- | --- |"
for variant in $variants; do
  for round in $(seq 1 "$rounds"); do
    log=$out/ab-$variant-$round.log
    field() { grep "^| 8 | $1 |" "$log" | cut -d'|' -f"$2" | awk '{print $1}'; }
    ratio=$(grep -o "throughput: [0-9.]*" "$log" | awk '{print $2}')
    echo "| $variant | $round | $(field pipeline 4) | $(field "step by step" 4) | ${ratio:-?} | $(field pipeline 8) / $(field "step by step" 8) |"
  done
done
exit $status
