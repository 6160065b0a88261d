"""Times a LeRobot policy directory with LeRobot itself, on the same kind of inputs
`imago bench --policy DIR` times imago's burn model on (random, in the policy's shapes),
so that the two tables compare (docs/performance.md):

    python scripts/lerobot_policy_speed.py DIR [--steps 30] [--train-steps 3] [--batch-size 64] [--threads N]

Timed at the network, as imago's: batch-1 inference of one chunk (Diffusion Policy:
`DiffusionModel.generate_actions` with its configured sampler and with DDIM in 10 steps;
ACT: `ACT.forward` in eval mode), and one training step (the policy's `forward` loss,
backward, AdamW step, zero_grad) at the batch size. PyTorch eager, on the CPU unless
`--device cuda`. Needs `pip install lerobot` (0.4.4 on Python 3.11).
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from diffusers import DDIMScheduler

from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy


def timed(calls, warm_up, call, device):
    for _ in range(warm_up):
        call()
    times = []
    for _ in range(calls):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]


def random_inputs(config, batch, steps, device):
    """Random inputs of the policy's shapes: `steps` observation steps (None: no axis)."""
    lead = (batch,) if steps is None else (batch, steps)
    out = {}
    for key, feature in config.input_features.items():
        shape = lead + tuple(feature.shape)
        out[key] = torch.rand(shape, device=device) if key.startswith("observation.image") else torch.randn(shape, device=device)
    return out


def diffusion_rows(policy, args):
    config, model, device = policy.config, policy.diffusion, args.device
    rows = []
    batch = random_inputs(config, 1, config.n_obs_steps, device)
    if config.image_features:
        batch["observation.images"] = torch.stack([batch[k] for k in config.image_features], dim=-4)
    steps = config.num_inference_steps or config.num_train_timesteps
    with torch.no_grad():
        p50, p99 = timed(args.steps, 1, lambda: model.generate_actions(batch), device)
    rows.append((f"inference, {config.noise_scheduler_type} {steps} steps (one chunk)", 1, p50, p99))
    scheduler, model.noise_scheduler = model.noise_scheduler, DDIMScheduler.from_config(model.noise_scheduler.config)
    inference_steps, model.num_inference_steps = model.num_inference_steps, 10
    with torch.no_grad():
        p50, p99 = timed(args.steps, 1, lambda: model.generate_actions(batch), device)
    model.noise_scheduler, model.num_inference_steps = scheduler, inference_steps
    rows.append(("inference, DDIM 10 steps (one chunk)", 1, p50, p99))
    train = random_inputs(config, args.batch_size, config.n_obs_steps, device)
    train["action"] = torch.rand(args.batch_size, config.horizon, config.action_feature.shape[0], device=device)
    train["action_is_pad"] = torch.zeros(args.batch_size, config.horizon, dtype=torch.bool, device=device)
    rows.append(training_row(policy, train, args))
    return rows


def act_rows(policy, args):
    config, device = policy.config, args.device
    batch = random_inputs(config, 1, None, device)
    if config.image_features:
        batch["observation.images"] = [batch[k] for k in config.image_features]
    policy.eval()
    with torch.no_grad():
        p50, p99 = timed(args.steps, 1, lambda: policy.model(batch), device)
    rows = [("inference (one chunk)", 1, p50, p99)]
    train = random_inputs(config, args.batch_size, None, device)
    train["action"] = torch.randn(args.batch_size, config.chunk_size, config.action_feature.shape[0], device=device)
    train["action_is_pad"] = torch.zeros(args.batch_size, config.chunk_size, dtype=torch.bool, device=device)
    rows.append(training_row(policy, train, args))
    return rows


def training_row(policy, batch, args):
    policy.train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)

    def step():
        loss, _ = policy.forward(dict(batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    p50, p99 = timed(args.train_steps, 1, step, args.device)
    policy.eval()
    return ("training step (loss, backward, AdamW)", args.batch_size, p50, p99)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kind = json.loads((args.policy / "config.json").read_text())["type"]
    cls = {"act": ACTPolicy, "diffusion": DiffusionPolicy}[kind]
    policy = cls.from_pretrained(str(args.policy)).to(args.device).eval()
    rows = (diffusion_rows if kind == "diffusion" else act_rows)(policy, args)
    import lerobot

    print(f"{args.policy} with lerobot {lerobot.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads, {args.device})")
    print(f"{'what':<44} {'batch':>6} {'p50 ms':>12} {'p99 ms':>12}")
    for what, batch, p50, p99 in rows:
        print(f"{what:<44} {batch:>6} {p50:>12.1f} {p99:>12.1f}")
    if args.report:
        keys = ("what", "batch", "p50_ms", "p99_ms")
        args.report.write_text(json.dumps([dict(zip(keys, row)) for row in rows], indent=1) + "\n")


if __name__ == "__main__":
    main()
