//! A word-level tokenizer with a fixed vocabulary.
//!
//! Instructions are lower-cased, split on whitespace and stripped of punctuation; every
//! word must be in [`VOCABULARY`]. An unknown word is an error that names the word and
//! the vocabulary, never a silent `<unk>`: a policy given words it was never trained on
//! should not pretend to understand them.

use thiserror::Error;

/// The vocabulary; index 0 is padding. New words go at the end, so that the ids of a
/// checkpoint's words never change.
pub const VOCABULARY: [&str; 18] = [
    "<pad>", "reach", "move", "touch", "go", "to", "the", "a", "red", "green", "blue", "target",
    "one", "please", "now", "push", "block", "onto",
];

/// Why an instruction cannot be tokenized.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenizerError {
    /// A word outside the vocabulary.
    #[error("unknown word `{word}` in instruction \"{instruction}\"; known words: {known}")]
    UnknownWord {
        /// The word.
        word: String,
        /// The whole instruction.
        instruction: String,
        /// The vocabulary, comma separated.
        known: String,
    },
    /// More words than the policy's instruction length.
    #[error("instruction \"{instruction}\" has {words} words; at most {max} fit")]
    TooLong {
        /// The whole instruction.
        instruction: String,
        /// Its number of words.
        words: usize,
        /// The largest number that fits.
        max: usize,
    },
    /// No words at all.
    #[error("the instruction is empty")]
    Empty,
}

/// Turns instructions into fixed-length sequences of word ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordTokenizer {
    max_words: usize,
}

impl WordTokenizer {
    /// A tokenizer that pads or rejects to exactly `max_words` ids.
    pub fn new(max_words: usize) -> Self {
        Self { max_words }
    }

    /// Number of distinct ids.
    pub fn vocab_size() -> usize {
        VOCABULARY.len()
    }

    /// Length of every encoded sequence.
    pub fn max_words(&self) -> usize {
        self.max_words
    }

    /// Word ids of `instruction`, without padding.
    pub fn encode(&self, instruction: &str) -> Result<Vec<u32>, TokenizerError> {
        let ids = instruction
            .split_whitespace()
            .map(|raw| {
                let word: String = raw
                    .chars()
                    .filter(|c| !matches!(c, ',' | '.' | '!' | '?' | ';' | ':'))
                    .flat_map(char::to_lowercase)
                    .collect();
                VOCABULARY
                    .iter()
                    .skip(1)
                    .position(|&v| v == word)
                    .map(|i| i as u32 + 1)
                    .ok_or_else(|| TokenizerError::UnknownWord {
                        word: word.clone(),
                        instruction: instruction.to_string(),
                        known: VOCABULARY[1..].join(", "),
                    })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        if ids.is_empty() {
            return Err(TokenizerError::Empty);
        }
        if ids.len() > self.max_words {
            return Err(TokenizerError::TooLong {
                instruction: instruction.to_string(),
                words: ids.len(),
                max: self.max_words,
            });
        }
        Ok(ids)
    }

    /// Word ids padded to `max_words`, and the padding mask (`true` = padding).
    pub fn encode_padded(
        &self,
        instruction: &str,
    ) -> Result<(Vec<u32>, Vec<bool>), TokenizerError> {
        let mut ids = self.encode(instruction)?;
        let mut pad = vec![false; ids.len()];
        pad.resize(self.max_words, true);
        ids.resize(self.max_words, 0);
        Ok((ids, pad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imago_robots::reacher2d::{INSTRUCTION_TEMPLATES, TargetColour, instruction};

    #[test]
    fn encodes_and_pads() {
        let t = WordTokenizer::new(6);
        let (ids, pad) = t.encode_padded("Reach the RED target.").unwrap();
        assert_eq!(ids, vec![1, 6, 8, 11, 0, 0]);
        assert_eq!(pad, vec![false, false, false, false, true, true]);
    }

    #[test]
    fn every_reacher_instruction_is_in_the_vocabulary() {
        let t = WordTokenizer::new(6);
        for template in 0..INSTRUCTION_TEMPLATES.len() {
            for colour in TargetColour::ALL {
                t.encode(&instruction(template, colour)).unwrap();
            }
        }
    }

    #[test]
    fn unknown_word_is_a_clear_error() {
        let err = WordTokenizer::new(6)
            .encode("reach the purple target")
            .unwrap_err();
        assert!(matches!(&err, TokenizerError::UnknownWord { word, .. } if word == "purple"));
        let message = err.to_string();
        assert!(
            message.contains("`purple`") && message.contains("red, green, blue"),
            "{message}"
        );
    }

    #[test]
    fn too_long_and_empty_are_errors() {
        let t = WordTokenizer::new(3);
        assert!(matches!(
            t.encode("reach the red target"),
            Err(TokenizerError::TooLong {
                words: 4,
                max: 3,
                ..
            })
        ));
        assert_eq!(t.encode("  "), Err(TokenizerError::Empty));
    }
}
