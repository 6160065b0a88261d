"""Serving a robot driver on imago's bridge: the spec queryable, the liveliness
token, commands in, observations out (docs/bridge.md, "Keys").

A driver is any object with:
- `spec() -> Spec`;
- `reset(seed) -> Observed` (start an episode; a real robot reports where it is);
- `step(action) -> (Observed, Outcome)` (execute one command for one tick);
- `hold()` (hold still: the daemon had no fresh observation or lost the link).
"""

import json
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import zenoh

from .wire import ACT, HOLD, RESET, Command, ProtocolError, encode_observation


@dataclass
class Observed:
    """One observation: proprioception, an optional RGB frame (width, height, bytes),
    and the episode's instruction."""

    proprio: Sequence[float]
    frame: Optional[Tuple[int, int, bytes]]
    instruction: str


def open_session(listen: Sequence[str] = (), connect: Sequence[str] = ()) -> "zenoh.Session":
    """A zenoh peer session; without endpoints, peers find each other by multicast."""
    config = zenoh.Config()
    config.insert_json5("mode", '"peer"')
    if listen:
        config.insert_json5("listen/endpoints", json.dumps(list(listen)))
    if connect:
        config.insert_json5("connect/endpoints", json.dumps(list(connect)))
    if listen or connect:
        config.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(config)


class RobotServer:
    """Serves `driver` at `key` until `stop()` (or SIGINT/SIGTERM in `run`)."""

    def __init__(self, driver, key: str, listen=(), connect=(), deflate: bool = False):
        self.driver = driver
        self.key = key
        self.deflate = deflate
        self.session = open_session(listen, connect)
        self.commands: "queue.Queue[bytes]" = queue.Queue(maxsize=256)
        self.stopping = threading.Event()
        self.counts = {"resets": 0, "steps": 0, "holds": 0, "stale": 0, "unreadable": 0, "without_episode": 0}
        spec_bytes = driver.spec().encode()
        spec_key = f"{key}/spec"
        self._queryable = self.session.declare_queryable(
            spec_key, lambda query: query.reply(spec_key, spec_bytes)
        )
        self._publisher = self.session.declare_publisher(f"{key}/observation", express=True)
        self._subscriber = self.session.declare_subscriber(f"{key}/command", self._on_command)
        self._token = self.session.liveliness().declare_token(f"{key}/alive")
        self.seq = 0

    def _on_command(self, sample):
        try:
            self.commands.put_nowait(bytes(sample.payload.to_bytes()))
        except queue.Full:
            pass

    def _publish(self, reply_to: int, observed: Observed, outcome=None):
        message = encode_observation(
            self.seq,
            reply_to,
            observed.proprio,
            observed.instruction,
            observed.frame,
            outcome,
            self.deflate,
        )
        self.seq += 1
        self._publisher.put(message)

    def stop(self):
        self.stopping.set()

    def serve(self):
        """Answers commands until `stop()`; returns the counts."""
        running = False
        while not self.stopping.is_set():
            try:
                data = self.commands.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                command = Command.decode(data)
            except ProtocolError as error:
                if self.counts["unreadable"] == 0:
                    print(f"imago_bridge: ignored a command: {error}", file=sys.stderr)
                self.counts["unreadable"] += 1
                continue
            if time.time_ns() > command.deadline_unix_ns:
                self.counts["stale"] += 1
                continue
            if command.kind == RESET:
                self.counts["resets"] += 1
                running = True
                self._publish(command.tick, self.driver.reset(command.seed))
            elif command.kind == ACT:
                if not running:
                    self.counts["without_episode"] += 1
                    continue
                self.counts["steps"] += 1
                observed, outcome = self.driver.step(command.action)
                running = not outcome.done
                self._publish(command.tick, observed, outcome)
            elif command.kind == HOLD:
                self.counts["holds"] += 1
                running = False
                self.driver.hold()
        return dict(self.counts)

    def run(self):
        """`serve()` until SIGINT or SIGTERM, then closes the session."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: self.stop())
        print(f"imago_bridge: serving {self.driver.spec().name} at {self.key}", flush=True)
        try:
            counts = self.serve()
        finally:
            self.close()
        print(f"imago_bridge: stopped: {counts}", flush=True)
        return counts

    def close(self):
        self._token.undeclare()
        self.session.close()
