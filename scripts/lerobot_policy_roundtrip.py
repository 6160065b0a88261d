"""Checks an `imago export policy --format lerobot` directory with LeRobot itself: LeRobot
loads it (`from_pretrained`, its processors from the directory) and gives the same
actions as the policy it came from, on the same raw observations:

    python scripts/lerobot_policy_roundtrip.py EXPORTED ORIGINAL [--ticks 12]

Needs `pip install lerobot` (0.4.4 on Python 3.11). Prints the largest action gap and
exits 1 above 1e-5 of the action's scale.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
from lerobot.processor import PolicyProcessorPipeline
from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action


def load(directory):
    kind = json.loads((directory / "config.json").read_text())["type"]
    policy = {"act": ACTPolicy, "diffusion": DiffusionPolicy}[kind].from_pretrained(str(directory)).eval()
    pre = PolicyProcessorPipeline.from_pretrained(str(directory), config_filename="policy_preprocessor.json")
    post = PolicyProcessorPipeline.from_pretrained(
        str(directory),
        config_filename="policy_postprocessor.json",
        to_transition=policy_action_to_transition,
        to_output=transition_to_policy_action,
    )
    return policy, pre, post


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exported", type=Path)
    parser.add_argument("original", type=Path)
    parser.add_argument("--ticks", type=int, default=12)
    args = parser.parse_args()
    runs = []
    for directory in (args.exported, args.original):
        policy, pre, post = load(directory)
        policy.reset()
        generator = torch.Generator().manual_seed(0)
        actions = []
        for tick in range(args.ticks):
            observation = {}
            for key, feature in policy.config.input_features.items():
                value = torch.rand(tuple(feature.shape), generator=generator)
                observation[key] = value if key.startswith("observation.image") else value * 480 + 16
            torch.manual_seed(1000 + tick)  # Diffusion's sampling noise, the same for both
            with torch.no_grad():
                actions.append(post(policy.select_action(pre(observation))))
        runs.append(torch.stack(actions))
    gap = (runs[0] - runs[1]).abs().max().item()
    scale = runs[1].abs().max().item()
    print(f"{args.exported} against {args.original}: {args.ticks} ticks, largest action gap {gap:.3g} (actions up to {scale:.3g})")
    sys.exit(0 if gap <= 1e-5 * max(scale, 1.0) else 1)


if __name__ == "__main__":
    main()
