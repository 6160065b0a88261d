//! Measures the scripted PushT expert: success rate, mean final and max coverage and
//! episode length over a range of seeds.
//!
//! `cargo run --release -p imago-robots --example pusht_expert -- [SEEDS] [NOISE] [MISTAKE_RATE] [DUMP]`
//! (defaults: 200 seeds, noise 0, mistake rate 0). With `DUMP`, every episode is also
//! written there as one JSON line ([`ExpertEpisode`]), which
//! `scripts/pusht_crosscheck.py` replays in gym-pusht itself.

use std::io::Write;

use imago_robots::pusht::{ExpertEpisode, PushT};
use imago_robots::{ExpertConfig, FrameSource};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: f64| -> f64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("argument {} = {a:?} is not a number", i + 1);
                std::process::exit(2)
            })
        })
    };
    let seeds = arg(0, 200.0) as u64;
    let config = ExpertConfig {
        noise: arg(1, 0.0) as f32,
        mistake_rate: arg(2, 0.0),
    };
    if let Err(e) = config.validate() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let mut dump = args.get(3).map(|path| {
        std::io::BufWriter::new(std::fs::File::create(path).unwrap_or_else(|e| {
            eprintln!("cannot create {path}: {e}");
            std::process::exit(2)
        }))
    });
    let mut robot = PushT::default();
    robot.set_frame_source(FrameSource::Caller);
    let (mut successes, mut final_coverage, mut max_coverage, mut steps) = (0u64, 0.0, 0.0, 0u64);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        let episode = ExpertEpisode::record(&mut robot, &config, seed);
        successes += episode.success as u64;
        final_coverage += episode.coverage.last().copied().unwrap_or(0.0);
        max_coverage += episode.max_coverage();
        steps += episode.targets.len() as u64;
        if let Some(out) = dump.as_mut() {
            let line = serde_json::to_string(&episode).expect("an episode is JSON");
            writeln!(out, "{line}").expect("dump written");
        }
    }
    let n = seeds.max(1) as f64;
    println!(
        "pusht expert (noise {}, mistake_rate {}), seeds 0..{seeds}: success {:.3}, mean final coverage {:.3}, mean max coverage {:.3}, mean steps {:.1}, {:.1} s",
        config.noise,
        config.mistake_rate,
        successes as f64 / n,
        final_coverage / n,
        max_coverage / n,
        steps as f64 / n,
        started.elapsed().as_secs_f64()
    );
}
