"""Records a small dataset with LeRobot's own writer (`LeRobotDataset.create`,
`add_frame`, `save_episode`, `finalize`): the v3.0 layout exactly as LeRobot writes it,
camera frames as AV1 video (LeRobot's default, libsvtav1) or as PNG images.

    HF_HUB_OFFLINE=1 python scripts/lerobot-record.py OUT [--images]

Each episode is a pointer moving towards a target on a 64x64 frame; task
"push the block onto the target". Needs `pip install lerobot`; tests/datasets.rs runs
it when IMAGO_LEROBOT_PYTHON names such a Python, then imports the result.
"""

import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

out = sys.argv[1]
kind = "image" if "--images" in sys.argv else "video"
features = {
    "observation.state": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
    "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
    "observation.images.top": {"dtype": kind, "shape": (64, 64, 3), "names": ["height", "width", "channels"]},
    "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    "next.success": {"dtype": "bool", "shape": (1,), "names": None},
}
dataset = LeRobotDataset.create("imago/recorded", fps=10, features=features, root=out, robot_type="pointer")
rng = np.random.default_rng(0)
for episode in range(3):
    start, goal = rng.uniform(8, 56, 2), rng.uniform(8, 56, 2)
    length = 20 + 5 * episode
    for t in range(length):
        here = start + (goal - start) * t / length
        frame = np.full((64, 64, 3), (40, 60, 90), dtype=np.uint8)
        x, y = here.astype(int)
        frame[max(y - 4, 0) : y + 4, max(x - 4, 0) : x + 4] = (220, 40, 40)
        dataset.add_frame({
            "observation.state": here.astype(np.float32),
            "action": (start + (goal - start) * (t + 1) / length).astype(np.float32),
            "observation.images.top": frame,
            "next.reward": np.array([t / length], dtype=np.float32),
            "next.success": np.array([t == length - 1]),
            "task": "push the block onto the target",
        })
    dataset.save_episode()
dataset.finalize()
print(f"recorded {dataset.num_episodes} episodes, {dataset.num_frames} frames ({kind}) in {out}")
