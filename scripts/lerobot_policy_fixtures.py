"""Parity fixtures of LeRobot's policies for imago's tests (issue 39), made with
LeRobot's own code, so that CI checks imago against LeRobot without installing it.

    python scripts/lerobot_policy_fixtures.py OUT_DIR

Needs `pip install lerobot` (0.4.4 on Python 3.11; it pins torch and brings
`diffusers`): a virtual environment of its own is advised. What it writes:

- `schedules.json`: the noise schedule LeRobot's Diffusion Policy configures
  (`diffusers`' DDPMScheduler and DDIMScheduler with LeRobot's defaults), its
  cumulative alphas, DDIM's timesteps for 10 steps, and single reverse steps of both
  samplers on recorded inputs, with the noise DDPM drew (read by
  `policies/src/diffusion/scheduler.rs`'s parity test).
- `attention.safetensors` and `attention.json`: a seeded `nn.MultiheadAttention` (the
  module of every ACT encoder and decoder layer; packed `in_proj_weight`) and its
  outputs on recorded queries and keys, with and without a key padding mask (read by
  `policies/src/packed_attention.rs`'s parity test).

Every array is a flat list in row-major order beside its shape.
"""

import argparse
import json
from pathlib import Path

import torch
from diffusers import DDIMScheduler, DDPMScheduler
from safetensors.torch import save_file

from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig


def flat(tensor):
    return {"shape": list(tensor.shape), "values": tensor.flatten().tolist()}


def lerobot_schedule_config():
    """The scheduler settings of LeRobot's DiffusionConfig, as it passes them to diffusers."""
    config = DiffusionConfig()
    return {
        "num_train_timesteps": config.num_train_timesteps,
        "beta_start": config.beta_start,
        "beta_end": config.beta_end,
        "beta_schedule": config.beta_schedule,
        "clip_sample": config.clip_sample,
        "clip_sample_range": config.clip_sample_range,
        "prediction_type": config.prediction_type,
    }


def schedules():
    settings = lerobot_schedule_config()
    ddpm = DDPMScheduler(**settings)
    ddim = DDIMScheduler(**settings)
    generator = torch.Generator().manual_seed(0)
    shape = (2, 8, 2)
    sample = torch.randn(shape, generator=generator)
    model_output = torch.randn(shape, generator=generator)
    clean = torch.randn(shape, generator=generator).clamp(-1, 1)
    noise = torch.randn(shape, generator=generator)
    noised_at = torch.tensor([3, 77])
    record = {
        "config": settings,
        "alphas_cumprod": ddpm.alphas_cumprod.tolist(),
        "sample": flat(sample),
        "model_output": flat(model_output),
        "clean": flat(clean),
        "noise": flat(noise),
        "noised_at": noised_at.tolist(),
        "noised": flat(ddpm.add_noise(clean, noise, noised_at)),
        "steps": [],
    }
    ddim.set_timesteps(10)
    record["ddim_timesteps"] = ddim.timesteps.tolist()
    for sampler, scheduler, inference_steps, timestep in [
        ("DDPM", ddpm, 100, 99),
        ("DDPM", ddpm, 100, 40),
        ("DDPM", ddpm, 100, 0),
        ("DDPM", ddpm, 10, 50),
        ("DDIM", ddim, 10, 90),
        ("DDIM", ddim, 10, 0),
    ]:
        scheduler.set_timesteps(inference_steps)
        # DDPM draws its noise with the generator it is given, as torch.randn does.
        seed = 1000 + timestep
        drawn = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        out = scheduler.step(
            model_output, timestep, sample, generator=torch.Generator().manual_seed(seed)
        ).prev_sample
        record["steps"].append(
            {
                "sampler": sampler,
                "inference_steps": inference_steps,
                "timestep": timestep,
                "noise": flat(drawn),
                "prev_sample": flat(out),
            }
        )
    return record


def attention(out):
    torch.manual_seed(3)
    d_model, n_heads = 16, 4
    module = torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    # Non-zero biases, so that loading them is checked too (PyTorch starts them at 0).
    with torch.no_grad():
        module.in_proj_bias.normal_(0, 0.5)
        module.out_proj.bias.normal_(0, 0.5)
    query = torch.randn(2, 3, d_model)
    key = torch.randn(2, 5, d_model)
    padding = torch.tensor([[False, False, False, True, True], [False] * 5])
    with torch.no_grad():
        masked, _ = module(query, key, key, key_padding_mask=padding, need_weights=False)
        unmasked, _ = module(query, key, key, need_weights=False)
    save_file(
        {name: t.contiguous() for name, t in module.state_dict().items()},
        str(out / "attention.safetensors"),
    )
    return {
        "d_model": d_model,
        "n_heads": n_heads,
        "query": flat(query),
        "key": flat(key),
        "key_padding": padding.tolist(),
        "output": flat(masked),
        "output_unmasked": flat(unmasked),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import lerobot

    versions = {"lerobot": lerobot.__version__, "torch": torch.__version__}
    for name, record in [("schedules", schedules()), ("attention", attention(args.out))]:
        record["versions"] = versions
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path} ({versions})")


if __name__ == "__main__":
    main()
