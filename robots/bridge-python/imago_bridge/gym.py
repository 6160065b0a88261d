"""Any gymnasium environment with a `Box` action space and an image (in the
observation, or from `render()` in rgb_array mode) as an imago robot."""

import json
from typing import Optional, Sequence

import numpy as np

from .frames import square_frame
from .server import Observed, RobotServer
from .wire import Outcome, Spec

IMAGE_KEYS = ("pixels", "image", "rgb", "top")
STATE_KEYS = ("agent_pos", "state", "proprio")


class GymnasiumRobot:
    """A driver (see `imago_bridge.server`) around a gymnasium environment.

    imago's actions are symmetric (|a_i| <= limit_i): a `Box(low, high)` is served
    with limit (high - low) / 2 around its centre (high + low) / 2.

    The instruction's words must be in the policy's vocabulary
    (policies/src/tokenizer.rs: reach, move, touch, push, block, target, ...); an
    unknown word stops the daemon's actor with an error naming it."""

    def __init__(
        self,
        env,
        name: Optional[str] = None,
        instruction: Optional[str] = None,
        image_size: int = 64,
        control_hz: Optional[float] = None,
        max_steps: Optional[int] = None,
        proprio_names: Optional[Sequence[str]] = None,
    ):
        import gymnasium

        space = env.action_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise TypeError(f"imago drives Box action spaces, this environment has {space}")
        self.env = env
        self.low = np.asarray(space.low, dtype=np.float64).reshape(-1)
        self.high = np.asarray(space.high, dtype=np.float64).reshape(-1)
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
            raise ValueError("the action space must be bounded")
        self.limit = (self.high - self.low) / 2.0
        self.centre = (self.high + self.low) / 2.0
        env_id = env.spec.id if env.spec is not None else type(env).__name__
        self.name = name or env_id
        self.instruction = instruction or "reach the target"
        self.image_size = image_size
        self.control_hz = control_hz or float(env.metadata.get("render_fps") or 20)
        limit = max_steps or (env.spec.max_episode_steps if env.spec is not None else None)
        self.max_steps = int(limit or 200)
        self.steps = 0
        first, _ = env.reset(seed=0)
        proprio, _ = self._split(first)
        self.proprio_names = list(proprio_names or [f"obs_{i}" for i in range(len(proprio))])
        if len(self.proprio_names) != len(proprio):
            raise ValueError(
                f"{len(self.proprio_names)} proprio_names for {len(proprio)} observation entries"
            )

    def spec(self) -> Spec:
        return Spec(
            name=self.name,
            proprio_names=self.proprio_names,
            action_limit=[float(v) for v in self.limit],
            control_hz=float(self.control_hz),
            max_steps=self.max_steps,
            camera=(self.image_size, self.image_size),
            settings_json=json.dumps({"gymnasium": self.name, "image_size": self.image_size}),
        )

    def _split(self, obs):
        """(proprio, image or None) of a gymnasium observation."""
        if isinstance(obs, dict):
            image_key = next((k for k in IMAGE_KEYS if k in obs), None)
            state_key = next((k for k in STATE_KEYS if k in obs), None)
            if state_key is not None:
                state = np.asarray(obs[state_key], dtype=np.float32).reshape(-1)
            else:
                parts = [np.asarray(v, dtype=np.float32).reshape(-1) for k, v in obs.items() if k != image_key]
                state = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            return state, (obs[image_key] if image_key is not None else None)
        return np.asarray(obs, dtype=np.float32).reshape(-1), None

    def _observed(self, obs) -> Observed:
        proprio, image = self._split(obs)
        if image is None:
            image = self.env.render()
            if image is None:
                raise RuntimeError("the environment has no image: make it with render_mode='rgb_array'")
        return Observed([float(v) for v in proprio], square_frame(image, self.image_size), self.instruction)

    def reset(self, seed: int) -> Observed:
        self.steps = 0
        obs, _ = self.env.reset(seed=int(seed) % (2**32))
        return self._observed(obs)

    def step(self, action):
        command = np.asarray(action, dtype=np.float64).reshape(-1)
        if command.shape != self.limit.shape or not np.all(np.isfinite(command)):
            command = np.zeros_like(self.limit)
        executed = np.clip(command, -self.limit, self.limit)
        obs, reward, terminated, truncated, info = self.env.step(
            (self.centre + executed).astype(self.env.action_space.dtype)
        )
        self.steps += 1
        success = bool(info.get("is_success", False))
        truncated = bool(truncated) or self.steps >= self.max_steps
        outcome = Outcome(
            reward=float(reward),
            done=bool(terminated) or truncated or success,
            success=success,
            truncated=truncated and not success and not terminated,
            executed=[float(v) for v in executed],
            limited=bool(np.any(executed != command)),
        )
        return self._observed(obs), outcome

    def hold(self):
        """A simulation holding still does not advance."""


def serve(env, key: str, listen=(), connect=(), deflate: bool = False, **robot):
    """Serves the gymnasium environment `env` at `key` until SIGINT/SIGTERM;
    `robot` goes to `GymnasiumRobot` (name, instruction, image_size, control_hz,
    max_steps, proprio_names)."""
    return RobotServer(GymnasiumRobot(env, **robot), key, listen, connect, deflate).run()
