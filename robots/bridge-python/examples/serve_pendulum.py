"""Serves gymnasium's Pendulum-v1 (image from render(), 1-D torque) as an imago robot.

    pip install ./robots/bridge-python "gymnasium[classic-control]"
    python robots/bridge-python/examples/serve_pendulum.py --key imago/robots/pendulum

then run `imago daemon` with `robot = "remote"` and this key (docs/bridge.md).
"""

import argparse

import gymnasium

from imago_bridge import serve

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--key", default="imago/robots/pendulum")
parser.add_argument("--listen", action="append", default=[], help="zenoh endpoint, e.g. tcp/0.0.0.0:7447")
parser.add_argument("--connect", action="append", default=[], help="zenoh endpoint of a peer or router")
parser.add_argument("--max-steps", type=int, default=100)
parser.add_argument("--control-hz", type=float, default=20.0)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--deflate", action="store_true", help="send frames deflated")
args = parser.parse_args()

env = gymnasium.make("Pendulum-v1", render_mode="rgb_array", max_episode_steps=args.max_steps)
serve(
    env,
    key=args.key,
    listen=args.listen,
    connect=args.connect,
    deflate=args.deflate,
    name="pendulum",
    instruction="reach the target",
    image_size=args.image_size,
    control_hz=args.control_hz,
    max_steps=args.max_steps,
    proprio_names=["cos_theta", "sin_theta", "theta_vel"],
)
