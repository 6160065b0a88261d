//! The promotion tests' guarantees, by simulation: a challenger that is no better is
//! promoted in at most `1 - confidence` of the tests, a better one is promoted, mostly
//! long before the budget, and a worse one is rejected as worse.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::*;

/// Runs `tests` promotion tests on simulated paired episodes in which the champion
/// succeeds with `champion` and the challenger with `challenger` (independently), and
/// returns the verdicts and the episodes each used.
fn simulate(
    config: PromotionTestConfig,
    champion: f64,
    challenger: f64,
    tests: usize,
    seed: u64,
) -> Vec<(Verdict, u32)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..tests)
        .map(|_| {
            let mut test = config.start();
            while !test.verdict().is_final() {
                let (a, b) = (
                    rng.random::<f64>() < champion,
                    rng.random::<f64>() < challenger,
                );
                let score = |s: bool, rng: &mut StdRng| {
                    if s {
                        0.3 + 0.5 * rng.random::<f64>()
                    } else {
                        0.0
                    }
                };
                let pair = PairedOutcome {
                    champion_success: a,
                    challenger_success: b,
                    champion_score: score(a, &mut rng),
                    challenger_score: score(b, &mut rng),
                };
                test.observe(pair);
            }
            (test.verdict(), test.episodes())
        })
        .collect()
}

fn rate(results: &[(Verdict, u32)], verdict: Verdict) -> f64 {
    results.iter().filter(|(v, _)| *v == verdict).count() as f64 / results.len() as f64
}

#[test]
fn a_challenger_no_better_is_promoted_at_most_one_minus_confidence_of_the_time() {
    for metric in [PromotionMetric::Success, PromotionMetric::StepsToSuccess] {
        for (confidence, p) in [(0.95, 0.5), (0.9, 0.7), (0.95, 0.2)] {
            let config = PromotionTestConfig {
                confidence,
                max_episodes: 300,
                metric,
                min_improvement: 0.0,
            };
            let results = simulate(config, p, p, 2000, 11);
            let false_promotions = rate(&results, Verdict::Promote);
            let mean_used =
                results.iter().map(|(_, n)| *n as f64).sum::<f64>() / results.len() as f64;
            println!(
                "{metric:?}, confidence {confidence}, both succeed with {p}: {false_promotions:.4} of 2000 tests promoted, {mean_used:.0} episodes on average"
            );
            assert!(
                false_promotions <= 1.0 - confidence,
                "{metric:?} at confidence {confidence}, p {p}: {false_promotions} promoted"
            );
        }
    }
}

#[test]
fn a_better_challenger_is_promoted_early_and_a_worse_one_rejected_as_worse() {
    let config = PromotionTestConfig {
        max_episodes: 400,
        ..PromotionTestConfig::default()
    };
    let better = simulate(config, 0.5, 0.8, 500, 3);
    assert!(
        rate(&better, Verdict::Promote) >= 0.95,
        "{}",
        rate(&better, Verdict::Promote)
    );
    let mean_used = better.iter().map(|(_, n)| *n as f64).sum::<f64>() / better.len() as f64;
    assert!(
        mean_used < 150.0,
        "a clearly better challenger took {mean_used} episodes"
    );
    let worse = simulate(config, 0.8, 0.3, 500, 4);
    assert_eq!(rate(&worse, Verdict::Promote), 0.0);
    assert!(rate(&worse, Verdict::RejectWorse) >= 0.95);
    // A margin: a challenger 10 points better is not enough for 0.3 of the pairs.
    let strict = PromotionTestConfig {
        min_improvement: 0.3,
        ..config
    };
    let slightly = simulate(strict, 0.5, 0.6, 500, 5);
    assert!(rate(&slightly, Verdict::Promote) <= 0.05);
}

#[test]
fn settings_out_of_range_are_refused_by_name() {
    let bad = PromotionTestConfig {
        confidence: 0.3,
        ..PromotionTestConfig::default()
    };
    assert!(
        bad.validate()
            .unwrap_err()
            .to_string()
            .contains("confidence")
    );
    let bad = PromotionTestConfig {
        max_episodes: 0,
        ..PromotionTestConfig::default()
    };
    assert!(
        bad.validate()
            .unwrap_err()
            .to_string()
            .contains("max_episodes")
    );
    assert!(
        "return"
            .parse::<PromotionMetric>()
            .unwrap_err()
            .contains("not built")
    );
    assert!("speed".parse::<PromotionMetric>().is_err());
}
