//! Reading a replay for an offline command: whole episodes only, damage reported
//! (or refused with `--strict`), and the robot spec the replay records, which every
//! offline command takes its models' shapes from.

use std::path::Path;

use imago_robots::RobotSpec;

use super::{Episode, EpisodeShape, ReplayContents, read_replay};
use crate::robot::RobotConfig;
use crate::store::outputs::Input;

/// A replay read for an offline command: its whole episodes and the robot they are of.
#[derive(Debug, Clone)]
pub struct TrainingReplay {
    /// What was read.
    pub contents: ReplayContents,
    /// The robot spec the episodes are of: the manifest's, or for a replay written
    /// before manifests recorded it, the default reacher2d's (checked to fit).
    pub spec: RobotSpec,
    /// The robot's settings when the replay records them (or, before it did, the
    /// default reacher2d's); `None` when they are unreadable by this build or do not
    /// give the recorded spec. Used to redraw recorded scenes, never for shapes.
    pub robot: Option<RobotConfig>,
}

impl TrainingReplay {
    /// The robot's settings, for a command that needs them `because` (the end of the
    /// error's sentence: "so it needs them" follows); a replay in `dir` whose settings
    /// this build cannot read is an error naming the robot it records.
    pub fn robot_settings(&self, dir: &Path, because: &str) -> anyhow::Result<RobotConfig> {
        self.robot.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "replay {} records {} but not its settings in a form this build reads; {because}, so it needs them",
                dir.display(),
                self.spec.summary()
            )
        })
    }
}

/// A replay an offline command reads, which of its whole episodes it keeps, and how
/// it treats damage.
#[derive(Debug, Clone, Copy)]
pub struct ReplaySource<'a> {
    /// The replay directory.
    pub dir: &'a Path,
    /// Any damage is an error (`--strict`), instead of leaving damaged episodes out
    /// with a warning.
    pub strict: bool,
    /// Which whole episodes the command uses.
    pub episodes: EpisodeSelection,
}

/// Which whole episodes of a replay an offline command uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EpisodeSelection {
    /// Every whole episode.
    #[default]
    All,
    /// Only the episodes that ended in success (`--successful-only`): a demonstrator
    /// that fails some of the time teaches its failures too, and cloning only its
    /// successes (filtered behaviour cloning) does not.
    Successful,
    /// Only the episodes a policy of at least this version recorded every tick of
    /// (`wm-eval --from-version`): a fine-tuning run's later rounds, the demonstrations
    /// (version 0) left out, to score a model on the states a changed policy visits.
    FromVersion(u64),
}

impl EpisodeSelection {
    /// Whether `episode` is one of the selected.
    pub fn keeps(self, episode: &Episode) -> bool {
        match self {
            Self::All => true,
            Self::Successful => episode.end.success,
            Self::FromVersion(version) => episode
                .transitions
                .iter()
                .all(|t| t.policy_version >= version),
        }
    }

    /// The flag that asked for this selection, and what it needs, for messages.
    fn wanted(self) -> (&'static str, String) {
        match self {
            Self::All => ("", String::new()),
            Self::Successful => ("--successful-only", "ended in success".into()),
            Self::FromVersion(version) => (
                "--from-version",
                format!("were recorded by a policy of version {version} or later"),
            ),
        }
    }

    /// Keeps the selected episodes of `contents` and says on standard error how many
    /// of how many it kept; none left is an error naming the replay.
    pub fn apply(self, contents: &mut ReplayContents, replay: &Path) -> anyhow::Result<()> {
        if self == Self::All {
            return Ok(());
        }
        let whole = contents.episodes.len();
        contents.episodes.retain(|episode| self.keeps(episode));
        let (flag, needs) = self.wanted();
        anyhow::ensure!(
            !contents.episodes.is_empty(),
            "replay {} holds {whole} whole episodes and none {needs}; {flag} needs at least one (leave it out to use them all)",
            replay.display()
        );
        eprintln!(
            "using the {} episodes of {whole} that {needs} ({flag})",
            contents.episodes.len()
        );
        Ok(())
    }
}

impl ReplaySource<'_> {
    /// The inputs of a training command: this replay (`--replay`) and the checkpoint it
    /// continues from (`--init`), for the output check.
    pub fn inputs_with<'a>(&'a self, init: Option<&'a Path>) -> Vec<Input<'a>> {
        let mut inputs = vec![Input {
            flag: "--replay",
            path: self.dir,
        }];
        inputs.extend(init.map(|path| Input {
            flag: "--init",
            path,
        }));
        inputs
    }

    /// A cheap check that `dir` is a replay at all, for commands to fail on a wrong
    /// `--replay` before anything else.
    pub fn ensure_exists(&self) -> anyhow::Result<()> {
        crate::store::replay::segment_files(self.dir).map(|_| ())
    }
}

/// Damage lines printed in full; the rest are counted (`imago replay check` lists all).
const DAMAGE_LINES_SHOWN: usize = 10;

/// Reads a replay for an offline command: whole episodes only, every damaged one left
/// out with the count and the reason on standard error (an error with `strict`), with
/// the robot spec the replay records (see [`TrainingReplay::spec`]).
pub fn read_training_replay(source: ReplaySource<'_>) -> anyhow::Result<TrainingReplay> {
    let replay = source.dir;
    let mut contents = read_replay(replay)?;
    let lines = contents.damage_lines();
    if contents.is_damaged() {
        let summary = format!(
            "replay {} is damaged: {} episodes left out, {} damaged stretches",
            replay.display(),
            contents.damaged.len(),
            contents.corruptions.len()
        );
        anyhow::ensure!(
            !source.strict,
            "{summary} (--strict); `imago replay check {0}` lists them, `imago replay repair {0} --out NEW` writes a clean copy",
            replay.display()
        );
        eprintln!("warning: {summary}; every whole episode is used:");
        for line in lines.iter().take(DAMAGE_LINES_SHOWN) {
            eprintln!("warning:   {line}");
        }
        if lines.len() > DAMAGE_LINES_SHOWN {
            eprintln!(
                "warning:   and {} more (`imago replay check {}` lists all)",
                lines.len() - DAMAGE_LINES_SHOWN,
                replay.display()
            );
        }
    }
    anyhow::ensure!(
        !contents.episodes.is_empty(),
        "replay {} holds no whole episode{}; record some with `imago collect`",
        replay.display(),
        if contents.damaged.is_empty() {
            String::new()
        } else {
            format!(" ({} damaged ones were left out)", contents.damaged.len())
        }
    );
    let (spec, robot) = replay_robot(&contents, replay)?;
    source.episodes.apply(&mut contents, replay)?;
    Ok(TrainingReplay {
        contents,
        spec,
        robot,
    })
}

/// The spec and settings of the robot a replay's episodes are of (see
/// [`TrainingReplay`]).
pub fn replay_robot(
    contents: &ReplayContents,
    replay: &Path,
) -> anyhow::Result<(RobotSpec, Option<RobotConfig>)> {
    let Some(spec) = &contents.spec else {
        let robot = RobotConfig::before_recorded_specs();
        let spec = robot.spec();
        check_replay_robot(contents, replay, &spec).map_err(|e| {
            e.context(format!(
                "replay {} records no robot spec (it predates them) and its episodes do not fit the default {}",
                replay.display(),
                robot.name()
            ))
        })?;
        return Ok((spec, Some(robot)));
    };
    let robot = contents
        .robot
        .as_ref()
        .and_then(|value| RobotConfig::from_json(value).ok())
        .filter(|robot| robot.spec().data_differences(spec).is_empty());
    Ok((spec.clone(), robot))
}

/// Checks that the replay's episodes are of the robot `expected`: by the spec its
/// manifest records, or (replays written before it did) by the shape of its episodes.
pub fn check_replay_robot(
    contents: &ReplayContents,
    replay: &Path,
    expected: &RobotSpec,
) -> anyhow::Result<()> {
    let differences = match (&contents.spec, &contents.shape) {
        (Some(spec), _) => spec.data_differences(expected),
        (None, Some(shape)) => {
            let wanted = EpisodeShape::of(expected);
            if *shape == wanted {
                Vec::new()
            } else {
                vec![format!("episodes shaped {shape:?} vs {wanted:?}")]
            }
        }
        (None, None) => Vec::new(),
    };
    anyhow::ensure!(
        differences.is_empty(),
        "replay {} records another robot than the one expected (replay vs expected: {})",
        replay.display(),
        differences.join(", ")
    );
    Ok(())
}
