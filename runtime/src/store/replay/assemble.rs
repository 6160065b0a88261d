//! Assembling records into episodes that are whole or absent: structure (a start,
//! steps `0..n` in order, an end whose count matches, one episode id) and shape (image
//! size, vector lengths, finite values) are checked, and an episode that fails either,
//! or that damage cuts through, is reported with the reason instead of handed out.

use std::collections::HashSet;

use imago_robots::{Action, Observation, RobotSpec};

use super::record::{Episode, EpisodeEnd, EpisodeOrigin, EpisodeStart, ReplayRecord, Transition};

/// What every observation and action of a replay's episodes must look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeShape {
    /// Camera frame size `(width, height)`; `None`: observations carry no frame.
    pub camera: Option<(u32, u32)>,
    /// Length of the proprioception vector.
    pub proprio: usize,
    /// Length of an action.
    pub action: usize,
}

impl EpisodeShape {
    /// The shape of `spec`'s observations and actions.
    pub fn of(spec: &RobotSpec) -> Self {
        Self {
            camera: spec.camera.map(|c| (c.width, c.height)),
            proprio: spec.proprio_dim(),
            action: spec.action_dim(),
        }
    }

    /// The shape of the first step of `transitions` (for replays written before the
    /// manifest carried a spec).
    fn inferred(transitions: &[Transition]) -> Option<Self> {
        let first = transitions.first()?;
        Some(Self {
            camera: first
                .observation
                .image
                .as_ref()
                .map(|i| (i.width, i.height)),
            proprio: first.observation.proprio.len(),
            action: first.action.0.len(),
        })
    }

    /// Why `observation` does not fit, if it does not.
    pub fn check_observation(&self, observation: &Observation) -> Result<(), String> {
        match (&observation.image, self.camera) {
            (None, None) => {}
            (Some(image), Some((width, height))) => {
                if (image.width, image.height) != (width, height) {
                    return Err(format!(
                        "a {}x{} camera frame where the robot's camera is {width}x{height}",
                        image.width, image.height
                    ));
                }
                let bytes = width as usize * height as usize * 3;
                if image.rgb.len() != bytes {
                    return Err(format!(
                        "a camera frame of {} bytes where {width}x{height} RGB is {bytes}",
                        image.rgb.len()
                    ));
                }
            }
            (None, Some(_)) => return Err("an observation without its camera frame".into()),
            (Some(_), None) => {
                return Err("a camera frame, but the robot has no camera".into());
            }
        }
        vector("proprioception", &observation.proprio, self.proprio)
    }

    fn check_action(&self, what: &str, action: &Action) -> Result<(), String> {
        vector(what, &action.0, self.action)
    }

    fn check_transition(&self, t: &Transition) -> Result<(), String> {
        let at = |e: String| format!("step {}: {e}", t.step);
        self.check_observation(&t.observation).map_err(at)?;
        self.check_action("commanded action", &t.action)
            .map_err(at)?;
        self.check_action("executed action", &t.executed)
            .map_err(at)?;
        if !t.reward.is_finite() {
            return Err(at(format!("a reward of {}", t.reward)));
        }
        if let Some(log_prob) = t.behaviour_log_prob.filter(|l| !l.is_finite()) {
            return Err(at(format!("a behaviour log-density of {log_prob}")));
        }
        Ok(())
    }
}

fn vector(what: &str, values: &[f32], len: usize) -> Result<(), String> {
    if values.len() != len {
        return Err(format!(
            "a {what} of {} entries where the robot has {len}",
            values.len()
        ));
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(format!("{what} entry {i} is {}", values[i])),
        None => Ok(()),
    }
}

/// An episode left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedEpisode {
    /// Its id.
    pub episode: u64,
    /// The segment where its first record was read.
    pub segment: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for DamagedEpisode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "episode {} (segment {}) left out: {}",
            self.episode, self.segment, self.reason
        )
    }
}

/// The episode being assembled.
struct Open {
    start: EpisodeStart,
    origin: Option<EpisodeOrigin>,
    transitions: Vec<Transition>,
    segment: String,
    /// Set at the first problem; the episode's further records are consumed unread.
    problem: Option<String>,
}

/// Turns a stream of records (with the cuts damage makes in it) into episodes.
pub(super) struct Assembler {
    shape: Option<EpisodeShape>,
    open: Option<Open>,
    seen: HashSet<u64>,
    /// The episode whose remaining records are skipped (reported already).
    skipping: Option<u64>,
    /// Ids of records without a start that were reported.
    orphans: HashSet<u64>,
    /// Where the last damage was, until the next episode start.
    cut_at: Option<String>,
    /// Episodes a writer session ended in the middle of.
    unfinished: u64,
    /// Whole episodes and the segment where each began.
    pub episodes: Vec<(Episode, String)>,
    /// Episodes left out.
    pub damaged: Vec<DamagedEpisode>,
    /// The origins of the whole episodes, in order.
    pub origins: Vec<EpisodeOrigin>,
}

impl Assembler {
    /// An assembler checking episodes against `shape`; `None`: against the shape of
    /// the first whole episode.
    pub fn new(shape: Option<EpisodeShape>) -> Self {
        Self {
            shape,
            open: None,
            seen: HashSet::new(),
            skipping: None,
            orphans: HashSet::new(),
            cut_at: None,
            unfinished: 0,
            episodes: Vec::new(),
            damaged: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// The shape episodes are checked against (once known).
    pub fn shape(&self) -> Option<&EpisodeShape> {
        self.shape.as_ref()
    }

    /// Takes one record read from `segment`.
    pub fn record(&mut self, record: ReplayRecord, segment: &str) {
        match record {
            ReplayRecord::EpisodeStart(start) => self.start(start, segment),
            ReplayRecord::Transition(t) => self.transition(*t, segment),
            ReplayRecord::EpisodeEnd(end) => self.end(*end, segment),
            ReplayRecord::EpisodeAbandoned(abandoned) => self.abandon(abandoned.episode),
            ReplayRecord::EpisodeOrigin(origin) => {
                if let Some(open) = self
                    .open
                    .as_mut()
                    .filter(|open| open.start.episode == origin.episode)
                {
                    open.origin = Some(origin);
                }
            }
        }
    }

    /// The open episode `episode` was given up: it is unfinished, not damaged.
    fn abandon(&mut self, episode: u64) {
        if self
            .open
            .as_ref()
            .is_some_and(|open| open.start.episode == episode)
        {
            self.session_end();
        }
    }

    /// Damage at `place`: the open episode is cut there and left out, and records of
    /// it after the damage are not joined to what came before.
    pub fn cut(&mut self, place: &str) {
        self.cut_at = Some(place.to_string());
        if let Some(mut open) = self.open.take() {
            open.problem
                .get_or_insert_with(|| format!("cut by damage at {place}"));
            self.reject(open);
        }
    }

    /// A writer session ended here (a stop or a crash): the open episode is
    /// unfinished, not damaged, and records of it that follow are not joined to it.
    pub fn session_end(&mut self) {
        if let Some(open) = self.open.take() {
            if open.problem.is_some() {
                self.reject(open);
            } else {
                self.unfinished += 1;
                self.skipping = Some(open.start.episode);
            }
        }
    }

    /// Ends the stream; returns how many episodes were left unfinished (by the end of
    /// a writer session, or still open: in progress when the replay was read).
    pub fn finish(&mut self) -> u64 {
        self.session_end();
        self.unfinished
    }

    fn start(&mut self, start: EpisodeStart, segment: &str) {
        if let Some(mut open) = self.open.take() {
            open.problem.get_or_insert_with(|| {
                format!("no end record before episode {} began", start.episode)
            });
            self.reject(open);
        }
        let problem = (!self.seen.insert(start.episode))
            .then(|| format!("episode id {} appears twice", start.episode));
        self.skipping = None;
        self.cut_at = None;
        self.open = Some(Open {
            start,
            origin: None,
            transitions: Vec::new(),
            segment: segment.to_string(),
            problem,
        });
    }

    fn transition(&mut self, t: Transition, segment: &str) {
        let Some(open) = self.open.as_mut() else {
            return self.orphan(t.episode, segment);
        };
        if open.problem.is_some() {
            return;
        }
        if t.episode != open.start.episode {
            open.problem = Some(format!("a transition of episode {} inside it", t.episode));
        } else if t.step as usize != open.transitions.len() {
            open.problem = Some(format!(
                "step {} where step {} was due",
                t.step,
                open.transitions.len()
            ));
        } else {
            open.transitions.push(t);
        }
    }

    fn end(&mut self, end: EpisodeEnd, segment: &str) {
        let Some(mut open) = self.open.take() else {
            return self.orphan(end.episode, segment);
        };
        if open.problem.is_none() {
            open.problem = structure_problem(&open, &end);
        }
        if open.problem.is_none() {
            let shape = match &self.shape {
                Some(shape) => Some(shape.clone()),
                None => EpisodeShape::inferred(&open.transitions),
            };
            open.problem = shape.as_ref().and_then(|shape| {
                open.transitions
                    .iter()
                    .try_for_each(|t| shape.check_transition(t))
                    .and_then(|()| {
                        shape
                            .check_observation(&end.final_observation)
                            .map_err(|e| format!("final observation: {e}"))
                    })
                    .err()
            });
            if open.problem.is_none() && self.shape.is_none() {
                self.shape = shape;
            }
        }
        if open.problem.is_some() {
            return self.reject(open);
        }
        self.origins.extend(open.origin);
        self.episodes.push((
            Episode {
                start: open.start,
                transitions: open.transitions,
                end,
            },
            open.segment,
        ));
    }

    fn reject(&mut self, open: Open) {
        self.skipping = Some(open.start.episode);
        self.damaged.push(DamagedEpisode {
            episode: open.start.episode,
            segment: open.segment,
            reason: open.problem.unwrap_or_default(),
        });
    }

    /// A transition or end with no open episode: the rest of an episode that was cut
    /// (reported already), or records whose start is missing.
    fn orphan(&mut self, episode: u64, segment: &str) {
        if self.skipping == Some(episode) || !self.orphans.insert(episode) {
            return;
        }
        let reason = match &self.cut_at {
            Some(place) => format!("its start was lost to damage at {place}"),
            None => "records without an episode start".into(),
        };
        self.damaged.push(DamagedEpisode {
            episode,
            segment: segment.to_string(),
            reason,
        });
    }
}

/// Why an episode with these transitions and `end` is not structurally whole.
fn structure_problem(open: &Open, end: &EpisodeEnd) -> Option<String> {
    let steps = open.transitions.len();
    if end.episode != open.start.episode {
        return Some(format!(
            "an end record of episode {} closes it",
            end.episode
        ));
    }
    if end.steps as usize != steps {
        return Some(format!(
            "its end record counts {} steps, {steps} were recorded",
            end.steps
        ));
    }
    let Some(last) = open.transitions.last() else {
        return Some("it has no transitions".into());
    };
    if let Some(early) = open.transitions[..steps - 1].iter().find(|t| t.done) {
        return Some(format!("step {} is marked done before its end", early.step));
    }
    if !last.done {
        return Some("its last step is not marked done".into());
    }
    if last.success != end.success {
        return Some("its end record's success disagrees with its last step".into());
    }
    None
}
