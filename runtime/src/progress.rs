//! Progress bars for long phases, drawn on stderr only when it is a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar over `len` units of `phase`.
pub fn bar(phase: &str, len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>14} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(phase.to_string());
    bar
}
