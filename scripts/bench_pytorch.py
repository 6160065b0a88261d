"""PyTorch twins of imago's policy and world model, timed as `imago bench` times them.

Not part of CI (PyTorch is a large install): `scripts/bench-vs-pytorch.sh` runs this
alternately with `imago bench` and prints the ratios. Each model mirrors the Rust one
layer for layer (policies/src/model.rs, worldmodel/src/*.rs), with the same widths,
so that parameter counts are equal (checked against imago's report), and each timed
region mirrors runtime/src/jobs/bench.rs:

- policy training step: host batch to tensors, forward, Gaussian chunk NLL, loss read
  back, backward, Adam step (3 untimed warm-up steps);
- policy inference: one observation to tensors, the chunk mean, read back (5 warm-up
  calls, 100 timed);
- world-model training step: a batch of windows to tensors, Poisson member weights,
  the seven-term loss with multi-step supervision, loss parts read back, backward,
  gradient-norm clipping, Adam, the EMA target update;
- imagination: 512 start latents, 8 steps, closed loop (the latent actor) and open
  loop (fixed actions), rewards read back (2 warm-up calls, 20 timed).

Usage: python3 scripts/bench_pytorch.py --what policy|worldmodel [--compile]
       [--batch-size N] [--steps N] [--threads N]    (JSON on stdout)
       python3 scripts/bench_pytorch.py --gemm [--threads N]  (fp32 GEMM GFLOP/s)
       python3 scripts/bench_pytorch.py --table DIR  (the ratio table of a run of
       scripts/bench-vs-pytorch.sh)
"""

import glob
import os

import argparse
import json
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# reacher2d's defaults, as VlaPolicyConfig::for_robot and WorldModelConfig::for_robot
# derive them: 48x48 camera, 8 proprioception entries (6 not velocities), 2 actions.
IMAGE, PATCH, STEM, WORDS, VOCAB = 48, 8, 16, 6, 18
D_MODEL, HEADS, LAYERS, D_FF, CHUNK = 64, 4, 2, 128, 4
PROPRIO, POLICY_PROPRIO, ACTIONS = 8, 6, 2
MIN_LOG_STD, MAX_LOG_STD = -4.0, 0.5
WM_STRIDE, WORD_DIM, LATENT, HIDDEN, ENSEMBLE, PREFIX = 2, 16, 32, 128, 5, 8
COORDINATE_FEATURES = 14


def quantile(values, q):
    values = sorted(values)
    position = q * (len(values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def spatial_softmax(features, size):
    """[B, P, C] -> [B, 2C]: expected x of each channel, then y (y up)."""
    batch, pixels, channels = features.shape
    weights = torch.softmax(features, dim=1)
    centres = -1.0 + (2 * torch.arange(size, dtype=torch.float32) + 1) / size
    xs = centres.repeat(size)
    ys = (-centres).repeat_interleave(size)
    grid = torch.stack([xs, ys]).unsqueeze(0)  # [1, 2, P]
    return torch.matmul(grid, weights).reshape(batch, 2 * channels)


def film_modulate(features, film):
    channels = features.shape[2]
    return features * (film[..., :channels] + 1.0) + film[..., channels:]


def patch_coordinates(grid):
    rows = []
    for row in range(grid):
        for col in range(grid):
            x = -1.0 + (2 * col + 1) / grid
            y = 1.0 - (2 * row + 1) / grid
            f = [x, y]
            for freq in (1.0, 2.0, 4.0):
                w = freq * math.pi
                f += [math.sin(w * x), math.cos(w * x), math.sin(w * y), math.cos(w * y)]
            rows.append(f)
    return torch.tensor(rows, dtype=torch.float32).unsqueeze(0)


class Policy(nn.Module):
    """VlaPolicy with the Gaussian head and the ReLU stem (policies/src/model.rs)."""

    def __init__(self):
        super().__init__()
        d = D_MODEL
        self.stem = nn.Linear(3, STEM)
        self.keypoint_embed = nn.Linear(2 * STEM, d)
        self.keypoint_sharpness = nn.Parameter(torch.full((STEM,), 10.0))
        self.film = nn.Linear(d, 2 * STEM)
        self.patch_embed = nn.Linear(STEM, d)
        self.patch_coordinates = nn.Linear(COORDINATE_FEATURES, d)
        self.word_embed = nn.Embedding(VOCAB, d)
        self.word_position = nn.Embedding(WORDS, d)
        self.proprio_embed = nn.Linear(POLICY_PROPRIO, d)
        self.token_type = nn.Embedding(4, d)
        layer = nn.TransformerEncoderLayer(
            d, HEADS, D_FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.readout_norm = nn.LayerNorm(d)
        self.hidden = nn.Linear(d, d)
        self.out = nn.Linear(d, 2 * CHUNK * ACTIONS)
        grid = IMAGE // PATCH
        self.register_buffer("coordinates", patch_coordinates(grid))
        types = [0, 1] + [2] * WORDS + [3] * grid * grid
        self.register_buffer("types", torch.tensor(types).unsqueeze(0))
        self.register_buffer("positions", torch.arange(WORDS).unsqueeze(0))

    def forward(self, images, words, word_weights, pad_mask, proprio, origin):
        batch = images.shape[0]
        grid = IMAGE // PATCH
        word_tokens = self.word_embed(words) + self.word_position(self.positions)
        instruction = (word_tokens * word_weights.unsqueeze(2)).sum(1, keepdim=True)
        stem = F.relu(self.stem(images))
        features = film_modulate(stem, self.film(instruction))
        keypoints = spatial_softmax(features * self.keypoint_sharpness, IMAGE)
        pooled = (
            features.reshape(batch, grid, PATCH, grid, PATCH, STEM).sum(4).sum(2)
            / (PATCH * PATCH)
        ).reshape(batch, grid * grid, STEM)
        patch_tokens = self.patch_embed(pooled) + self.patch_coordinates(self.coordinates)
        proprio_token = self.proprio_embed(proprio).unsqueeze(1)
        readout = instruction + proprio_token + self.keypoint_embed(keypoints).unsqueeze(1)
        tokens = torch.cat([readout, proprio_token, word_tokens, patch_tokens], 1)
        tokens = tokens + self.token_type(self.types)
        encoded = self.encoder(tokens, src_key_padding_mask=pad_mask)
        summary = self.readout_norm(encoded[:, 0])
        out = self.out(F.gelu(self.hidden(summary)))
        ka = CHUNK * ACTIONS
        mean = out[:, :ka].reshape(batch, CHUNK, ACTIONS) + origin.unsqueeze(1)
        raw = out[:, ka:].reshape(batch, CHUNK, ACTIONS)
        log_std = torch.sigmoid(raw) * (MAX_LOG_STD - MIN_LOG_STD) + MIN_LOG_STD
        return mean, log_std


def gaussian_nll(mean, log_std, target, mask):
    z = (target - mean) * torch.exp(-log_std)
    per_step = (0.5 * z * z + log_std).sum(2)
    return (per_step * mask).sum() / mask.sum().clamp_min(1e-6)


def instruction_host(rows, rng):
    """Word ids and mean weights of 4-word instructions padded to WORDS."""
    words = np.zeros((rows, WORDS), dtype=np.int64)
    words[:, :4] = rng.integers(1, VOCAB, size=(rows, 4))
    weights = np.zeros((rows, WORDS), dtype=np.float32)
    weights[:, :4] = 0.25
    return words, weights


def policy_host_batch(batch, rng):
    """Host buffers shaped as PolicyBatch fills them."""
    tokens = 2 + WORDS + (IMAGE // PATCH) ** 2
    words, weights = instruction_host(batch, rng)
    pad = np.zeros((batch, tokens), dtype=bool)
    pad[:, 2 + 4 : 2 + WORDS] = True
    return {
        "images": rng.random((batch, IMAGE * IMAGE, 3), dtype=np.float32),
        "words": words,
        "word_weights": weights,
        "pad": pad,
        "proprio": rng.standard_normal((batch, POLICY_PROPRIO), dtype=np.float32),
        "origin": np.zeros((batch, ACTIONS), dtype=np.float32),
    }


def to_tensors(host):
    # torch.tensor copies, as burn's TensorData::new + from_data does.
    return (
        torch.tensor(host["images"]),
        torch.tensor(host["words"]),
        torch.tensor(host["word_weights"]),
        torch.tensor(host["pad"]),
        torch.tensor(host["proprio"]),
        torch.tensor(host["origin"]),
    )


def bench_policy(batch, steps, compiled):
    rng = np.random.default_rng(0)
    policy = Policy()
    parameters = sum(p.numel() for p in policy.parameters())
    forward = torch.compile(policy) if compiled else policy
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    host = policy_host_batch(batch, rng)
    targets = ((np.arange(batch * CHUNK * ACTIONS) % 7) / 7.0 - 0.5).astype(np.float32)
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        target = torch.tensor(targets).reshape(batch, CHUNK, ACTIONS)
        mask = torch.ones(batch, CHUNK)
        mean, log_std = forward(*to_tensors(host))
        loss = gaussian_nll(mean, log_std, target, mask)
        loss.item()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    one = policy_host_batch(1, rng)
    latencies = []
    with torch.inference_mode():
        for call in range(105):
            start = time.perf_counter()
            mean, _ = forward(*to_tensors(one))
            mean.numpy().tolist()
            if call >= 5:
                latencies.append((time.perf_counter() - start) * 1e3)
    return {
        "parameters": parameters,
        "batch_size": batch,
        "steps": steps,
        "train_step_p50_ms": quantile(times, 0.5),
        "train_step_p90_ms": quantile(times, 0.9),
        "inference_p50_ms": quantile(latencies, 0.5),
        "inference_p99_ms": quantile(latencies, 0.99),
    }


class Mlp(nn.Module):
    """Two GELU hidden layers (worldmodel/src/mlp.rs)."""

    def __init__(self, inputs, outputs, output_std=None):
        super().__init__()
        self.hidden = nn.ModuleList([nn.Linear(inputs, HIDDEN), nn.Linear(HIDDEN, HIDDEN)])
        self.output = nn.Linear(HIDDEN, outputs)
        if output_std is not None:
            nn.init.normal_(self.output.weight, 0.0, output_std)
            nn.init.normal_(self.output.bias, 0.0, output_std)

    def forward(self, x):
        for layer in self.hidden:
            x = F.gelu(layer(x))
        return self.output(x)


class Encoder(nn.Module):
    """ObservationEncoder: strided pixels, GELU stem, FiLM, keypoints, mix MLP."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(3, STEM)
        self.word_embed = nn.Embedding(VOCAB, WORD_DIM)
        self.film = nn.Linear(WORD_DIM, 2 * STEM)
        self.sharpness = nn.Parameter(torch.full((STEM,), 10.0))
        self.mix = Mlp(2 * STEM + WORD_DIM + PROPRIO, LATENT)
        kept = [
            row * IMAGE + col
            for row in range(0, IMAGE, WM_STRIDE)
            for col in range(0, IMAGE, WM_STRIDE)
        ]
        self.register_buffer("kept", torch.tensor(kept))

    def forward(self, images, words, word_weights, proprio):
        instruction = (self.word_embed(words) * word_weights.unsqueeze(2)).sum(1, keepdim=True)
        pixels = images.index_select(1, self.kept)
        stem = F.gelu(self.stem(pixels))
        features = film_modulate(stem, self.film(instruction))
        keypoints = spatial_softmax(features * self.sharpness, IMAGE // WM_STRIDE)
        joined = torch.cat([keypoints, instruction.squeeze(1), proprio], 1)
        return self.mix(joined)


class ResidualMember(nn.Module):
    def __init__(self):
        super().__init__()
        self.delta = Mlp(LATENT + ACTIONS, LATENT, 1e-3)

    def step(self, latent, action):
        return latent + self.delta(torch.cat([latent, action], 1))


class SaltMember(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = Mlp(ACTIONS, LATENT * LATENT + LATENT, 1e-3)
        self.register_buffer("eye", torch.eye(LATENT).unsqueeze(0))

    def step(self, latent, action):
        out = self.affine(action)
        d = LATENT
        matrix = out[:, : d * d].reshape(-1, d, d) + self.eye
        return torch.bmm(matrix, latent.unsqueeze(2)).squeeze(2) + out[:, d * d :]


class PrefixMember(nn.Module):
    def __init__(self):
        super().__init__()
        self.action_embed = nn.Linear(ACTIONS, HIDDEN)
        self.horizon_embed = nn.Embedding(PREFIX, HIDDEN)
        self.predict = Mlp(LATENT + HIDDEN, LATENT, 1e-3)

    def predict_prefixes(self, latent, actions):
        horizon = actions.shape[1]
        prefix = torch.cumsum(self.action_embed(actions), 1)
        summary = prefix + self.horizon_embed.weight[:horizon].unsqueeze(0)
        start = latent.unsqueeze(1).expand(-1, horizon, -1)
        return start + self.predict(torch.cat([start, summary], 2))


def member_rollout(member, latent, actions):
    if isinstance(member, PrefixMember):
        parts, done = [], 0
        while done < actions.shape[1]:
            length = min(PREFIX, actions.shape[1] - done)
            part = member.predict_prefixes(latent, actions[:, done : done + length])
            latent = part[:, -1]
            parts.append(part)
            done += length
        return torch.cat(parts, 1)
    steps = []
    for h in range(actions.shape[1]):
        latent = member.step(latent, actions[:, h])
        steps.append(latent)
    return torch.stack(steps, 1)


class WorldModel(nn.Module):
    def __init__(self, family):
        super().__init__()
        member = {"residual-mlp": ResidualMember, "salt": SaltMember, "action-prefix": PrefixMember}
        self.encoder = Encoder()
        self.target_encoder = Encoder()
        self.target_encoder.load_state_dict(self.encoder.state_dict())
        for p in self.target_encoder.parameters():
            p.requires_grad_(False)
        self.members = nn.ModuleList([member[family]() for _ in range(ENSEMBLE)])
        self.reward = Mlp(LATENT + ACTIONS, 1)
        self.continuation = Mlp(LATENT, 1)
        self.value = Mlp(LATENT, 1)
        self.actor = Mlp(LATENT, ACTIONS)

    def act(self, latent):
        return torch.tanh(self.actor(latent))


def collapse_penalties(latents):
    b, d = latents.shape
    centred = latents - latents.mean(0, keepdim=True)
    variance = (centred * centred).sum(0) / (max(b, 2) - 1)
    hinge = F.relu(1.0 - torch.sqrt(variance + 1e-4)).mean()
    covariance = centred.t() @ centred / (max(b, 2) - 1)
    off = ((covariance * covariance).sum() - (variance * variance).sum()) / d
    return hinge, off


def world_model_loss(model, starts, frames, actions, rewards, continues, returns, member_weights):
    b, h, a = actions.shape
    with torch.no_grad():
        target = model.target_encoder(*frames).reshape(b, h + 1, LATENT)
    next_targets = target[:, 1:]
    start = model.encoder(*starts)
    predictions = [member_rollout(m, start, actions) for m in model.members]
    decay = torch.tensor([0.7**k for k in range(h)])
    step_weights = (decay / decay.sum()).reshape(1, h)
    member_errors = torch.stack(
        [(((p - next_targets) ** 2).mean(2) * step_weights).sum(1) for p in predictions]
    )
    prediction = (member_errors * member_weights).sum() / (member_weights.sum() + 1e-6)
    variance, covariance = collapse_penalties(start)
    mean_prediction = torch.stack(predictions).mean(0)
    heads = torch.cat([start.unsqueeze(1), mean_prediction], 1)
    before = heads[:, :h].reshape(b * h, LATENT)
    after = heads[:, 1:].reshape(b * h, LATENT)
    reward = ((model.reward(torch.cat([before, actions.reshape(b * h, a)], 1)).reshape(-1)
               - rewards.reshape(-1)) ** 2).mean()
    continuation = F.binary_cross_entropy_with_logits(
        model.continuation(after).reshape(-1), continues.reshape(-1)
    )
    value = ((model.value(before).reshape(-1) - returns.reshape(-1)) ** 2).mean()
    actor = ((model.act(start.detach()) - actions[:, 0]) ** 2).mean()
    parts = [prediction, variance, covariance, reward, continuation, value, actor]
    weights = [1.0, 1.0, 0.04, 1.0, 0.1, 0.5, 1.0]
    total = sum(p * w for p, w in zip(parts, weights))
    return total, torch.stack([p.detach() for p in parts])


def wm_host_batch(rows, rng):
    words, weights = instruction_host(rows, rng)
    return (
        rng.random((rows, IMAGE * IMAGE, 3), dtype=np.float32),
        words,
        weights,
        rng.standard_normal((rows, PROPRIO), dtype=np.float32),
    )


def imagine(model, start, actions=None, horizon=8, penalty=1.0):
    batch = start.shape[0]
    latent = start
    latents, chosen, disagreement = [start.unsqueeze(1)], [], []
    step = 0
    while step < horizon:
        chunk = model.act(latent).unsqueeze(1) if actions is None else actions[:, step:]
        length = min(chunk.shape[1], horizon - step)
        chunk = chunk[:, :length]
        members = torch.stack([member_rollout(m, latent, chunk) for m in model.members])
        mean = members.mean(0)
        variance = ((members - mean) ** 2).sum(0) / (max(len(model.members), 2) - 1)
        disagreement.append(variance.sqrt().mean(2))
        latent = mean[:, -1]
        latents.append(mean)
        chosen.append(chunk)
        step += length
    latents = torch.cat(latents, 1)
    chosen = torch.cat(chosen, 1)
    disagreement = torch.cat(disagreement, 1)
    before = latents[:, :horizon].reshape(batch * horizon, LATENT)
    after = latents[:, 1:].reshape(batch * horizon, LATENT)
    raw = model.reward(torch.cat([before, chosen.reshape(batch * horizon, ACTIONS)], 1))
    raw = raw.reshape(batch, horizon)
    torch.sigmoid(model.continuation(after))
    model.value(latents.reshape(-1, LATENT))
    return raw - disagreement * penalty


def bench_world_model(batch, steps, compiled):
    rng = np.random.default_rng(0)
    horizon, rows = 8, []
    for family in ("residual-mlp", "salt", "action-prefix"):
        torch.manual_seed(0)
        model = WorldModel(family)
        parameters = sum(p.numel() for p in model.parameters())
        loss_fn = torch.compile(world_model_loss) if compiled else world_model_loss
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=3e-3)
        # A pool of windows drawn from as WindowDataset::fill copies them, inside the
        # timed region.
        pool = 64
        pool_starts = wm_host_batch(pool, rng)
        pool_frames = wm_host_batch(pool * (horizon + 1), rng)
        pool_actions = rng.uniform(-1, 1, (pool, horizon, ACTIONS)).astype(np.float32)
        pool_rewards = rng.standard_normal((pool, horizon), dtype=np.float32)
        times = []
        for step in range(steps + 3):
            start = time.perf_counter()
            windows = rng.integers(0, pool, batch)
            frame_rows = (windows[:, None] * (horizon + 1) + np.arange(horizon + 1)).reshape(-1)
            starts = tuple(torch.from_numpy(x[windows]) for x in pool_starts)
            frames = tuple(torch.from_numpy(x[frame_rows]) for x in pool_frames)
            actions = torch.from_numpy(pool_actions[windows])
            rewards = torch.from_numpy(pool_rewards[windows])
            continues = torch.ones(batch, horizon)
            returns = torch.from_numpy(pool_rewards[windows])
            member_weights = torch.from_numpy(
                rng.poisson(1.0, (ENSEMBLE, batch)).astype(np.float32)
            )
            total, parts = loss_fn(
                model, starts, frames, actions, rewards, continues, returns, member_weights
            )
            parts.tolist()
            optimizer.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            with torch.no_grad():
                for t, o in zip(model.target_encoder.parameters(), model.encoder.parameters()):
                    t.mul_(0.99).add_(o, alpha=0.01)
            if step >= 3:
                times.append((time.perf_counter() - start) * 1e3)
        model.eval()
        with torch.inference_mode():
            imagination_batch = 512
            start_latents = model.encoder(*(torch.tensor(x) for x in wm_host_batch(imagination_batch, rng)))
            index = torch.arange(imagination_batch * horizon * ACTIONS, dtype=torch.float32)
            fixed = torch.sin(index * 0.37).reshape(imagination_batch, horizon, ACTIONS)
            imagine_fn = torch.compile(imagine) if compiled else imagine

            def timed(call):
                times = []
                for i in range(22):
                    begin = time.perf_counter()
                    call().numpy().tolist()
                    if i >= 2:
                        times.append((time.perf_counter() - begin) * 1e3)
                return statistics.median(times)

            closed = timed(lambda: imagine_fn(model, start_latents))
            open_loop = timed(lambda: imagine_fn(model, start_latents, fixed))
        rows.append({
            "family": family,
            "parameters": parameters,
            "batch_size": batch,
            "horizon": horizon,
            "train_step_p50_ms": quantile(times, 0.5),
            "imagination_batch": imagination_batch,
            "imagine_closed_loop_ms": closed,
            "imagined_steps_per_s": imagination_batch * horizon / (closed / 1e3),
            "imagine_open_loop_ms": open_loop,
        })
    return rows


def gemm(threads):
    """fp32 GEMM throughput at 1024^3 through PyTorch (MKL or OpenBLAS, as shipped) and
    numpy: the arithmetic ceiling both sides' matmuls are measured against."""
    n = 1024
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    x = a.numpy()
    y = b.numpy()
    figures = {}
    for name, call in (("torch", lambda: torch.mm(a, b)), ("numpy", lambda: x @ y)):
        call()
        times = []
        for _ in range(10):
            begin = time.perf_counter()
            call()
            times.append(time.perf_counter() - begin)
        figures[f"{name}_gflops"] = 2 * n**3 / statistics.median(times) / 1e9
    figures["threads"] = threads
    return figures


def median_of(paths, key, select=lambda report: report):
    """The median of `key` over the reports in `paths` that have it; None without any."""
    values = []
    for path in paths:
        with open(path) as f:
            value = select(json.load(f)).get(key)
        if value is not None:
            values.append(value)
    return statistics.median(values) if values else None


def table(directory):
    """The side-by-side table from a bench-vs-pytorch.sh run's JSON files."""
    files = lambda pattern: sorted(glob.glob(os.path.join(directory, pattern)))
    lines = []
    policy = files("imago-policy-*.json")
    # (label, imago's key, report kind, family, higher is better); PyTorch's key is the
    # same, except that imago's host forward and host imagination are compared with
    # PyTorch's one inference and one imagination.
    rows = [("policy BC step, batch 32, p50 ms", "train_step_p50_ms", "policy", None, False),
            ("policy inference, batch 1, p50 ms", "inference_p50_ms", "policy", None, False),
            ("policy inference, batch 1, host forward, p50 ms", "host_inference_p50_ms", "policy", None, False)]
    torch_key = {"host_inference_p50_ms": "inference_p50_ms",
                 "host_imagined_steps_per_s": "imagined_steps_per_s"}
    for family in ("residual-mlp", "salt", "action-prefix"):
        rows.append((f"world model step, {family}, p50 ms", "train_step_p50_ms", "worldmodel", family, False))
    for family in ("residual-mlp", "salt", "action-prefix"):
        rows.append((f"imagination 512x8 closed loop, {family}, steps/s", "imagined_steps_per_s", "worldmodel", family, True))
        rows.append((f"  the same on the host, {family}, steps/s", "host_imagined_steps_per_s", "worldmodel", family, True))
    if not files("imago-*.json") or not files("torch-*.json"):
        raise SystemExit(f"{directory}: no imago-*.json and torch-*.json reports; run scripts/bench-vs-pytorch.sh first")
    compiled = bool(files("compiled-*.json"))
    header = f"{'figure':<52} {'imago':>10} {'eager':>10} {'imago/eager':>12}"
    if compiled:
        header += f" {'compile':>10} {'imago/compile':>14}"
    lines.append(header)
    for label, key, what, family, higher_is_better in rows:
        select = (lambda r: r) if family is None else (
            lambda rows, family=family: next(r for r in rows if r["family"] == family))
        figures = [median_of(files(f"{side}-{what}-*.json"),
                             key if side == "imago" else torch_key.get(key, key), select)
                   for side in ("imago", "torch", "compiled")]
        if figures[0] is None:
            continue
        counts = [median_of(files(f"{side}-{what}-*.json"), "parameters", select)
                  for side in ("imago", "torch")]
        if counts[0] != counts[1]:
            raise SystemExit(f"{label}: parameter counts differ: imago {counts[0]}, PyTorch {counts[1]}")
        ratio = lambda theirs: (theirs / figures[0]) if higher_is_better else (figures[0] / theirs)
        line = f"{label:<52} {figures[0]:>10.3g} {figures[1]:>10.3g} {ratio(figures[1]):>11.2f}x"
        if compiled and figures[2] is not None:
            line += f" {figures[2]:>10.3g} {ratio(figures[2]):>13.2f}x"
        lines.append(line)
    lines.append("(imago / PyTorch: how many times slower imago is; medians over rounds; parameter counts equal)")
    gemm_path = os.path.join(directory, "gemm.json")
    if os.path.exists(gemm_path):
        with open(gemm_path) as f:
            g = json.load(f)
        lines.append(f"fp32 GEMM 1024^3 on {g['threads']} threads: PyTorch {g['torch_gflops']:.0f} GFLOP/s, numpy {g['numpy_gflops']:.0f} GFLOP/s")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--what", choices=["policy", "worldmodel"])
    parser.add_argument("--gemm", action="store_true")
    parser.add_argument("--table")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    for name in ("batch_size", "steps", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.table:
        print(table(args.table))
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.gemm:
        report = gemm(args.threads)
    elif args.what == "policy":
        report = bench_policy(args.batch_size or 64, args.steps, args.compile)
    elif args.what == "worldmodel":
        report = bench_world_model(args.batch_size or 16, args.steps, args.compile)
    else:
        parser.error("one of --what, --gemm or --table is needed")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
