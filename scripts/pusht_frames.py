#!/usr/bin/env python3
"""Prints gym-pusht 0.1.8's own camera frames with the scene each shows, so that a test
can render the same scenes in imago and compare byte for byte.

    python3 scripts/pusht_frames.py SCENES SIZE > frames.jsonl

Scene i is gym-pusht's reset(seed=i) followed by a seeded number (0-39) of random
pusher targets. Each line is one JSON object: the pusher's position, the block's body
origin and angle (gym-pusht's frame, units), how many contacts pymunk holds (it marks
each on the frame with a short red line that imago does not draw), and the
SIZE x SIZE `pixels` observation as hexadecimal RGB bytes, rows top first.
Needs `pip install gym-pusht==0.1.8`.
"""
import json
import sys

import gymnasium as gym
import gym_pusht  # noqa: F401  (registers the environment)
import numpy as np


def main(scenes, size):
    env = gym.make(
        "gym_pusht/PushT-v0",
        obs_type="pixels_agent_pos",
        render_mode="rgb_array",
        observation_width=size,
        observation_height=size,
    )
    rng = np.random.default_rng(0)
    for seed in range(scenes):
        obs, _ = env.reset(seed=seed)
        for _ in range(rng.integers(0, 40)):
            obs, *_ = env.step(rng.uniform(0, 512, 2))
        world = env.unwrapped
        contacts = []
        world.block.each_arbiter(lambda arbiter: contacts.extend(arbiter.contact_point_set.points))
        origin = world.block.local_to_world((0, 0))
        print(
            json.dumps(
                {
                    "pusher": list(world.agent.position),
                    "block": [origin.x, origin.y, world.block.angle],
                    "contacts": len(contacts),
                    "frame": np.ascontiguousarray(obs["pixels"], dtype=np.uint8).tobytes().hex(),
                }
            )
        )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        scenes, size = int(sys.argv[1]), int(sys.argv[2])
    except ValueError:
        sys.exit(f"error: SCENES and SIZE must be whole numbers, got {sys.argv[1:]}\n{__doc__}")
    if scenes < 1 or not 1 <= size <= 512:
        sys.exit(f"error: SCENES must be at least 1 and SIZE in [1, 512], got {scenes} and {size}")
    main(scenes, size)
