#!/usr/bin/env bash
# The fleet learner's intake with N actor processes on this machine (docs/fleet.md):
#   scripts/fleet-intake.sh N [SECONDS] [CONTROL_HZ]
# Starts `imago learner` on loopback and N actors (`imago daemon --learner`, each a
# local simulated reacher2d at CONTROL_HZ), runs them for SECONDS, stops the learner
# and prints its report: episodes and transitions stored per second, the median time
# from an upload's arrival to its fsynced acknowledgement, learning steps.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:?usage: scripts/fleet-intake.sh N [SECONDS] [CONTROL_HZ]}"
SECONDS_RUN="${2:-30}"
HZ="${3:-20}"
IMAGO="${IMAGO:-target/release/imago}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
KEY="imago/intake/$$"
cat > "$DIR/fleet.toml" <<TOML
robot = "reacher2d"
device = "cpu"
[actor.robot]
control_hz = $HZ
[learner]
min_episodes = 8
TOML
"$IMAGO" learner --config "$DIR/fleet.toml" --run-dir "$DIR/learner" \
  --listen "tcp/127.0.0.1:$PORT" --fleet-key "$KEY" --report "$DIR/learner.json" \
  > "$DIR/learner.out" 2>&1 &
LEARNER=$!
ACTORS=()
for i in $(seq 1 "$N"); do
  "$IMAGO" daemon --config "$DIR/fleet.toml" --run-dir "$DIR/a$i" \
    --learner "tcp/127.0.0.1:$PORT" --fleet-key "$KEY" --actor-id "a$i" \
    --duration "$SECONDS_RUN" --report "$DIR/a$i.json" > "$DIR/a$i.out" 2>&1 &
  ACTORS+=($!)
done
for pid in "${ACTORS[@]}"; do wait "$pid"; done
kill -INT "$LEARNER"
wait "$LEARNER"
python3 - "$DIR" "$N" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
r = json.load(open(f"{d}/learner.json"))
misses = [json.load(open(f"{d}/a{i}.json"))["deadline_misses"] for i in range(1, n + 1)]
ticks = [json.load(open(f"{d}/a{i}.json"))["ticks"] for i in range(1, n + 1)]
print(f"actors {n}: stored {r['episodes_stored']} episodes, {r['transitions_stored']} transitions "
      f"in {r['seconds']:.1f} s = {r['intake_transitions_per_second']:.0f} transitions/s; "
      f"ingest p50 {r['ingest_p50_ms']:.2f} ms; {r['learning_steps']} learning steps; "
      f"duplicates {r['duplicates']}; actor ticks {sum(ticks)}, deadline misses {sum(misses)}")
PY
