"""imago's bridge protocol (docs/bridge.md) in Python: postcard encoding of the
messages runtime/src/bridge/protocol.rs defines, field for field.

postcard: unsigned integers are LEB128 varints, f32 is 4 little-endian bytes, bool is
one byte, strings and byte strings are a varint length then the bytes, a sequence is
a varint length then its items, an Option is a 0/1 byte then the value, an enum is a
varint variant index then the variant's fields, a struct is its fields in order.
"""

import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

PROTOCOL_VERSION = 1

# FrameEncoding
RAW, DEFLATE = 0, 1
# SafetyVerdict (Held carries a HoldReason and is never sent from Python)
PASSED, LIMITED = 0, 1
# CommandKind
RESET, ACT, HOLD = 0, 1, 2


class ProtocolError(Exception):
    """A message of another protocol version, or bytes that are not a message."""


class Writer:
    def __init__(self):
        self.out = bytearray()

    def varint(self, value: int):
        value = int(value)
        if value < 0:
            raise ValueError(f"varint of a negative number {value}")
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                self.out.append(byte | 0x80)
            else:
                self.out.append(byte)
                return self

    def f32(self, value: float):
        self.out += struct.pack("<f", float(value))
        return self

    def boolean(self, value: bool):
        self.out.append(1 if value else 0)
        return self

    def raw(self, data: bytes):
        self.varint(len(data))
        self.out += data
        return self

    def string(self, text: str):
        return self.raw(text.encode("utf-8"))

    def f32s(self, values):
        values = [float(v) for v in values]
        self.varint(len(values))
        self.out += struct.pack(f"<{len(values)}f", *values)
        return self

    def option(self, value, write):
        if value is None:
            self.out.append(0)
        else:
            self.out.append(1)
            write(value)
        return self


class Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise ProtocolError("message ends early")
        value = self.data[self.at]
        self.at += 1
        return value

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 70:
                raise ProtocolError("varint too long")

    def f32(self) -> float:
        if self.at + 4 > len(self.data):
            raise ProtocolError("message ends early")
        (value,) = struct.unpack_from("<f", self.data, self.at)
        self.at += 4
        return value

    def boolean(self) -> bool:
        value = self.byte()
        if value > 1:
            raise ProtocolError(f"bool byte {value}")
        return value == 1

    def raw(self) -> bytes:
        n = self.varint()
        if self.at + n > len(self.data):
            raise ProtocolError("message ends early")
        value = bytes(self.data[self.at : self.at + n])
        self.at += n
        return value

    def string(self) -> str:
        return self.raw().decode("utf-8")

    def f32s(self) -> List[float]:
        n = self.varint()
        if self.at + 4 * n > len(self.data):
            raise ProtocolError("message ends early")
        values = list(struct.unpack_from(f"<{n}f", self.data, self.at))
        self.at += 4 * n
        return values

    def option(self, read):
        tag = self.byte()
        if tag > 1:
            raise ProtocolError(f"option tag {tag}")
        return read() if tag else None

    def done(self):
        if self.at != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.at} bytes after the message")


def check_version(reader: Reader):
    version = reader.varint()
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"the peer speaks imago bridge protocol version {version}, this adapter "
            f"speaks version {PROTOCOL_VERSION}: run the same imago release on both sides"
        )


@dataclass
class Spec:
    """A robot's spec (imago's RobotSpec)."""

    name: str
    proprio_names: List[str]
    action_limit: List[float]
    control_hz: float
    max_steps: int
    camera: Optional[Tuple[int, int]] = None
    action_origin: Optional[List[int]] = None
    settings_json: str = "{}"

    def encode(self) -> bytes:
        w = Writer().varint(PROTOCOL_VERSION).string(self.name)
        w.varint(len(self.proprio_names))
        for name in self.proprio_names:
            w.string(name)
        w.f32s(self.action_limit).f32(self.control_hz).varint(self.max_steps)
        w.option(self.camera, lambda c: w.varint(c[0]).varint(c[1]))
        w.option(
            self.action_origin,
            lambda o: [w.varint(len(o))] + [w.varint(i) for i in o],
        )
        w.string(self.settings_json)
        return bytes(w.out)


@dataclass
class Command:
    """A command from the daemon."""

    tick: int
    episode: int
    policy_version: int
    deadline_unix_ns: int
    kind: int
    seed: int = 0
    action: List[float] = field(default_factory=list)
    chunk: List[float] = field(default_factory=list)

    @staticmethod
    def decode(data: bytes) -> "Command":
        r = Reader(data)
        check_version(r)
        tick, episode, version, deadline = r.varint(), r.varint(), r.varint(), r.varint()
        kind = r.varint()
        command = Command(tick, episode, version, deadline, kind)
        if kind == RESET:
            command.seed = r.varint()
        elif kind == ACT:
            command.action = r.f32s()
            command.chunk = r.f32s()
        elif kind != HOLD:
            raise ProtocolError(f"unknown command kind {kind}")
        r.done()
        return command

    def encode(self) -> bytes:
        w = Writer().varint(PROTOCOL_VERSION).varint(self.tick).varint(self.episode)
        w.varint(self.policy_version).varint(self.deadline_unix_ns).varint(self.kind)
        if self.kind == RESET:
            w.varint(self.seed)
        elif self.kind == ACT:
            w.f32s(self.action).f32s(self.chunk)
        return bytes(w.out)


@dataclass
class Outcome:
    """What a step led to."""

    reward: float
    done: bool
    success: bool
    truncated: bool
    executed: List[float]
    limited: bool = False
    distance_to_goal: float = float("nan")
    coverage: Optional[float] = None


def encode_observation(
    seq: int,
    reply_to: int,
    proprio,
    instruction: str,
    frame: Optional[Tuple[int, int, bytes]] = None,
    outcome: Optional[Outcome] = None,
    deflate: bool = False,
) -> bytes:
    """An ObservationMessage. `frame` is (width, height, RGB bytes)."""
    w = Writer().varint(PROTOCOL_VERSION).varint(seq).varint(reply_to)
    w.varint(time.time_ns())

    def write_frame(f):
        width, height, rgb = f
        if len(rgb) != width * height * 3:
            raise ValueError(f"a {width}x{height} frame needs {width * height * 3} bytes, got {len(rgb)}")
        w.varint(width).varint(height)
        if deflate:
            w.varint(DEFLATE).raw(zlib.compress(rgb, 1))
        else:
            w.varint(RAW).raw(rgb)

    w.option(frame, write_frame)
    w.f32s(proprio).string(instruction)

    def write_outcome(o: Outcome):
        w.f32(o.reward).boolean(o.done).boolean(o.success).boolean(o.truncated)
        w.f32s(o.executed).varint(LIMITED if o.limited else PASSED)
        w.f32(o.distance_to_goal)
        w.option(o.coverage, w.f32)

    w.option(outcome, write_outcome)
    return bytes(w.out)
