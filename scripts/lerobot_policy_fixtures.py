"""Parity fixtures of LeRobot's policies for imago's tests (issue 39), made with
LeRobot's own code, so that CI checks imago against LeRobot without installing it.

    python scripts/lerobot_policy_fixtures.py OUT_DIR [--full-size DIR]

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
- `resnet18.safetensors` and `resnet18.json`: a ResNet-18 made of torchvision's own
  `BasicBlock`s and `FrozenBatchNorm2d` (ACT's backbone) at widths 8, 16, 32, 64
  (torchvision's are 64-512: 47 MB, too large to commit), seeded weights and random
  statistics, and its last stage's features on recorded images (read by
  `policies/src/resnet.rs`'s parity test).

- `act_encoder_layer_{post,pre}.safetensors`, `act_decoder_layer_{post,pre}.safetensors`
  and `act_layers.json`: LeRobot's own `ACTEncoderLayer` and `ACTDecoderLayer` (post-norm
  and pre-norm; seeded, with non-trivial norms) and their outputs on recorded tokens,
  positional embeddings and a key padding mask, batch first (read by
  `policies/src/act/layers.rs`'s parity test).
- `act_positions.json`: LeRobot's `create_sinusoidal_pos_embedding(10, 16)` and
  `ACTSinusoidalPositionEmbedding2d(8)` on a 3x5 feature map (read by
  `policies/src/act/positions.rs`'s parity test).
- `spatial_softmax.safetensors` and `spatial_softmax.json`: LeRobot's own
  `SpatialSoftmax((8, 4, 6), num_kp=5)` (Diffusion Policy's keypoints; seeded) and its
  keypoints of recorded features (read by
  `policies/src/diffusion/spatial_softmax.rs`'s parity test).

- `resnet18_group_norm.safetensors` and `resnet18_group_norm.json`: the same network at
  widths 16-128 with its batch norms replaced by group norms by LeRobot's own
  `_replace_submodules`, as Diffusion Policy's `use_group_norm` does (read by the same
  test).

- `diffusion_unet.safetensors` and `diffusion_unet.json`: LeRobot's own
  `DiffusionConditionalUnet1d` (down_dims 16, 32, 64; FiLM with scales; seeded, with
  non-trivial group norms) and its output on a recorded noisy chunk, timesteps and
  observation features (read by `policies/src/diffusion/unet.rs`'s parity test).

- `diffusion_sampling_unet.safetensors` and `diffusion_sampling.json`: LeRobot's
  `DiffusionModel.conditional_sample` (state-only inputs, down_dims 16-64, horizon 16)
  with DDPM in 100 steps and DDIM in 10: the initial noise, the noise DDPM drew at each
  step, and the denoised chunks (read by `policies/src/diffusion/sampling.rs`).

- `diffusion_loss.json`: LeRobot's `DiffusionModel.compute_loss` on one batch (the
  sampling fixture's weights; padded actions masked) with the noise and timesteps it
  drew (read by `policies/src/diffusion/loss.rs`).

- `diffusion_rgb_encoder.safetensors` and `diffusion_rgb_encoder.json`: LeRobot's own
  `DiffusionRgbEncoder` (group norms, 8 keypoints, a 64x96 crop of 72x100 images, at
  inference) around the narrow ResNet-18 (torchvision's resnet18 factory swapped for it
  while LeRobot builds the encoder) and its features of recorded images (read by
  `policies/src/diffusion/rgb_encoder.rs`).

- `act_temporal_ensemble.json`: LeRobot's own `ACTTemporalEnsembler(0.01, 5)` fed seven
  ticks of chunks for two episodes, and the actions it returned (read by
  `policies/src/act/temporal_ensemble.rs`).

- `diffusion_policy/` and `diffusion_policy.json`: a whole LeRobot `DiffusionPolicy`
  (narrow backbone and U-Net, 48x48 images) as LeRobot's training saves it
  (`pretrained_model/`: config, weights, processors with their statistics), ten ticks
  of raw observations through its processors and `select_action` with the noise it
  used, and its training loss on one raw batch (read by
  `runtime/src/store/lerobot_policy/tests.rs` and `tests/lerobot_policies.rs`).
- `act_policy/` and `act_policy.json`: the same of a whole LeRobot `ACTPolicy` (narrow
  frozen-batch-norm backbone, 2+2 layers, VAE; dropout 0 for the loss).

With `--full-size DIR`, it also writes the same ResNet-18 fixture at torchvision's own
size (`torchvision.models.resnet18` with `FrozenBatchNorm2d`, 47 MB) and the two
policies with LeRobot's default sizes (1 GB and 200 MB; none committed) to DIR;
`IMAGO_LEROBOT_FULL_FIXTURES=DIR cargo test --release --workspace --lib -- resnet
lerobot_policy` checks them.

Every array is a flat list in row-major order beside its shape.
"""

import argparse
import json
import types
from pathlib import Path

import torch
from diffusers import DDIMScheduler, DDPMScheduler
import torchvision
from safetensors.torch import load_file, save_file
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.ops.misc import FrozenBatchNorm2d

from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.processor_act import make_act_pre_post_processors
from lerobot.policies.act.modeling_act import (
    ACTDecoderLayer,
    ACTEncoderLayer,
    ACTPolicy,
    ACTTemporalEnsembler,
    ACTSinusoidalPositionEmbedding2d,
    create_sinusoidal_pos_embedding,
)
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.processor_diffusion import make_diffusion_pre_post_processors
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.diffusion.modeling_diffusion import (
    DiffusionConditionalUnet1d,
    DiffusionModel,
    DiffusionPolicy,
    DiffusionRgbEncoder,
    SpatialSoftmax,
    _replace_submodules,
)


def flat(tensor):
    return {"shape": list(tensor.shape), "values": tensor.flatten().tolist()}


def save_state(module, path):
    """The module's state dict as safetensors, as imago's tests load it."""
    save_file({name: t.contiguous() for name, t in module.state_dict().items()}, str(path))


def perturb_norm(module):
    """A layer or group norm that is not the identity (PyTorch starts them at 1 and 0)."""
    if isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)):
        module.weight.uniform_(0.5, 1.5)
        module.bias.normal_(0, 0.2)


def state_only_diffusion_config(**settings):
    """LeRobot's DiffusionConfig with a 3-d state, a 4-d environment state and 2-d actions."""
    config = DiffusionConfig(**settings)
    config.input_features = {
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(3,)),
        "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(4,)),
    }
    config.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))}
    return config


def unet_record(config, global_cond_dim):
    """The U-Net's sizes as imago's DiffusionUnetConfig names them, from LeRobot's config."""
    return {
        "action_dim": config.action_feature.shape[0],
        "global_cond_dim": global_cond_dim,
        "down_dims": list(config.down_dims),
        "kernel_size": config.kernel_size,
        "n_groups": config.n_groups,
        "diffusion_step_embed_dim": config.diffusion_step_embed_dim,
        "use_film_scale_modulation": config.use_film_scale_modulation,
    }


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
    save_state(module, out / "attention.safetensors")
    return {
        "d_model": d_model,
        "n_heads": n_heads,
        "query": flat(query),
        "key": flat(key),
        "key_padding": padding.tolist(),
        "output": flat(masked),
        "output_unmasked": flat(unmasked),
    }


def act_layers(out):
    """ACT's layers are sequence first; the fixture is batch first, as imago's are."""
    torch.manual_seed(7)
    sizes = {"dim_model": 16, "n_heads": 4, "dim_feedforward": 32}
    tokens = torch.randn(2, 6, 16)
    encoder_pos = torch.randn(1, 6, 16)
    padding = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
    queries = torch.randn(2, 3, 16)
    decoder_pos = torch.randn(1, 3, 16)
    seq = lambda x: x.transpose(0, 1)  # noqa: E731
    record = {
        **sizes,
        "tokens": flat(tokens),
        "encoder_pos": flat(encoder_pos),
        "key_padding": padding.tolist(),
        "queries": flat(queries),
        "decoder_pos": flat(decoder_pos),
        "cases": [],
    }
    for pre_norm in [False, True]:
        config = ACTConfig(**sizes, pre_norm=pre_norm)
        encoder, decoder = ACTEncoderLayer(config).eval(), ACTDecoderLayer(config).eval()
        with torch.no_grad():
            for layer in [encoder, decoder]:
                for module in layer.modules():
                    perturb_norm(module)
                    if isinstance(module, torch.nn.MultiheadAttention):
                        module.in_proj_bias.normal_(0, 0.2)
            encoded = encoder(seq(tokens), pos_embed=seq(encoder_pos), key_padding_mask=padding)
            decoded = decoder(
                seq(queries), encoded, decoder_pos_embed=seq(decoder_pos), encoder_pos_embed=seq(encoder_pos)
            )
        norm = "pre" if pre_norm else "post"
        for name, layer in [("encoder", encoder), ("decoder", decoder)]:
            save_state(layer, out / f"act_{name}_layer_{norm}.safetensors")
        record["cases"].append(
            {"pre_norm": pre_norm, "encoder_out": flat(seq(encoded)), "decoder_out": flat(seq(decoded))}
        )
    return record


def act_positions():
    feature_map = torch.zeros(1, 4, 3, 5)
    return {
        "table_1d": flat(create_sinusoidal_pos_embedding(10, 16)),
        "embedding_2d": flat(ACTSinusoidalPositionEmbedding2d(8)(feature_map)),
    }


def spatial_softmax(out):
    torch.manual_seed(8)
    channels, size, num_kp = 8, [4, 6], 5
    module = SpatialSoftmax((channels, *size), num_kp=num_kp).eval()
    features = torch.randn(2, channels, *size) * 2.0
    with torch.no_grad():
        keypoints = module(features)
    save_state(module, out / "spatial_softmax.safetensors")
    return {
        "channels": channels,
        "size": size,
        "num_kp": num_kp,
        "features": flat(features),
        "keypoints": flat(keypoints),
    }


def diffusion_unet(out):
    torch.manual_seed(10)
    config = state_only_diffusion_config(
        down_dims=(16, 32, 64),
        kernel_size=5,
        n_groups=8,
        diffusion_step_embed_dim=16,
        use_film_scale_modulation=True,
    )
    global_cond_dim = 10
    unet = DiffusionConditionalUnet1d(config, global_cond_dim).eval()
    with torch.no_grad():
        for module in unet.modules():
            perturb_norm(module)
        x = torch.randn(2, 8, 2)
        timesteps = torch.tensor([3, 57])
        global_cond = torch.randn(2, global_cond_dim)
        output = unet(x, timesteps, global_cond=global_cond)
    save_state(unet, out / "diffusion_unet.safetensors")
    return {
        "unet": unet_record(config, global_cond_dim),
        "x": flat(x),
        "timesteps": timesteps.tolist(),
        "global_cond": flat(global_cond),
        "output": flat(output),
    }


def diffusion_sampling(out):
    torch.manual_seed(11)
    record = {"runs": []}
    for sampler, steps in [("DDPM", 100), ("DDIM", 10)]:
        torch.manual_seed(11)
        config = state_only_diffusion_config(
            down_dims=(16, 32, 64),
            diffusion_step_embed_dim=16,
            noise_scheduler_type=sampler,
            num_inference_steps=steps,
        )
        model = DiffusionModel(config).eval()
        global_cond_dim = (3 + 4) * config.n_obs_steps
        if "global_cond" not in record:
            record["global_cond"] = flat(torch.randn(2, global_cond_dim))
            save_state(model.unet, out / "diffusion_sampling_unet.safetensors")
            weights = {name: t.clone() for name, t in model.unet.state_dict().items()}
            record["unet"] = unet_record(config, global_cond_dim)
            record["schedule"] = lerobot_schedule_config()
        model.unet.load_state_dict(weights)
        global_cond = torch.tensor(record["global_cond"]["values"]).reshape(2, global_cond_dim)
        initial = torch.randn(2, config.horizon, 2)
        seed = 100 + steps
        noisy_steps = steps - 1 if sampler == "DDPM" else 0
        replay = torch.Generator().manual_seed(seed)
        step_noise = [torch.randn(initial.shape, generator=replay) for _ in range(noisy_steps)]
        with torch.no_grad():
            sample = model.conditional_sample(
                2, global_cond=global_cond, generator=torch.Generator().manual_seed(seed), noise=initial
            )
        record["runs"].append(
            {
                "sampler": sampler,
                "steps": steps,
                "initial": flat(initial),
                "step_noise": [flat(n) for n in step_noise],
                "sample": flat(sample),
            }
        )
    return record


def diffusion_loss(out):
    torch.manual_seed(12)
    config = state_only_diffusion_config(
        down_dims=(16, 32, 64), diffusion_step_embed_dim=16, do_mask_loss_for_padding=True
    )
    model = DiffusionModel(config).eval()
    model.unet.load_state_dict(load_file(str(out / "diffusion_sampling_unet.safetensors")))
    batch = {
        "observation.state": torch.randn(2, config.n_obs_steps, 3),
        "observation.environment_state": torch.randn(2, config.n_obs_steps, 4),
        "action": torch.randn(2, config.horizon, 2).clamp(-1, 1),
        "action_is_pad": torch.zeros(2, config.horizon, dtype=torch.bool),
    }
    batch["action_is_pad"][1, -5:] = True
    torch.manual_seed(13)
    with torch.no_grad():
        loss = model.compute_loss(batch)
    # compute_loss draws the noise, then the timesteps: replay both.
    torch.manual_seed(13)
    noise = torch.randn(batch["action"].shape)
    timesteps = torch.randint(low=0, high=config.num_train_timesteps, size=(2,)).long()
    return {
        "unet": unet_record(config, 7 * config.n_obs_steps),
        "schedule": lerobot_schedule_config(),
        "state": flat(batch["observation.state"]),
        "environment_state": flat(batch["observation.environment_state"]),
        "action": flat(batch["action"]),
        "action_is_pad": batch["action_is_pad"].tolist(),
        "noise": flat(noise),
        "timesteps": timesteps.tolist(),
        "loss": loss.item(),
    }


def diffusion_rgb_encoder(out):
    torch.manual_seed(14)
    widths = [16, 32, 64, 128]
    # A crop large enough for a 2x3 feature map: the keypoints then depend on the image.
    config = DiffusionConfig(crop_shape=(64, 96), spatial_softmax_num_keypoints=8)
    config.input_features = {
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(3,)),
        "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 72, 100)),
    }
    config.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))}
    factory = torchvision.models.resnet18
    # LeRobot builds its backbone from torchvision's factory: a narrow one stands in.
    torchvision.models.resnet18 = lambda weights=None: NarrowResNet18(
        widths, norm_layer=torch.nn.BatchNorm2d, keep_head=True
    )
    try:
        encoder = DiffusionRgbEncoder(config).eval()
    finally:
        torchvision.models.resnet18 = factory
    with torch.no_grad():
        for module in encoder.modules():
            perturb_norm(module)
        images = torch.rand(2, 3, 72, 100)
        features = encoder(images)
    save_state(encoder, out / "diffusion_rgb_encoder.safetensors")
    return {
        "image_size": [72, 100],
        "crop_shape": [64, 96],
        "widths": widths,
        "num_keypoints": 8,
        "images": flat(images),
        "features": flat(features),
    }


def narrow_backbone(widths):
    """While LeRobot builds a policy, torchvision's resnet18 factory gives a narrow one."""

    class Narrow:
        def __enter__(self):
            self.factory = torchvision.models.resnet18
            torchvision.models.resnet18 = lambda weights=None, **kw: NarrowResNet18(
                widths, norm_layer=torch.nn.BatchNorm2d, keep_head=True
            )

        def __exit__(self, *exc):
            torchvision.models.resnet18 = self.factory

    return Narrow()


def pusht_like_features(config, image_shape):
    config.input_features = {
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
        "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=image_shape),
    }
    config.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))}


def pusht_like_stats(image_channels):
    """Dataset statistics of PushT's ranges (pixels 0-512), not the identity."""
    return {
        "observation.state": {"min": torch.tensor([13.0, 32.0]), "max": torch.tensor([496.0, 510.0])},
        "action": {"min": torch.tensor([12.0, 25.0]), "max": torch.tensor([511.0, 500.0])},
        "observation.image": {
            "mean": torch.rand(image_channels, 1, 1) * 0.5 + 0.25,
            "std": torch.rand(image_channels, 1, 1) * 0.2 + 0.1,
        },
    }


def save_pretrained_policy(policy, config, stats, directory, processors=None):
    """The `pretrained_model/` directory LeRobot's training writes: the policy and its processors."""
    processors = processors or make_diffusion_pre_post_processors
    preprocessor, postprocessor = processors(config, stats)
    policy.save_pretrained(str(directory))
    preprocessor.save_pretrained(str(directory))
    postprocessor.save_pretrained(str(directory))
    return preprocessor, postprocessor


def diffusion_policy(out, full_size=False):
    """A whole LeRobot Diffusion Policy, saved as LeRobot saves it, run for ten ticks of
    raw observations through its processors and `select_action` (DDPM, 100 steps; two
    chunks), and its training loss on one raw batch. Committed: a narrow backbone and
    U-Net on 48x48 images. `full_size`: LeRobot's own defaults on PushT's 96x96 images
    (torchvision's ResNet-18, down_dims 512-2048: 263 M parameters) for one tick."""
    torch.manual_seed(16)
    if full_size:
        image_shape, tick_count = (3, 96, 96), 1
        config = DiffusionConfig(do_mask_loss_for_padding=True)
    else:
        image_shape, tick_count = (3, 48, 48), 10
        config = DiffusionConfig(
            crop_shape=(40, 40),
            down_dims=(16, 32, 64),
            diffusion_step_embed_dim=16,
            spatial_softmax_num_keypoints=8,
            do_mask_loss_for_padding=True,
        )
    pusht_like_features(config, image_shape)
    if full_size:
        policy = DiffusionPolicy(config)
    else:
        with narrow_backbone([16, 32, 64, 128]):
            policy = DiffusionPolicy(config)
    policy.eval()
    with torch.no_grad():
        for module in policy.modules():
            perturb_norm(module)
    stats = pusht_like_stats(image_shape[0])
    directory = out / "diffusion_policy"
    preprocessor, postprocessor = save_pretrained_policy(policy, config, stats, directory)
    policy.reset()
    ticks = []
    steps = config.num_inference_steps or config.num_train_timesteps
    horizon, action_dim = config.horizon, 2
    for tick in range(tick_count):
        observation = {
            "observation.state": torch.rand(2) * 480 + 16,
            "observation.image": torch.rand(*image_shape),
        }
        initial = torch.randn(1, horizon, action_dim)
        generates = len(policy._queues["action"]) == 0
        seed = 1000 + tick
        torch.manual_seed(seed)
        with torch.no_grad():
            action = postprocessor(policy.select_action(preprocessor(observation), noise=initial))
        record = {
            "state": flat(observation["observation.state"]),
            "image": flat(observation["observation.image"]),
            "action": flat(action),
        }
        if generates:
            # DDPM drew its step noise from the global generator, seeded just before.
            replay = torch.Generator().manual_seed(seed)
            noisy = steps - 1 if config.noise_scheduler_type == "DDPM" else 0
            record["initial"] = flat(initial)
            record["step_noise"] = [
                flat(torch.randn(initial.shape, generator=replay)) for _ in range(noisy)
            ]
        ticks.append(record)
    return {
        "directory": "diffusion_policy",
        "ticks": ticks,
        "loss": diffusion_policy_loss(policy, config, preprocessor, image_shape),
    }


def diffusion_policy_loss(policy, config, preprocessor, image_shape):
    """LeRobot's training loss of one raw batch (two samples, padded actions in one),
    through its preprocessor, with the noise and timesteps it drew."""
    n, horizon = config.n_obs_steps, config.horizon
    batch = {
        "observation.state": torch.rand(2, n, 2) * 480 + 16,
        "observation.image": torch.rand(2, n, *image_shape),
        "action": torch.rand(2, horizon, 2) * 480 + 16,
        "action_is_pad": torch.zeros(2, horizon, dtype=torch.bool),
    }
    batch["action_is_pad"][1, -5:] = True
    normalised = preprocessor(dict(batch))
    torch.manual_seed(17)
    with torch.no_grad():
        loss, _ = policy.forward(normalised)
    # compute_loss draws the noise, then the timesteps (the crop is the centre one at eval).
    torch.manual_seed(17)
    noise = torch.randn(2, horizon, 2)
    timesteps = torch.randint(low=0, high=config.num_train_timesteps, size=(2,)).long()
    return {
        "state": flat(batch["observation.state"]),
        "image": flat(batch["observation.image"]),
        "action": flat(batch["action"]),
        "action_is_pad": batch["action_is_pad"].tolist(),
        "noise": flat(noise),
        "timesteps": timesteps.tolist(),
        "loss": loss.item(),
    }


def act_policy(out, full_size=False):
    """A whole LeRobot ACT policy, saved as LeRobot saves it, run for six ticks of raw
    observations through its processors and `select_action`, and its training loss
    (L1 + KL) on one raw batch, dropout 0 so that training is deterministic but for the
    latent's noise, which is replayed. Committed: a narrow backbone with frozen batch
    norms, a small transformer (chunks of 10, 4 executed) on 48x48 images.
    `full_size`: LeRobot's own defaults (torchvision's ResNet-18, 512-wide transformer,
    chunks of 100; 52 M parameters) on 96x96 images, the backbone not downloaded."""
    torch.manual_seed(18)
    if full_size:
        image_shape = (3, 96, 96)
        config = ACTConfig(dropout=0.0, pretrained_backbone_weights=None)
    else:
        image_shape = (3, 48, 48)
        config = ACTConfig(
            chunk_size=10,
            n_action_steps=4,
            dim_model=32,
            n_heads=4,
            dim_feedforward=64,
            n_encoder_layers=2,
            n_decoder_layers=2,
            latent_dim=8,
            n_vae_encoder_layers=2,
            dropout=0.0,
        )
    pusht_like_features(config, image_shape)
    widths = [8, 16, 32, 64]

    def narrow(**kwargs):
        network = NarrowResNet18(widths, norm_layer=FrozenBatchNorm2d, keep_head=True)
        network.fc = torch.nn.Linear(widths[3], 10)  # ACT reads its input width
        return network

    factory = torchvision.models.resnet18
    if not full_size:
        torchvision.models.resnet18 = narrow
    try:
        policy = ACTPolicy(config)
    finally:
        torchvision.models.resnet18 = factory
    with torch.no_grad():
        randomise_statistics(policy.model.backbone)
        for module in policy.modules():
            perturb_norm(module)
    stats = pusht_like_stats(image_shape[0])
    stats["observation.state"].update(mean=torch.tensor([250.0, 260.0]), std=torch.tensor([120.0, 110.0]))
    stats["action"].update(mean=torch.tensor([255.0, 250.0]), std=torch.tensor([125.0, 115.0]))
    directory = out / "act_policy"
    preprocessor, postprocessor = save_pretrained_policy(
        policy, config, stats, directory, processors=make_act_pre_post_processors
    )
    policy.eval()
    policy.reset()
    ticks = []
    for _ in range(6):
        observation = {
            "observation.state": torch.rand(2) * 480 + 16,
            "observation.image": torch.rand(*image_shape),
        }
        with torch.no_grad():
            action = postprocessor(policy.select_action(preprocessor(observation)))
        ticks.append(
            {
                "state": flat(observation["observation.state"]),
                "image": flat(observation["observation.image"]),
                "action": flat(action),
            }
        )
    batch = {
        "observation.state": torch.rand(2, 2) * 480 + 16,
        "observation.image": torch.rand(2, *image_shape),
        "action": torch.rand(2, config.chunk_size, 2) * 480 + 16,
        "action_is_pad": torch.zeros(2, config.chunk_size, dtype=torch.bool),
    }
    batch["action_is_pad"][1, -3:] = True
    normalised = preprocessor(dict(batch))
    policy.train()
    torch.manual_seed(19)
    with torch.no_grad():
        loss, parts = policy.forward(normalised)
    # The VAE's latent sample is the only draw (dropout 0): replay it.
    torch.manual_seed(19)
    latent_noise = torch.randn(2, config.latent_dim)
    return {
        "directory": "act_policy",
        "ticks": ticks,
        "loss": {
            "state": flat(batch["observation.state"]),
            "image": flat(batch["observation.image"]),
            "action": flat(batch["action"]),
            "action_is_pad": batch["action_is_pad"].tolist(),
            "latent_noise": flat(latent_noise),
            "l1": parts["l1_loss"],
            "kld": parts["kld_loss"],
            "loss": loss.item(),
        },
    }


def act_temporal_ensemble():
    torch.manual_seed(15)
    coeff, chunk, action_dim = 0.01, 5, 3
    ensembler = ACTTemporalEnsembler(coeff, chunk)
    chunks, actions = [], []
    for _ in range(7):
        predicted = torch.randn(2, chunk, action_dim)
        chunks.append(flat(predicted))
        actions.append(flat(ensembler.update(predicted)))
    return {"coeff": coeff, "chunk": chunk, "action_dim": action_dim, "chunks": chunks, "actions": actions}


def randomise_statistics(network):
    """Seeded convolutions as torchvision draws them, and norms that are not the identity."""
    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(module.weight, mode="fan_out")
            if isinstance(module, FrozenBatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.2)
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 2.0)


class NarrowResNet18(ResNet):
    """torchvision's ResNet-18 with other stage widths (its class fixes them)."""

    def __init__(self, widths, norm_layer=FrozenBatchNorm2d, keep_head=False):
        super().__init__(BasicBlock, [2, 2, 2, 2], norm_layer=norm_layer)
        self.inplanes = widths[0]
        self.conv1 = torch.nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = norm_layer(widths[0])
        self.layer1 = self._make_layer(BasicBlock, widths[0], 2)
        self.layer2 = self._make_layer(BasicBlock, widths[1], 2, stride=2)
        self.layer3 = self._make_layer(BasicBlock, widths[2], 2, stride=2)
        self.layer4 = self._make_layer(BasicBlock, widths[3], 2, stride=2)
        if not keep_head:
            del self.fc, self.avgpool

    def features(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def resnet18(out):
    torch.manual_seed(5)
    widths = [8, 16, 32, 64]
    network = NarrowResNet18(widths).eval()
    randomise_statistics(network)
    return resnet_record(network, widths, out / "resnet18.safetensors")


def resnet18_group_norm(out):
    torch.manual_seed(9)
    widths = [16, 32, 64, 128]
    network = NarrowResNet18(widths, norm_layer=torch.nn.BatchNorm2d)
    # Diffusion Policy's use_group_norm, by LeRobot's own code.
    network = _replace_submodules(
        root_module=network,
        predicate=lambda x: isinstance(x, torch.nn.BatchNorm2d),
        func=lambda x: torch.nn.GroupNorm(num_groups=x.num_features // 16, num_channels=x.num_features),
    ).eval()
    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(module.weight, mode="fan_out")
            perturb_norm(module)
    record = resnet_record(network, widths, out / "resnet18_group_norm.safetensors")
    record["norm"] = "Group"
    return record


def full_size_resnet18(out):
    torch.manual_seed(6)
    network = torchvision.models.resnet18(weights=None, norm_layer=FrozenBatchNorm2d).eval()
    del network.fc, network.avgpool
    network.features = types.MethodType(NarrowResNet18.features, network)
    randomise_statistics(network)
    return resnet_record(network, [64, 128, 256, 512], out / "resnet18.safetensors")


def resnet_record(network, widths, weights_path):
    with torch.no_grad():
        images = torch.rand(2, 3, 32, 40)
        features = network.features(images)
    save_state(network, weights_path)
    return {"widths": widths, "norm": "FrozenBatch", "images": flat(images), "features": flat(features)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--full-size", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import lerobot

    versions = {"lerobot": lerobot.__version__, "torch": torch.__version__}
    records = [
        (args.out, "schedules", schedules()),
        (args.out, "attention", attention(args.out)),
        (args.out, "resnet18", resnet18(args.out)),
        (args.out, "resnet18_group_norm", resnet18_group_norm(args.out)),
        (args.out, "act_layers", act_layers(args.out)),
        (args.out, "act_positions", act_positions()),
        (args.out, "act_temporal_ensemble", act_temporal_ensemble()),
        (args.out, "spatial_softmax", spatial_softmax(args.out)),
        (args.out, "diffusion_unet", diffusion_unet(args.out)),
        (args.out, "diffusion_sampling", diffusion_sampling(args.out)),
        (args.out, "diffusion_loss", diffusion_loss(args.out)),
        (args.out, "diffusion_rgb_encoder", diffusion_rgb_encoder(args.out)),
        (args.out, "diffusion_policy", diffusion_policy(args.out)),
        (args.out, "act_policy", act_policy(args.out)),
    ]
    if args.full_size:
        args.full_size.mkdir(parents=True, exist_ok=True)
        records.append((args.full_size, "resnet18", full_size_resnet18(args.full_size)))
        records.append((args.full_size, "diffusion_policy", diffusion_policy(args.full_size, full_size=True)))
        records.append((args.full_size, "act_policy", act_policy(args.full_size, full_size=True)))
    for out, name, record in records:
        record["versions"] = versions
        path = out / f"{name}.json"
        path.write_text(json.dumps(record, separators=(",", ":")) + "\n")
        print(f"wrote {path} ({versions})")


if __name__ == "__main__":
    main()
