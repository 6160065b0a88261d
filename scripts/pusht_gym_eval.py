#!/usr/bin/env python3
"""Runs a LeRobot PushT policy directory (one imago trained, e.g. `imago train --what bc
--policy diffusion`, or any LeRobot made) in gym-pusht 0.1.8 itself, closed loop, with
LeRobot's own policy code, and reports what LeRobot and gym-pusht report:

    python scripts/pusht_gym_eval.py POLICY_DIR [--episodes 200] [--seed 0] [--json]

- success: the episode reached a coverage above 0.95 (gym-pusht's `is_success`);
- mean max coverage: per episode the largest `clip(coverage / 0.95, 0, 1)`, averaged
  over episodes (the "max reward" LeRobot's eval reports).

A policy reading `observation.environment_state` gets gym-pusht's keypoints
(`obs_type="environment_state_agent_pos"`), one reading `observation.image` its 96x96
frame (`obs_type="pixels_agent_pos"`); `observation.state` is the pusher's position.
Episode `i` starts from `env.reset(seed=seed + i)`; 300 steps at most, as imago's pusht.
Needs lerobot (0.4.4), torch, gymnasium and gym-pusht==0.1.8 in one Python.
"""

import argparse
import json
import sys
from pathlib import Path

import gymnasium as gym
import gym_pusht  # noqa: F401  (registers the environment)
import numpy as np
import torch

# LeRobot's own loading of a policy directory with its processors (beside this script).
from lerobot_policy_roundtrip import load

SUCCESS_COVERAGE = 0.95


def observation(raw, features):
    out = {"observation.state": torch.tensor(raw["agent_pos"], dtype=torch.float32)}
    if "observation.environment_state" in features:
        out["observation.environment_state"] = torch.tensor(raw["environment_state"], dtype=torch.float32)
    if "observation.image" in features:
        out["observation.image"] = torch.from_numpy(raw["pixels"]).permute(2, 0, 1).float() / 255.0
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (args.policy / "config.json").is_file():
        sys.exit(f"error: {args.policy} has no config.json: not a LeRobot policy directory")
    policy, pre, post = load(args.policy)
    features = set(policy.config.input_features)
    obs_type = "pixels_agent_pos" if "observation.image" in features else "environment_state_agent_pos"
    env = gym.make("gym_pusht/PushT-v0", obs_type=obs_type, max_episode_steps=300)
    successes, max_rewards = [], []
    torch.manual_seed(args.seed)
    for i in range(args.episodes):
        raw, _ = env.reset(seed=args.seed + i)
        policy.reset()
        best, success = 0.0, False
        while True:
            with torch.inference_mode():
                action = post(policy.select_action(pre(observation(raw, features))))
            raw, reward, terminated, truncated, info = env.step(action.squeeze(0).numpy().astype(np.float64))
            best = max(best, float(np.clip(info["coverage"] / SUCCESS_COVERAGE, 0.0, 1.0)))
            success = success or bool(info["is_success"])
            if terminated or truncated:
                break
        successes.append(success)
        max_rewards.append(best)
    n = len(successes)
    rate = sum(successes) / n
    mean_max = float(np.mean(max_rewards))
    # Wilson's 95% interval of the success rate; the coverage's normal interval.
    z = 1.96
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    spread = z * float(np.std(max_rewards, ddof=1)) / np.sqrt(n) if n > 1 else float("nan")
    result = {
        "policy": str(args.policy),
        "episodes": n,
        "success_rate": rate,
        "success_interval": [centre - half, centre + half],
        "mean_max_coverage": mean_max,
        "coverage_interval": [mean_max - spread, mean_max + spread],
        "seeds": [args.seed, args.seed + n - 1],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"gym-pusht 0.1.8, {n} episodes (seeds {args.seed}-{args.seed + n - 1}): "
            f"success {100 * rate:.1f}% [{100 * result['success_interval'][0]:.1f}, {100 * result['success_interval'][1]:.1f}], "
            f"mean max coverage {mean_max:.3f} [{result['coverage_interval'][0]:.3f}, {result['coverage_interval'][1]:.3f}]"
        )


if __name__ == "__main__":
    main()
