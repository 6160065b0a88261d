//! The logger thread: owns the rerun recording and turns events into archetypes.

use std::collections::HashMap;
use std::time::Instant;

use crossbeam_channel::Receiver;
use rerun::{RecordingStream, RecordingStreamBuilder};

use super::config::TelemetryTarget;
use super::event::{ControlStepEvent, EpisodeStartEvent, ImaginedWindowEvent, TelemetryEvent};
use super::paths::*;
use super::{Channel, blueprint};

/// Opens the recording with the default blueprint.
pub(super) fn open_recording(
    target: &TelemetryTarget,
    application: &'static str,
) -> anyhow::Result<RecordingStream> {
    let builder = RecordingStreamBuilder::new(application)
        .default_enabled(true)
        .with_default_blueprint(blueprint::default_blueprint());
    let recording = match target {
        TelemetryTarget::File(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    anyhow::anyhow!("cannot create {} for the recording: {e}", parent.display())
                })?;
            }
            builder
                .save(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?
        }
        TelemetryTarget::Connect(url) => builder
            .connect_grpc_opts(url.clone())
            .map_err(|e| anyhow::anyhow!("cannot connect to a rerun viewer at {url}: {e}"))?,
        TelemetryTarget::Spawn => builder.spawn().map_err(|e| {
            anyhow::anyhow!(
                "cannot start a rerun viewer ({e}); install it with `pip install rerun-sdk==0.36.*` or use --rerun PATH.rrd"
            )
        })?,
    };
    Ok(recording)
}

/// Where the logger writes.
pub(super) enum Destination {
    /// A recording opened already (a viewer connected to or started).
    Open(RecordingStream),
    /// A file, opened with the first event, or at the end of a session that finished
    /// without one; never for a session abandoned before its first event.
    Pending {
        target: TelemetryTarget,
        application: &'static str,
    },
}

/// The logger's state between events.
struct Logger {
    recording: RecordingStream,
    started: Instant,
    /// Control steps logged so far (the control-step timeline).
    control_step: i64,
    /// The control-step value of step 0 of each logged episode.
    episode_starts: HashMap<u64, i64>,
    /// The current episode's end-effector path.
    path: Vec<[f32; 2]>,
    /// Episodes the promotion gate weighed so far (the promotion-episode timeline).
    promotion_episodes: i64,
}

/// World coordinates to view coordinates (y down, like the camera).
fn view(p: [f32; 2]) -> [f32; 2] {
    [p[0], -p[1]]
}

impl Logger {
    fn clock(&self) {
        self.recording.reset_time();
        self.recording
            .set_duration_secs(WALL_TIME, self.started.elapsed().as_secs_f64());
    }

    /// The clock of something that happened between control steps (a learning step,
    /// an evaluation): also placed on the control-step timeline, after the steps
    /// logged so far, so it shows beside the robot's life on the default timeline.
    fn between_steps(&self) {
        self.clock();
        self.recording
            .set_time_sequence(CONTROL_STEP, self.control_step);
    }

    fn scalar(&self, path: &str, value: f64) -> rerun::RecordingStreamResult<()> {
        self.recording.log(path, &rerun::Scalars::single(value))
    }

    fn episode_start(&mut self, event: &EpisodeStartEvent) -> rerun::RecordingStreamResult<()> {
        self.episode_starts.insert(event.episode, self.control_step);
        self.path.clear();
        self.clock();
        self.recording
            .set_time_sequence(EPISODE, event.episode as i64);
        self.recording
            .set_time_sequence(CONTROL_STEP, self.control_step);
        self.recording.log(
            INSTRUCTION,
            &rerun::TextDocument::new(event.instruction.clone()),
        )?;
        self.recording.log(
            EVENTS,
            &rerun::TextLog::new(format!(
                "episode {}: \"{}\"",
                event.episode, event.instruction
            )),
        )?;
        let targets = &event.targets;
        self.recording.log(
            TARGETS,
            &rerun::Points2D::new(targets.iter().map(|t| view(t.position)))
                .with_colors(
                    targets
                        .iter()
                        .map(|t| rerun::Color::from_rgb(t.rgb[0], t.rgb[1], t.rgb[2])),
                )
                .with_radii(
                    targets
                        .iter()
                        .map(|t| t.radius * if t.instructed { 1.5 } else { 1.0 }),
                )
                .with_labels(targets.iter().map(|t| {
                    if t.instructed {
                        format!("{} (instructed)", t.label)
                    } else {
                        t.label.clone()
                    }
                })),
        )?;
        // A new episode's paths start empty.
        for path in [IMAGINED, IMAGINED_REAL, IMAGINED_BODY, IMAGINED_BODY_REAL] {
            self.recording.log(path, &rerun::Clear::new(true))?;
        }
        Ok(())
    }

    fn control_step(&mut self, event: &ControlStepEvent) -> rerun::RecordingStreamResult<()> {
        let step = self
            .episode_starts
            .get(&event.episode)
            .map_or(self.control_step, |first| first + event.step as i64);
        self.control_step = self.control_step.max(step + 1);
        self.clock();
        self.recording
            .set_time_sequence(EPISODE, event.episode as i64);
        self.recording.set_time_sequence(CONTROL_STEP, step);
        let arm: Vec<[f32; 2]> = event.arm.iter().copied().map(view).collect();
        self.recording.log(
            ARM,
            &rerun::LineStrips2D::new([arm.clone()])
                .with_radii([0.012])
                .with_colors([rerun::Color::from_rgb(90, 90, 90)]),
        )?;
        if let Some(&ee) = arm.last() {
            self.path.push(ee);
            self.recording.log(
                END_EFFECTOR,
                &rerun::Points2D::new([ee])
                    .with_radii([0.02])
                    .with_colors([rerun::Color::from_rgb(250, 200, 40)]),
            )?;
            self.recording.log(
                EE_PATH,
                &rerun::LineStrips2D::new([self.path.clone()])
                    .with_radii([0.004])
                    .with_colors([rerun::Color::from_rgb(250, 200, 40)]),
            )?;
        }
        if !event.intended_path.is_empty() {
            self.recording.log(
                INTENDED_PATH,
                &rerun::LineStrips2D::new([event
                    .intended_path
                    .iter()
                    .copied()
                    .map(view)
                    .collect::<Vec<_>>()])
                .with_radii([0.004])
                .with_colors([rerun::Color::from_rgb(40, 200, 220)]),
            )?;
        }
        for (j, value) in event.intended.iter().enumerate() {
            self.scalar(&format!("{ACTION_INTENDED}/{j}"), *value as f64)?;
        }
        for (j, value) in event.executed.iter().enumerate() {
            self.scalar(&format!("{ACTION_EXECUTED}/{j}"), *value as f64)?;
        }
        self.scalar(REWARD, event.reward as f64)?;
        self.scalar(POLICY_VERSION, event.policy_version as f64)?;
        self.scalar(INTERVENTION, event.intervention as u8 as f64)?;
        if let Some(tick) = event.tick {
            self.scalar(TICK_LATENCY, tick.latency_ms)?;
            self.scalar(DEADLINE_MISSES, tick.deadline_misses as f64)?;
        }
        if let Some(frame) = &event.frame {
            self.recording.log(
                CAMERA,
                &rerun::Image::from_rgb24(frame.rgb.clone(), [frame.width, frame.height]),
            )?;
        }
        Ok(())
    }

    fn imagined(&mut self, event: &ImaginedWindowEvent) -> rerun::RecordingStreamResult<()> {
        let step = self
            .episode_starts
            .get(&event.episode)
            .map_or(self.control_step, |first| first + event.start_step as i64);
        self.clock();
        self.recording
            .set_time_sequence(EPISODE, event.episode as i64);
        self.recording.set_time_sequence(CONTROL_STEP, step);
        let strips: Vec<Vec<[f32; 2]>> = event
            .members
            .iter()
            .map(|m| m.iter().copied().map(view).collect())
            .collect();
        self.recording.log(
            IMAGINED,
            &rerun::LineStrips2D::new(strips.clone())
                .with_radii([0.003])
                .with_colors([rerun::Color::from_unmultiplied_rgba(200, 60, 200, 170)])
                .with_labels((0..strips.len()).map(|m| format!("member {m}"))),
        )?;
        self.recording.log(
            IMAGINED_REAL,
            &rerun::LineStrips2D::new([event.real.iter().copied().map(view).collect::<Vec<_>>()])
                .with_radii([0.006])
                .with_colors([rerun::Color::from_rgb(235, 235, 235)]),
        )?;
        if let Some(bodies) = &event.bodies {
            for (path, body, colour) in [
                (
                    IMAGINED_BODY,
                    &bodies.imagined,
                    rerun::Color::from_unmultiplied_rgba(200, 60, 200, 200),
                ),
                (
                    IMAGINED_BODY_REAL,
                    &bodies.real,
                    rerun::Color::from_rgb(235, 235, 235),
                ),
            ] {
                self.recording.log(
                    path,
                    &rerun::LineStrips2D::new([body.iter().copied().map(view).collect::<Vec<_>>()])
                        .with_radii([0.004])
                        .with_colors([colour]),
                )?;
            }
        }
        for (h, ((error, spread), bound)) in event
            .error
            .iter()
            .zip(&event.disagreement)
            .zip(&event.interval)
            .enumerate()
        {
            self.scalar(&format!("{ROLLOUT_ERROR}/h{}", h + 1), *error as f64)?;
            self.scalar(&format!("{DISAGREEMENT}/h{}", h + 1), *spread as f64)?;
            self.scalar(&format!("{INTERVAL}/h{}", h + 1), *bound as f64)?;
        }
        Ok(())
    }

    fn handle(&mut self, event: TelemetryEvent, dropped: u64) -> rerun::RecordingStreamResult<()> {
        match event {
            TelemetryEvent::Note(text) => {
                self.between_steps();
                self.recording.log(EVENTS, &rerun::TextLog::new(text))?;
            }
            TelemetryEvent::EpisodeStart(event) => self.episode_start(&event)?,
            TelemetryEvent::ControlStep(event) => self.control_step(&event)?,
            TelemetryEvent::EpisodeEnd(event) => {
                self.clock();
                self.recording
                    .set_time_sequence(EPISODE, event.episode as i64);
                self.scalar(EPISODE_SUCCESS, event.success as u8 as f64)?;
                self.scalar(EPISODE_RETURN, event.episode_return as f64)?;
                self.recording
                    .set_time_sequence(CONTROL_STEP, self.control_step);
                self.scalar(DROPPED, dropped as f64)?;
                self.recording.log(
                    EVENTS,
                    &rerun::TextLog::new(format!(
                        "episode {} {} after {} steps, return {:.2}",
                        event.episode,
                        if event.success { "succeeded" } else { "failed" },
                        event.steps,
                        event.episode_return
                    )),
                )?;
            }
            TelemetryEvent::LearnerScalars { version, values } => {
                self.between_steps();
                self.recording
                    .set_time_sequence(LEARNER_STEP, version as i64);
                for (name, value) in values {
                    self.scalar(&format!("{LEARNER}/{name}"), value)?;
                }
                self.scalar(DROPPED, dropped as f64)?;
            }
            TelemetryEvent::TransitionWeights {
                version,
                advantages,
                weights,
            } => {
                self.between_steps();
                self.recording
                    .set_time_sequence(LEARNER_STEP, version as i64);
                self.recording
                    .log(ADVANTAGES, &rerun::BarChart::new(advantages))?;
                self.recording
                    .log(WEIGHTS, &rerun::BarChart::new(weights))?;
            }
            TelemetryEvent::LossCurve { run, term, values } => {
                let times = rerun::TimeColumn::new_sequence(OPTIMIZER_STEP, 0..values.len() as i64);
                self.recording.send_columns(
                    format!("{TRAIN}/{run}/{term}"),
                    [times],
                    rerun::Scalars::new(values.into_iter().map(f64::from))
                        .columns_of_unit_batches()?,
                )?;
            }
            TelemetryEvent::WorldModelEvaluation {
                horizon_error,
                copy_last_error,
                coverage_2sigma,
            } => {
                self.between_steps();
                self.recording
                    .log(EVAL_HORIZON_ERROR, &rerun::BarChart::new(horizon_error))?;
                self.recording
                    .log(EVAL_COPY_LAST_ERROR, &rerun::BarChart::new(copy_last_error))?;
                self.recording
                    .log(EVAL_COVERAGE, &rerun::BarChart::new(coverage_2sigma))?;
            }
            TelemetryEvent::ProbeFit(rmse) => {
                self.between_steps();
                self.scalar(PROBE_RMSE, rmse as f64)?;
            }
            TelemetryEvent::Imagined(event) => self.imagined(&event)?,
            TelemetryEvent::EvalSuccess { name, rate } => {
                self.between_steps();
                self.scalar(&format!("{EVAL}/{name}"), rate)?;
                self.recording.log(
                    EVENTS,
                    &rerun::TextLog::new(format!("evaluation: {name} {:.1}%", 100.0 * rate)),
                )?;
            }
            TelemetryEvent::PromotionStatistics(values) => {
                self.between_steps();
                self.promotion_episodes += 1;
                self.recording
                    .set_time_sequence(PROMOTION_EPISODE, self.promotion_episodes);
                for (name, value) in values {
                    self.scalar(&format!("{PROMOTION}/{name}"), value)?;
                }
            }
            TelemetryEvent::Finish => {}
        }
        Ok(())
    }
}

/// Logs events until [`TelemetryEvent::Finish`] (or every producer is gone), then
/// flushes; returns the number of events logged.
pub(super) fn run_logger(
    destination: Destination,
    events: Receiver<TelemetryEvent>,
    channel: &Channel,
) -> anyhow::Result<u64> {
    let started = Instant::now();
    let start = |recording| Logger {
        recording,
        started,
        control_step: 0,
        episode_starts: HashMap::new(),
        path: Vec::new(),
        promotion_episodes: 0,
    };
    let (mut logger, pending) = match destination {
        Destination::Open(recording) => (Some(start(recording)), None),
        Destination::Pending {
            target,
            application,
        } => (None, Some((target, application))),
    };
    let open = |pending: &Option<(TelemetryTarget, &'static str)>| match pending {
        Some((target, application)) => open_recording(target, application).map(start),
        None => unreachable!("a logger without a recording has one pending"),
    };
    let mut logged = 0;
    for event in events.iter() {
        if event == TelemetryEvent::Finish {
            break;
        }
        let dropped = channel.dropped.load(std::sync::atomic::Ordering::Relaxed);
        let current = match &mut logger {
            Some(current) => current,
            None => logger.insert(open(&pending)?),
        };
        current
            .handle(event, dropped)
            .map_err(|e| anyhow::anyhow!("rerun logging failed: {e}"))?;
        logged += 1;
    }
    if logger.is_none() && !channel.abandoned.load(std::sync::atomic::Ordering::Relaxed) {
        logger = Some(open(&pending)?);
    }
    if let Some(logger) = logger {
        logger
            .recording
            .flush_with_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| anyhow::anyhow!("cannot flush the recording: {e}"))?;
    }
    Ok(logged)
}
