"""A stand-in for a LeRobot arm (the `Robot` API of SO-100/SO-101 and Koch:
`connect`, `get_observation`, `send_action`, `observation_features`,
`action_features`), served as an imago robot. No hardware: the joints move a
fraction of the way to each target, and every sent action is appended to `--log` as
a JSON line, so a test can compare what the arm received with what imago recorded.

With a real arm, pass LeRobot's robot object instead:

    from lerobot.robots.so101_follower import SO101Follower, SO101FollowerConfig
    robot = SO101Follower(SO101FollowerConfig(port="/dev/ttyACM0", cameras={...}))
    serve_lerobot(robot, key="imago/robots/so101", instruction="pick up the cube")
"""

import argparse
import json

import numpy as np

from imago_bridge import serve_lerobot

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


class FakeArm:
    name = "fake_so101"

    def __init__(self, log_path=None):
        self.is_connected = False
        self.position = np.zeros(len(JOINTS))
        self.log = open(log_path, "a") if log_path else None

    @property
    def observation_features(self):
        features = {f"{joint}.pos": float for joint in JOINTS}
        features["front"] = (48, 64, 3)
        return features

    @property
    def action_features(self):
        return {f"{joint}.pos": float for joint in JOINTS}

    def connect(self, calibrate=True):
        self.is_connected = True

    def get_observation(self):
        observation = {f"{joint}.pos": float(p) for joint, p in zip(JOINTS, self.position)}
        image = np.zeros((48, 64, 3), dtype=np.uint8)
        column = int(np.clip(32 + self.position[0] * 0.3, 0, 63))
        image[:, column, 0] = 255
        observation["front"] = image
        return observation

    def send_action(self, action):
        target = np.array([action[f"{joint}.pos"] for joint in JOINTS])
        self.position += 0.5 * (target - self.position)
        if self.log:
            self.log.write(json.dumps([float(v) for v in target]) + "\n")
            self.log.flush()
        return action

    def disconnect(self):
        self.is_connected = False


parser = argparse.ArgumentParser(description="Serve a fake LeRobot arm to imago")
parser.add_argument("--key", default="imago/robots/fake-arm")
parser.add_argument("--listen", action="append", default=[])
parser.add_argument("--connect", action="append", default=[])
parser.add_argument("--log", help="append every sent action here as JSON lines")
parser.add_argument("--max-steps", type=int, default=40)
parser.add_argument("--fps", type=float, default=20.0)
args = parser.parse_args()

serve_lerobot(
    FakeArm(args.log),
    key=args.key,
    instruction="move the blue block",
    listen=args.listen,
    connect=args.connect,
    fps=args.fps,
    max_steps=args.max_steps,
    image_size=32,
)
