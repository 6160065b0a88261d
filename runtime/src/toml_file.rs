//! Reading a TOML config file into a serde struct, with errors that name the file and
//! show the offending line (a value of the wrong type, a misspelt key), so that the
//! user sees which key is wrong, not only what was expected.

use std::path::Path;

use serde::de::DeserializeOwned;

/// Reads and parses the TOML file at `path`.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    parse_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Parses `text`; the error quotes the line it points at.
pub fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let message = e.message().trim().to_string();
        match e.span().and_then(|span| line_at(text, span.start)) {
            Some((number, line)) => format!("line {number} `{line}`: {message}"),
            None => message,
        }
    })
}

/// Reads the settings table `table` (a part of a file already parsed) into `T`; the
/// error quotes the offending `key = value` (without a line number: the table is
/// re-written in TOML to find the key, so its lines are not the file's).
pub fn table_into<T: DeserializeOwned>(table: &toml::Table) -> Result<T, String> {
    let text = toml::to_string(table).map_err(|e| e.to_string())?;
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        let message = e.message().trim().to_string();
        match e.span().and_then(|span| line_at(&text, span.start)) {
            Some((_, line)) => format!("`{line}`: {message}"),
            None => message,
        }
    })
}

/// The 1-based number and the trimmed text of the line holding byte `offset`.
fn line_at(text: &str, offset: usize) -> Option<(usize, &str)> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text.get(start..end)?.trim();
    (!line.is_empty()).then(|| (text[..start].matches('\n').count() + 1, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Settings {
        batch_size: usize,
    }

    #[test]
    fn errors_quote_the_offending_line() {
        let error = parse_toml::<Settings>("# settings\nbatch_size = -5\n").unwrap_err();
        assert!(error.starts_with("line 2 `batch_size = -5`"), "{error}");
        let error = parse_toml::<Settings>("batch_size = 1e12\n").unwrap_err();
        assert!(error.contains("batch_size = 1e12"), "{error}");
        let error = parse_toml::<Settings>("batch_sise = 3\n").unwrap_err();
        assert!(error.contains("batch_sise"), "{error}");
    }

    #[test]
    fn errors_in_a_table_quote_the_key() {
        let table: toml::Table = toml::from_str("batch_size = -5").unwrap();
        let error = table_into::<Settings>(&table).unwrap_err();
        assert!(error.starts_with("`batch_size = -5`"), "{error}");
        let table: toml::Table = toml::from_str("batch_size = 5").unwrap();
        assert_eq!(table_into::<Settings>(&table).unwrap().batch_size, 5);
    }
}
