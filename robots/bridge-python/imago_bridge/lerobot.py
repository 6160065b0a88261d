"""A LeRobot robot (SO-100/SO-101, Koch, ...: anything with LeRobot's `Robot` API,
`connect()`, `get_observation()`, `send_action()`, `observation_features`,
`action_features`) as an imago robot, through LeRobot's own drivers.

Motor entries (features of type float) become proprioception, one camera becomes
the frame, and the action features become the action, in LeRobot's units. When an
action name is also an observation name (`shoulder_pan.pos`), imago predicts that
action relative to where the joint is (the spec's `action_origin`).
"""

import json
from typing import Optional, Sequence, Tuple

import numpy as np

from .frames import square_frame
from .server import Observed, RobotServer
from .wire import Outcome, Spec


class LeRobotRobot:
    """A driver (see `imago_bridge.server`) around a LeRobot robot object.

    `action_range` is the (low, high) of every action entry in LeRobot's units
    (its motors' default normalisation is [-100, 100]); imago's symmetric actions are
    served around its centre. A reset does not move the arm: a person (or a
    scripted routine of yours) resets the scene, and the episode starts from where
    the robot is. An episode ends after `max_steps`."""

    def __init__(
        self,
        robot,
        instruction: str,
        fps: float = 30.0,
        max_steps: int = 300,
        camera: Optional[str] = None,
        image_size: int = 96,
        action_range: Tuple[float, float] = (-100.0, 100.0),
        name: Optional[str] = None,
    ):
        self.robot = robot
        if not getattr(robot, "is_connected", False):
            robot.connect()
        features = dict(robot.observation_features)
        self.proprio_names = [k for k, v in features.items() if v is float]
        cameras = [k for k, v in features.items() if isinstance(v, tuple) and len(v) == 3]
        if camera is not None and camera not in cameras:
            raise ValueError(f"camera {camera!r} is not among the robot's cameras {cameras}")
        self.camera = camera or (cameras[0] if cameras else None)
        self.action_names = list(robot.action_features)
        low, high = action_range
        self.centre = (high + low) / 2.0
        self.limit = (high - low) / 2.0
        self.instruction = instruction
        self.fps = float(fps)
        self.max_steps = int(max_steps)
        self.image_size = image_size
        self.name = name or getattr(robot, "name", type(robot).__name__)
        self.steps = 0
        self.last = None

    def spec(self) -> Spec:
        origin = None
        if all(name in self.proprio_names for name in self.action_names) and self.centre == 0.0:
            origin = [self.proprio_names.index(name) for name in self.action_names]
        return Spec(
            name=self.name,
            proprio_names=self.proprio_names,
            action_limit=[self.limit] * len(self.action_names),
            control_hz=self.fps,
            max_steps=self.max_steps,
            camera=(self.image_size, self.image_size) if self.camera else None,
            action_origin=origin,
            settings_json=json.dumps({"lerobot": self.name, "camera": self.camera}),
        )

    def _observe(self) -> Observed:
        observation = self.robot.get_observation()
        self.last = observation
        proprio = [float(observation[name]) for name in self.proprio_names]
        frame = square_frame(observation[self.camera], self.image_size) if self.camera else None
        return Observed(proprio, frame, self.instruction)

    def reset(self, seed: int) -> Observed:
        self.steps = 0
        return self._observe()

    def step(self, action: Sequence[float]):
        command = np.clip(np.asarray(action, dtype=np.float64), -self.limit, self.limit)
        sent = self.robot.send_action(
            {name: float(self.centre + value) for name, value in zip(self.action_names, command)}
        )
        sent = sent if isinstance(sent, dict) else {}
        executed = [float(sent.get(name, self.centre + value)) - self.centre for name, value in zip(self.action_names, command)]
        self.steps += 1
        done = self.steps >= self.max_steps
        outcome = Outcome(
            reward=0.0,
            done=done,
            success=False,
            truncated=done,
            executed=executed,
            limited=any(abs(e - c) > 1e-6 for e, c in zip(executed, command)),
        )
        return self._observe(), outcome

    def hold(self):
        """Commands every position the arm reports: it stays where it is."""
        observation = self.last or self.robot.get_observation()
        hold = {name: observation[name] for name in self.action_names if name in observation}
        if hold:
            self.robot.send_action(hold)


def serve_lerobot(robot, key: str, instruction: str, listen=(), connect=(), deflate: bool = False, **options):
    """Serves the LeRobot robot `robot` at `key` until SIGINT/SIGTERM; `options` go
    to `LeRobotRobot` (fps, max_steps, camera, image_size, action_range, name)."""
    return RobotServer(LeRobotRobot(robot, instruction, **options), key, listen, connect, deflate).run()
