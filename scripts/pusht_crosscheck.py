#!/usr/bin/env python3
"""Replays imago's PushT episodes in gym-pusht 0.1.8 (pymunk) and says how far apart the
two simulations end up.

    cargo run --release -p imago-robots --example pusht_expert -- 50 0 0 /tmp/pusht.jsonl
    python3 scripts/pusht_crosscheck.py /tmp/pusht.jsonl [--json]

Each episode starts gym-pusht with `reset(options={"reset_to_state": ...})` from the
state imago's reset asked for, checks that both place the block the same way (the
legacy placement), then sends the pusher targets imago executed, tick by tick.
Needs `pip install gym-pusht==0.1.8`. With `--json`, the figures are printed as one
JSON object instead (the test `robots/tests/gym_pusht_parity.rs` reads it).
"""
import json
import math
import sys

import gymnasium as gym
import gym_pusht  # noqa: F401  (registers the environment)
import numpy as np


def main(path, as_json):
    env = gym.make("gym_pusht/PushT-v0", obs_type="state")
    placement, first_tick, final_gap, agree, imago_success, gym_success = [], [], [], 0, 0, 0
    final_cov_imago, final_cov_gym, gaps = [], [], []
    try:
        with open(path) as lines:
            episodes = [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as error:
        sys.exit(f"error: cannot read episodes from {path}: {error}")
    if not episodes:
        sys.exit(f"error: {path} holds no episodes")
    for episode in episodes:
        state, _ = env.reset(options={"reset_to_state": episode["reset_to_state"]})
        # imago's placement of the block vs gym-pusht's, before any tick.
        start = episode["start"]
        placement.append(max(abs(state[i] - start[i]) for i in range(4)))
        coverage = 0.0
        success = False
        states = []
        for target in episode["targets"]:
            state, _, terminated, _, info = env.step(np.array(target))
            states.append(state)
            coverage = info["coverage"]
            if terminated:
                success = True
                break
        ours = episode["states"]
        d0 = math.hypot(states[0][2] - ours[0][2], states[0][3] - ours[0][3])
        first_tick.append(d0)
        k = min(len(states), len(ours)) - 1
        gaps.append([math.hypot(states[j][2] - ours[j][2], states[j][3] - ours[j][3]) for j in range(k + 1)])
        final_gap.append(math.hypot(states[k][2] - ours[k][2], states[k][3] - ours[k][3]))
        final_cov_imago.append(episode["coverage"][-1])
        final_cov_gym.append(coverage)
        imago_success += episode["success"]
        gym_success += success
        agree += episode["success"] == success
    n = len(episodes)
    after = {k: [g[k - 1] for g in gaps if len(g) >= k] for k in (5, 10, 20, 50)}
    if as_json:
        print(json.dumps({
            "episodes": n,
            "placed_exactly": int(sum(p < 1e-3 for p in placement)),
            "largest_placement_gap": float(max(placement)),
            "median_gap_after": {k: float(np.median(v)) for k, v in after.items() if v},
            "median_final_gap": float(np.median(final_gap)),
            "imago_successes": int(imago_success),
            "gym_successes": int(gym_success),
            "same_outcome": int(agree),
            "imago_mean_final_coverage": float(np.mean(final_cov_imago)),
            "gym_mean_final_coverage": float(np.mean(final_cov_gym)),
        }))
        return
    exact = sum(p < 1e-3 for p in placement)
    print(f"{n} episodes replayed in gym-pusht 0.1.8")
    print(f"reset_to_state placement: {exact}/{n} within 0.001 units of gym-pusht's, largest gap {max(placement):.3f} units")
    print(f"block position gap after the first tick: median {np.median(first_tick):.3f}, max {max(first_tick):.3f} units")
    for k, at in after.items():
        if at:
            print(f"block position gap after {k} ticks (open loop): median {np.median(at):.2f}, 90th percentile {np.percentile(at, 90):.2f} units ({len(at)} episodes)")
    print(f"block position gap at the end: median {np.median(final_gap):.1f}, 90th percentile {np.percentile(final_gap, 90):.1f} units")
    print(f"success: imago {imago_success}/{n}, gym-pusht replaying imago's targets {gym_success}/{n}, same outcome {agree}/{n}")
    print(f"mean final coverage: imago {np.mean(final_cov_imago):.3f}, gym-pusht {np.mean(final_cov_gym):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], "--json" in sys.argv[2:])
