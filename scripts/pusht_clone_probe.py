#!/usr/bin/env python3
"""How fast can a small network clone imago's PushT demonstrations? A PyTorch probe,
outside imago, that trains a multilayer perceptron on a replay exported as a LeRobot
dataset and runs it closed loop in gym-pusht 0.1.8 (docs/pusht.md, "How hard the
scripted expert is to clone"):

    imago collect --robot pusht --episodes 300 --mistake-rate 0 --out r
    imago export lerobot --replay r --out ds
    python scripts/pusht_clone_probe.py ds --seconds 300 [--head mse|flow] [--relative]

Input: the last `--observations` proprioceptions (pusher and block position, the
angle's cosine and sine), min-max scaled to [-1, 1]; output: the next `--horizon`
pusher targets (relative to the pusher with `--relative`), of which `--execute` run
before the next prediction. `mse` regresses the chunk; `flow` is a flow-matching head
(Euler steps from noise). Trained for a wall-clock budget with a cosine-decayed AdamW;
prints the fit (pixel error of each predicted step on the training data) and one JSON
line with the closed-loop success rate and mean max coverage (gym-pusht's definitions).
Needs torch, pyarrow, gymnasium and gym-pusht in one Python.
"""

import argparse
import json
import math
import time
from pathlib import Path

import gymnasium as gym
import gym_pusht  # noqa: F401  (registers the environment)
import numpy as np
import pyarrow.parquet as pq
import torch
from torch import nn


def windows(episode, steps_back, steps_ahead):
    """Per frame, the indices of its observation history and of its action chunk,
    repeating an episode's first and last frames at its edges."""
    first, last = {}, {}
    for i, e in enumerate(episode):
        first.setdefault(e, i)
        last[e] = i
    obs = [[max(first[e], i - k) for k in range(steps_back - 1, -1, -1)] for i, e in enumerate(episode)]
    act = [[min(last[e], i + k) for k in range(steps_ahead)] for i, e in enumerate(episode)]
    return np.array(obs), np.array(act)


def features(state):
    """pusher x, y, block x, y, cos, sin of imago's pusht proprioception."""
    return np.concatenate([state[..., 0:4], state[..., 5:7]], -1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", type=Path)
    p.add_argument("--head", choices=["mse", "flow"], default="mse")
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--observations", type=int, default=2)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--execute", type=int, default=8)
    p.add_argument("--relative", action="store_true")
    p.add_argument("--flow-steps", type=int, default=10)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="training seed")
    p.add_argument("--eval-seed", type=int, default=1000, help="gym-pusht seed of the first episode")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    table = pq.read_table(a.dataset / "data/chunk-000/file-000.parquet",
                          columns=["observation.state", "action", "episode_index"])
    state = np.array(table["observation.state"].to_pylist(), np.float32)
    action = np.array(table["action"].to_pylist(), np.float32)
    obs_idx, act_idx = windows(np.array(table["episode_index"]), a.observations, a.horizon)
    x = features(state)
    chunks = action[act_idx] - (state[:, None, 0:2] if a.relative else 0)
    x_lo, x_hi = x.min(0), x.max(0)
    y_lo, y_hi = chunks.reshape(-1, 2).min(0), chunks.reshape(-1, 2).max(0)
    scale_x = lambda v: 2 * (v - x_lo) / (x_hi - x_lo) - 1
    scale_y = lambda v: 2 * (v - y_lo) / (y_hi - y_lo) - 1
    unscale_y = lambda v: (v + 1) / 2 * (y_hi - y_lo) + y_lo
    inputs = torch.tensor(scale_x(x))[obs_idx].reshape(len(x), -1)
    targets = torch.tensor(scale_y(chunks)).reshape(len(x), -1)
    d_in, d_out = inputs.shape[1], targets.shape[1]

    def mlp(i, o):
        layers, d = [], i
        for _ in range(a.depth):
            layers += [nn.Linear(d, a.width), nn.Mish()]
            d = a.width
        return nn.Sequential(*layers, nn.Linear(d, o))

    if a.head == "mse":
        net = mlp(d_in, d_out)
        loss_of = lambda o, y: ((net(o) - y) ** 2).mean()

        def predict(o):
            return net(o)
    else:
        net = mlp(d_in + d_out + 1, d_out)

        def loss_of(o, y):
            noise, t = torch.randn_like(y), torch.rand(len(y), 1)
            return ((net(torch.cat([o, (1 - t) * noise + t * y, t], 1)) - (y - noise)) ** 2).mean()

        def predict(o):
            y = torch.randn(len(o), d_out)
            for j in range(a.flow_steps):
                t = torch.full((len(o), 1), j / a.flow_steps)
                y = y + net(torch.cat([o, y, t], 1)) / a.flow_steps
            return y

    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=1e-6)
    start, steps = time.time(), 0
    while (elapsed := time.time() - start) < a.seconds:
        for g in opt.param_groups:
            g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * elapsed / a.seconds))
        batch = torch.randint(0, len(x), (a.batch,))
        loss = loss_of(inputs[batch], targets[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    net.eval()
    with torch.no_grad():
        every = torch.arange(0, len(x), 7)
        shape = (len(every), a.horizon, 2)
        error = np.linalg.norm(unscale_y(predict(inputs[every]).reshape(shape).numpy())
                               - unscale_y(targets[every].reshape(shape).numpy()), axis=-1) * 256
    print("fit, pixels per predicted step (median):", np.round(np.median(error, 0), 1))

    env = gym.make("gym_pusht/PushT-v0", obs_type="state", max_episode_steps=300)

    def proprio(s):
        return np.array([s[0] / 256 - 1, s[1] / 256 - 1, s[2] / 256 - 1, s[3] / 256 - 1,
                         math.cos(s[4]), math.sin(s[4])], np.float32)

    successes, coverage = [], []
    for episode in range(a.episodes):
        raw, _ = env.reset(seed=a.eval_seed + episode)
        history, queue, best, success = [proprio(raw)] * a.observations, [], 0.0, False
        while True:
            if not queue:
                o = torch.tensor(scale_x(np.stack(history[-a.observations:]))).reshape(1, -1)
                with torch.no_grad():
                    chunk = unscale_y(predict(o).reshape(a.horizon, 2).numpy())
                queue = list(chunk[: a.execute] + (history[-1][0:2] if a.relative else 0))
            raw, _, terminated, truncated, info = env.step(((queue.pop(0) + 1) * 256).astype(np.float64))
            history.append(proprio(raw))
            best = max(best, min(info["coverage"] / 0.95, 1.0))
            success = success or bool(info["is_success"])
            if terminated or truncated:
                break
        successes.append(success)
        coverage.append(best)
    print(json.dumps({**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                      "steps": steps, "success": float(np.mean(successes)),
                      "mean_max_coverage": float(np.mean(coverage))}))


if __name__ == "__main__":
    main()
