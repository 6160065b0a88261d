#!/usr/bin/env python3
"""How many paired episodes the promotion gate needs to certify a gain in success.

Replicates the discordant-pairs e-process of `runtime/src/promotion/discordant.rs`
(the mixture of likelihood ratios over 24 grid points of q in (p0, 1), p0 = 1/2 +
min_improvement, promoting when it reaches 1 / (1 - confidence)) on simulated paired
episodes: in each pair the challenger alone succeeds with chance (discordance + gain)
/ 2 and the champion alone with (discordance - gain) / 2. Prints, per gain, the share
of tests that certify within a number of episodes and the median episodes, beside the
episodes a fixed-size one-sided paired z-test would need at 80% power (the least any
test that looks only once needs). docs/promotion.md, "What the gate can certify".

    python3 scripts/gate_power.py --discordance 0.23 --gains 1 2 3 5 10
"""

import argparse
import math

import numpy as np

GRID = 24


def episodes_to_certify(gain, discordance, threshold, p0, limit, reps, rng):
    q = p0 + (1.0 - p0) * (np.arange(GRID) + 0.5) / GRID
    on_win, on_loss = np.log(q / p0), np.log((1.0 - q) / (1.0 - p0))
    win, loss = (discordance + gain) / 2.0, (discordance - gain) / 2.0
    out = np.full(reps, np.inf)
    for r in range(reps):
        u = rng.random(limit)
        wins = np.cumsum(u < win)
        losses = np.cumsum((u >= win) & (u < win + loss))
        logs = wins[:, None] * on_win[None, :] + losses[:, None] * on_loss[None, :]
        top = logs.max(axis=1)
        log_mean = top + np.log(np.exp(logs - top[:, None]).mean(axis=1))
        hit = np.nonzero(log_mean >= math.log(threshold))[0]
        if len(hit):
            out[r] = hit[0] + 1
    return out


def fixed_test_episodes(gain, discordance, confidence):
    """Episodes of a one-sided paired z-test at level 1 - confidence, 80% power."""
    z = {0.95: 1.6449, 0.9: 1.2816}[confidence]
    sd = math.sqrt(discordance - gain**2)
    return math.ceil(((z + 0.8416) * sd / gain) ** 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--discordance", type=float, default=0.23,
                        help="share of pairs where exactly one policy succeeds")
    parser.add_argument("--gains", type=float, nargs="+", default=[1, 2, 3, 5, 10],
                        help="challenger's gain in success, points")
    parser.add_argument("--confidence", type=float, default=0.95, choices=[0.9, 0.95])
    parser.add_argument("--min-improvement", type=float, default=0.0)
    parser.add_argument("--within", type=int, nargs="+", default=[400, 1000, 3000])
    parser.add_argument("--limit", type=int, default=10000)
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 0 < args.discordance <= 1:
        parser.error("--discordance must be in (0, 1]")
    if not 0 <= args.min_improvement <= 0.45:
        parser.error("--min-improvement must be in [0, 0.45], as the gate's")
    for flag, value in [("--reps", args.reps), ("--limit", args.limit)]:
        if value < 1:
            parser.error(f"{flag} must be at least 1")
    if min(args.within) < 1:
        parser.error("--within takes episode counts of at least 1")
    rng = np.random.default_rng(args.seed)
    threshold = 1.0 / (1.0 - args.confidence)
    header = ["gain (points)"] + [f"certified within {n}" for n in args.within]
    header += ["median episodes", "fixed one-look test, 80% power"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for points in args.gains:
        gain = points / 100.0
        if gain > args.discordance:
            parser.error(f"a gain of {points} points needs discordance above {gain}")
        spent = episodes_to_certify(gain, args.discordance, threshold,
                                    0.5 + args.min_improvement, args.limit, args.reps, rng)
        median = np.median(spent)
        row = [f"{points:g}"] + [f"{np.mean(spent <= n):.2f}" for n in args.within]
        row.append(f">{args.limit}" if math.isinf(median) else f"{median:.0f}")
        row.append(str(fixed_test_episodes(gain, args.discordance, args.confidence)))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
