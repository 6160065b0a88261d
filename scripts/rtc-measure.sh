#!/usr/bin/env bash
# Measures real-time chunking against inference at every tick with a slowed policy
# (docs/runtime.md, "Real-time chunking"): for each policy delay and chunking mode,
# runs the daemon without its learner for SECONDS and prints deadline misses, action
# jerk, starved ticks and the success rate from its report.
#
# usage: [MODES='every_tick synchronous realtime:BLEND ...'] \
#        scripts/rtc-measure.sh POLICY_CKPT [SECONDS] [DELAYS_MS...]
set -euo pipefail
policy=$1
seconds=${2:-30}
shift 2 || shift $#
delays=("${@:-0 60 80}")
imago=${IMAGO:-target/release/imago}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-9s %-22s %6s %7s %9s %8s %10s\n' delay_ms mode ticks misses jerk starved success
for delay in ${delays[*]}; do
  for mode in ${MODES:-every_tick synchronous realtime:0 realtime:2}; do
    blend=${mode#*:}; name=${mode%%:*}
    [ "$name" = "$mode" ] && blend=2
    cat > "$work/config.toml" <<TOML
robot = "reacher2d"
device = "cpu"
policy = "$policy"
[actor]
exploration = 0.0
policy_delay_ms = $delay
[actor.takeover]
window = 100000
[actor.chunking]
mode = "$name"
blend_ticks = $blend
[learner]
enabled = false
TOML
    rm -rf "$work/run"
    "$imago" daemon --config "$work/config.toml" --run-dir "$work/run" \
      --duration "$seconds" --report "$work/report.json" >/dev/null 2>"$work/stderr" \
      || { cat "$work/stderr"; exit 1; }
    python3 - "$work/report.json" "$delay" "$name blend=$blend" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n, k = r["episodes_finished"], r["episodes_succeeded"]
jerk = r["action_jerk"]
print(f'{sys.argv[2]:<9} {sys.argv[3]:<22} {r["ticks"]:6d} {r["deadline_misses"]:7d} '
      f'{jerk:9.5f} {r["starved_ticks"]:8d} {k:4d}/{n:<4d}')
PY
  done
done
