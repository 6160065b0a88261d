#!/usr/bin/env python3
"""Serves gym-pusht 0.1.8 itself as imago's pusht robot over the bridge, so that
`imago eval --remote` runs any imago PushT policy closed loop in gym-pusht.

    python scripts/pusht_gym_serve.py --listen tcp/127.0.0.1:7447 &
    imago eval --remote examples/gym-pusht-remote.toml --ckpt CKPT --episodes 100

The robot answers with imago's pusht spec (the same name, proprioception, action
limits, rate, step limit and 96x96 camera), so a checkpoint trained on imago's pusht
loads as it is:
- proprioception: gym-pusht's pusher and block positions in imago's normalised units
  (`x / 256 - 1`), the block's angle as gym-pusht reports it (modulo 2 pi) with its
  cosine and sine; `--observation vision`: the pusher's position only, as imago's
  vision setting;
- the frame: gym-pusht's own 96x96 `pixels` observation;
- an action: a pusher target in normalised units, sent to gym-pusht as
  `256 (1 + a)` pixels, unchanged otherwise (gym-pusht has no safety envelope);
- the outcome: gym-pusht's reward, `is_success` (coverage above 0.95, which ends the
  episode as gym-pusht does) and `coverage`; 300 steps at most.
Seeds go to gym-pusht's `reset(seed=...)`, so seed s gives gym-pusht's scene s, not
imago's. Needs `pip install gym-pusht==0.1.8 eclipse-zenoh==1.10.*` (the bridge's
Python package is read from robots/bridge-python in this checkout).
"""

import argparse
import json
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "robots" / "bridge-python"))

from imago_bridge import Observed, Outcome, RobotServer, Spec  # noqa: E402
from imago_bridge.frames import square_frame  # noqa: E402

HALF_WORLD = 256.0
INSTRUCTION = "push the block onto the target"
POSE = ["agent_x", "agent_y", "block_x", "block_y", "block_angle", "block_cos", "block_sin"]
IMAGE_SIZE = 96
MAX_STEPS = 300


class GymPushT:
    """A bridge driver (see `imago_bridge.server`) around gym-pusht's PushT-v0."""

    def __init__(self, observation: str):
        import gymnasium as gym
        import gym_pusht  # noqa: F401  (registers the environment)

        self.env = gym.make(
            "gym_pusht/PushT-v0",
            obs_type="pixels_agent_pos",
            render_mode="rgb_array",
            observation_width=IMAGE_SIZE,
            observation_height=IMAGE_SIZE,
        )
        self.observation = observation
        self.proprio_names = POSE if observation == "pose" else POSE[:2]
        self.steps = 0

    def spec(self) -> Spec:
        settings = {
            "pusht": {
                "image_size": IMAGE_SIZE,
                "max_steps": MAX_STEPS,
                "observation": self.observation,
            }
        }
        return Spec(
            name="pusht",
            proprio_names=self.proprio_names,
            action_limit=[1.0, 1.0],
            control_hz=10.0,
            max_steps=MAX_STEPS,
            camera=(IMAGE_SIZE, IMAGE_SIZE),
            action_origin=[0, 1],
            settings_json=json.dumps(settings),
        )

    def _observed(self, obs) -> Observed:
        world = self.env.unwrapped
        (ax, ay), (bx, by) = world.agent.position, world.block.position
        angle = world.block.angle % (2 * math.pi)
        proprio = [
            ax / HALF_WORLD - 1.0,
            ay / HALF_WORLD - 1.0,
            bx / HALF_WORLD - 1.0,
            by / HALF_WORLD - 1.0,
            angle,
            math.cos(angle),
            math.sin(angle),
        ][: len(self.proprio_names)]
        return Observed(proprio, square_frame(obs["pixels"], IMAGE_SIZE), INSTRUCTION)

    def reset(self, seed: int) -> Observed:
        self.steps = 0
        obs, _ = self.env.reset(seed=int(seed) % (2**32))
        return self._observed(obs)

    def step(self, action):
        command = np.asarray(action, dtype=np.float64).reshape(-1)
        if command.shape != (2,) or not np.all(np.isfinite(command)):
            command = np.zeros(2)
        executed = np.clip(command, -1.0, 1.0)
        obs, reward, terminated, _, info = self.env.step(HALF_WORLD * (1.0 + executed))
        self.steps += 1
        success = bool(info["is_success"])
        truncated = self.steps >= MAX_STEPS and not success
        outcome = Outcome(
            reward=float(reward),
            done=bool(terminated) or success or truncated,
            success=success,
            truncated=truncated,
            executed=[float(v) for v in executed],
            limited=bool(np.any(executed != command)),
            coverage=float(info["coverage"]),
        )
        return self._observed(obs), outcome

    def hold(self):
        """A simulation holding still does not advance."""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", default="imago/robots/gym-pusht")
    parser.add_argument("--listen", action="append", default=[], help="zenoh endpoint, e.g. tcp/127.0.0.1:7447")
    parser.add_argument("--connect", action="append", default=[], help="zenoh endpoint of a peer or router")
    parser.add_argument("--observation", choices=["pose", "vision"], default="pose")
    args = parser.parse_args()
    RobotServer(GymPushT(args.observation), args.key, args.listen, args.connect).run()


if __name__ == "__main__":
    main()
