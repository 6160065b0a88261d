//! `imago bench --what bridge`: the bridge's round trip on loopback. A reacher2d is
//! served on its own thread (as `imago robot-serve` serves it) and driven through
//! [`RemoteRobot`], one step per round trip, with raw and deflated frames at each
//! camera size; the same robot stepped locally gives the part of the round trip that
//! is simulation and rendering, so the rest is the bridge.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use imago_robots::{Action, Robot};
use serde::Serialize;

use crate::bridge::protocol::{ObservationMessage, WireFrame, encode};
use crate::bridge::{
    FrameEncoding, LinkConfig, RemoteRobot, RemoteRobotSettings, ServeOptions, serve_robot,
};
use crate::robot::RobotConfig;
use crate::stats::quantile;

/// One frame size and encoding.
#[derive(Debug, Clone, Serialize)]
pub struct BridgeBenchRow {
    /// Camera side, pixels.
    pub image_size: u32,
    /// `raw` or `deflate`.
    pub frames: String,
    /// Bytes of one observation message.
    pub message_bytes: usize,
    /// Command sent to observation decoded, ms.
    pub round_trip_p50_ms: f64,
    /// The same, 99th percentile.
    pub round_trip_p99_ms: f64,
    /// The robot's step (simulation and rendering) alone, median, ms.
    pub local_step_p50_ms: f64,
}

/// What deflating one frame costs and saves, for a frame of a given content.
#[derive(Debug, Clone, Serialize)]
pub struct FrameCodecRow {
    /// Camera side, pixels.
    pub image_size: u32,
    /// `reacher2d` (flat colours, as rendered) or `noise` (every byte random: the
    /// worst case, close to a real camera's sensor noise).
    pub content: String,
    /// Raw frame bytes.
    pub raw_bytes: usize,
    /// Deflated frame bytes.
    pub deflate_bytes: usize,
    /// Deflating it, median ms.
    pub encode_p50_ms: f64,
    /// Inflating it, median ms.
    pub decode_p50_ms: f64,
}

/// Deflate's size and time on a reacher2d frame and on a frame of noise, per size.
pub fn bench_frame_codec(sizes: &[u32], steps: usize) -> anyhow::Result<Vec<FrameCodecRow>> {
    use rand::{RngExt, SeedableRng};
    let mut rows = Vec::new();
    for &size in sizes {
        let robot = reacher2d(size, 60)?;
        let rendered = robot
            .build()?
            .reset(0)
            .image
            .ok_or_else(|| anyhow::anyhow!("reacher2d has a camera"))?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let noise = imago_robots::Image {
            rgb: (0..rendered.rgb.len())
                .map(|_| rng.random::<u8>())
                .collect(),
            ..rendered.clone()
        };
        for (content, image) in [("reacher2d", rendered), ("noise", noise)] {
            let time = |f: &mut dyn FnMut()| {
                let times: Vec<f64> = (0..steps)
                    .map(|_| {
                        let start = Instant::now();
                        f();
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                quantile(&times, 0.5)
            };
            let encoded = WireFrame::encode(&image, FrameEncoding::Deflate);
            rows.push(FrameCodecRow {
                image_size: size,
                content: content.into(),
                raw_bytes: image.rgb.len(),
                deflate_bytes: encoded.bytes.len(),
                encode_p50_ms: time(&mut || {
                    std::hint::black_box(WireFrame::encode(&image, FrameEncoding::Deflate));
                }),
                decode_p50_ms: time(&mut || {
                    std::hint::black_box(encoded.decode().ok());
                }),
            });
        }
    }
    Ok(rows)
}

/// Times `steps` round trips per camera size in `sizes` and per frame encoding.
pub fn bench_bridge(sizes: &[u32], steps: usize) -> anyhow::Result<Vec<BridgeBenchRow>> {
    let mut rows = Vec::new();
    for &size in sizes {
        // Long episodes: the timed steps are not interrupted by resets.
        let robot = reacher2d(size, 100_000)?;
        let local = local_step_ms(&robot, steps)?;
        for frames in [FrameEncoding::Raw, FrameEncoding::Deflate] {
            rows.push(round_trips(&robot, frames, steps, local)?);
        }
    }
    Ok(rows)
}

/// reacher2d from the registry with camera side `size` and episodes of `max_steps`.
fn reacher2d(size: u32, max_steps: u32) -> anyhow::Result<RobotConfig> {
    let mut table = toml::Table::new();
    table.insert("image_size".into(), i64::from(size).into());
    table.insert("max_steps".into(), i64::from(max_steps).into());
    RobotConfig::from_table("reacher2d", &table)
}

/// The median time of one local step of `robot`, ms.
fn local_step_ms(robot: &RobotConfig, steps: usize) -> anyhow::Result<f64> {
    let mut sim = robot.build()?;
    sim.reset(0);
    let action = Action(vec![0.2; robot.spec().action_dim()]);
    let times: Vec<f64> = (0..steps)
        .map(|_| {
            let start = Instant::now();
            sim.step(&action);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    Ok(quantile(&times, 0.5))
}

fn round_trips(
    robot: &RobotConfig,
    frames: FrameEncoding,
    steps: usize,
    local_step_p50_ms: f64,
) -> anyhow::Result<BridgeBenchRow> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let key = format!("imago/bench/{}/{port}", std::process::id());
    let options = ServeOptions {
        key: key.clone(),
        link: LinkConfig::explicit(vec![format!("tcp/127.0.0.1:{port}")], vec![]),
        frames,
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server = scope.spawn(|| serve_robot(robot, &options, &stop, || {}));
        let timed = (|| {
            let settings = RemoteRobotSettings {
                key: key.clone(),
                link: LinkConfig::explicit(vec![], vec![format!("tcp/127.0.0.1:{port}")]),
                // A round trip may take up to the period; none is cut short here.
                max_observation_age_ms: Some(1000.0 / robot.spec().control_hz),
                ..RemoteRobotSettings::default()
            };
            let config = settings.connect()?;
            let mut remote = RemoteRobot::open(&config)?;
            let never = AtomicBool::new(false);
            let started = Instant::now();
            while !remote.is_alive() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let first = remote
                .reset(0, 0, &never)?
                .ok_or_else(|| anyhow::anyhow!("no reset"))?;
            let message_bytes = encode(&ObservationMessage::new(0, 1, &first, None, frames)).len();
            let action = vec![0.2; robot.spec().action_dim()];
            let mut times = Vec::with_capacity(steps);
            for _ in 0..steps + 5 {
                let start = Instant::now();
                remote
                    .step(0, 1, &action, &action)?
                    .map_err(|why| anyhow::anyhow!("a round trip failed: {why:?}"))?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            let times = &times[5..];
            anyhow::Ok(BridgeBenchRow {
                image_size: robot.spec().camera.map_or(0, |c| c.width),
                frames: format!("{frames:?}").to_lowercase(),
                message_bytes,
                round_trip_p50_ms: quantile(times, 0.5),
                round_trip_p99_ms: quantile(times, 0.99),
                local_step_p50_ms,
            })
        })();
        stop.store(true, Ordering::Relaxed);
        let served = server
            .join()
            .map_err(|_| anyhow::anyhow!("the bench's server panicked"))?;
        served?;
        timed
    })
}
