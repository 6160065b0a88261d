//! Reading a recording back with the SDK's own decoder: what `imago` checks its
//! recordings with (tests, `imago inspect --check`), without the viewer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rerun::StoreKind;
use rerun::external::re_log_encoding::DecoderApp;
use rerun::log::{Chunk, LogMsg};

/// What a recording holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordingSummary {
    /// Rows logged per entity path of the recording (paths without a leading `/`).
    pub rows: BTreeMap<String, usize>,
    /// Timelines used by the recording's data.
    pub timelines: BTreeSet<String>,
    /// Whether a blueprint (a layout) came with it.
    pub has_blueprint: bool,
}

impl RecordingSummary {
    /// Those of `entities` with no row at or below them, and those of `timelines` no
    /// data used: what a check of a recording reports.
    pub fn missing<'a>(&self, entities: &[&'a str], timelines: &[&'a str]) -> Vec<&'a str> {
        let absent_entities = entities.iter().filter(|e| !self.has(e));
        let absent_timelines = timelines.iter().filter(|t| !self.timelines.contains(**t));
        absent_entities.chain(absent_timelines).copied().collect()
    }

    /// Whether any row was logged at `path` or below it.
    pub fn has(&self, path: &str) -> bool {
        self.rows.keys().any(|p| {
            p == path || (p.starts_with(path) && p.as_bytes().get(path.len()) == Some(&b'/'))
        })
    }
}

/// Decodes the `.rrd` file at `path`.
pub fn read_recording(path: &Path) -> anyhow::Result<RecordingSummary> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    let mut summary = RecordingSummary::default();
    for message in DecoderApp::decode_lazy(std::io::BufReader::new(file)) {
        let message = message
            .map_err(|e| anyhow::anyhow!("{} is not a readable recording: {e}", path.display()))?;
        let LogMsg::ArrowMsg(store, arrow) = message else {
            continue;
        };
        if store.kind() == StoreKind::Blueprint {
            summary.has_blueprint = true;
            continue;
        }
        let chunk = Chunk::from_arrow_msg(&arrow)
            .map_err(|e| anyhow::anyhow!("{}: undecodable chunk: {e}", path.display()))?;
        let entity = chunk.entity_path().to_string();
        *summary
            .rows
            .entry(entity.trim_start_matches('/').to_string())
            .or_default() += chunk.num_rows();
        summary
            .timelines
            .extend(chunk.timelines().keys().map(|t| t.to_string()));
    }
    Ok(summary)
}
