"""Loads a dataset written by `imago export lerobot` with LeRobot's own LeRobotDataset
and iterates every frame: the check that LeRobot reads what imago writes.

    HF_HUB_OFFLINE=1 python scripts/lerobot-check.py DATASET

Needs `pip install lerobot` (it pins torch, so a virtual environment of its own is
advised); tests/datasets.rs runs it when IMAGO_LEROBOT_PYTHON names such a Python.
"""

import sys

from lerobot.datasets.lerobot_dataset import LeRobotDataset

root = sys.argv[1]
dataset = LeRobotDataset("imago/export", root=root)
first = dataset[0]
assert first["observation.image"].shape[0] == 3, first["observation.image"].shape
frames = sum(1 for _ in dataset)
assert frames == dataset.num_frames, (frames, dataset.num_frames)
tasks = {dataset[i]["task"] for i in range(len(dataset))}
print(f"LeRobotDataset: {dataset.num_episodes} episodes, {frames} frames at {dataset.fps} fps, tasks {sorted(tasks)}")
