"""Serve robots to imago over its zenoh bridge (docs/bridge.md).

- `serve(env, key=...)`: a gymnasium environment with a Box action space and an
  image observation (or `render()` in rgb_array mode);
- `serve_lerobot(robot, key=..., instruction=...)`: a LeRobot robot object;
- `RobotServer(driver, key)`: any driver with `spec`, `reset`, `step`, `hold`.
"""

from .gym import GymnasiumRobot, serve
from .lerobot import LeRobotRobot, serve_lerobot
from .server import Observed, RobotServer
from .wire import PROTOCOL_VERSION, Outcome, ProtocolError, Spec

__all__ = [
    "GymnasiumRobot",
    "LeRobotRobot",
    "Observed",
    "Outcome",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "RobotServer",
    "Spec",
    "serve",
    "serve_lerobot",
]
