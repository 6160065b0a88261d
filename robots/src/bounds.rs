//! Documented valid ranges of config values, and the error that names a key, its value
//! and its range.
//!
//! Every numeric key of every imago config has a range (stated in its doc comment and
//! in docs/configuration.md) that is checked when the config is loaded, before anything
//! is allocated or simulated: a value outside it is one [`ConfigError`], never a panic,
//! an unbounded allocation or a hang later on. This module is the one place that
//! formats those errors, so that every config says the same thing the same way.

use std::fmt::Debug;
use std::ops::RangeInclusive;

use thiserror::Error;

/// A config value outside its documented range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{key} = {value}: {expected}")]
pub struct ConfigError {
    /// The key, dotted from the config's root (`actor.robot.control_hz`).
    pub key: String,
    /// The value as given.
    pub value: String,
    /// What a valid value is (`must be in [0.1, 1000]`).
    pub expected: String,
}

impl ConfigError {
    /// An error for `key` holding `value`, which should be `expected`.
    pub fn new(key: impl Into<String>, value: impl Debug, expected: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }

    /// The same error with its key prefixed by the table that holds it
    /// (`control_hz` inside `actor.robot` becomes `actor.robot.control_hz`).
    pub fn within(mut self, table: &str) -> Self {
        self.key = format!("{table}.{}", self.key);
        self
    }
}

/// Checks that `value` lies in `range` (inclusive at both ends). NaN lies in no range.
pub fn in_range<T: PartialOrd + Debug>(
    key: &str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            &value,
            format!("must be in [{:?}, {:?}]", range.start(), range.end()),
        ))
    }
}

/// Checks that every entry of `values` lies in `range`; the error names the index
/// (`link_lengths[1]`).
pub fn all_in_range<T: PartialOrd + Debug + Copy>(
    key: &str,
    values: &[T],
    range: RangeInclusive<T>,
) -> Result<(), ConfigError> {
    values
        .iter()
        .enumerate()
        .try_for_each(|(i, &v)| in_range(&format!("{key}[{i}]"), v, range.clone()))
}

/// Checks that `values` has between `min` and `max` entries.
pub fn length_in_range<T: Debug>(
    key: &str,
    values: &[T],
    range: RangeInclusive<usize>,
) -> Result<(), ConfigError> {
    if range.contains(&values.len()) {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            values,
            format!(
                "must have between {} and {} entries, not {}",
                range.start(),
                range.end(),
                values.len()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_the_value_and_the_range() {
        assert_eq!(in_range("a", 0.5f32, 0.0..=1.0), Ok(()));
        let error = in_range("control_hz", 1e-30f32, 0.1..=1000.0)
            .unwrap_err()
            .within("actor.robot");
        assert_eq!(
            error.to_string(),
            "actor.robot.control_hz = 1e-30: must be in [0.1, 1000.0]"
        );
        assert!(in_range("x", f32::NAN, f32::MIN..=f32::MAX).is_err());
        assert!(in_range("n", 0usize, 1..=8).is_err());
        let error = all_in_range("link_lengths", &[0.5f32, 0.0], 0.05..=10.0).unwrap_err();
        assert_eq!(error.key, "link_lengths[1]");
        assert!(length_in_range("v", &[1, 2, 3], 1..=2).is_err());
    }
}
