//! The runtime's layout rules (docs/architecture.md), checked by reading the sources'
//! `crate::` and `super::` paths: imports point down the layers (jobs -> engine ->
//! learn -> act -> store), the modules beside them (robot, device, telemetry and the
//! leaves) import no layer but the store (telemetry draws recorded episodes), no two
//! files import each other, the actor imports no fine-tuning code, and only the robot
//! registry names a concrete robot type.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: [&str; 5] = ["store", "act", "learn", "engine", "jobs"];

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a source file defines (`store/replay/mod.rs` -> `store::replay`).
fn module_of(root: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Module = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Every path after `prefix` in `text` (`crate::store::replay::Episode` ->
/// `[store, replay, Episode]`), lower-case segments only (modules).
fn paths_after(text: &str, prefix: &str) -> Vec<Module> {
    text.match_indices(prefix)
        .filter(|(at, _)| {
            !text[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, _)| {
            let mut path = Module::new();
            for part in text[at + prefix.len()..].split("::") {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                let whole = name.len() == part.len();
                path.push(name);
                if !whole {
                    break;
                }
            }
            path
        })
        .collect()
}

/// The imports of every module of the runtime, resolved to modules that have files.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeMap<Module, String> = files
        .iter()
        .map(|f| (module_of(&root, f), std::fs::read_to_string(f).unwrap()))
        .collect();
    let resolve = |path: &[String]| -> Option<Module> {
        (1..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|m| modules.contains_key(m))
    };
    modules
        .iter()
        .map(|(module, text)| {
            let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
            let absolute = paths_after(text, "crate::");
            let relative = paths_after(text, "super::")
                .into_iter()
                .map(|p| parent.iter().cloned().chain(p).collect::<Module>());
            let deps = absolute
                .into_iter()
                .chain(relative)
                .filter_map(|p| resolve(&p))
                .filter(|d| d != module)
                .collect();
            (module.clone(), deps)
        })
        .collect()
}

fn layer(module: &Module) -> Option<usize> {
    LAYERS
        .iter()
        .position(|l| module.first() == Some(&l.to_string()))
}

#[test]
fn imports_point_down_the_layers_and_no_two_files_import_each_other() {
    let imports = imports();
    let mut problems = Vec::new();
    for (module, deps) in &imports {
        for dep in deps {
            let nested = dep.starts_with(module) || module.starts_with(dep);
            if !nested && imports.get(dep).is_some_and(|back| back.contains(module)) {
                problems.push(format!("{module:?} and {dep:?} import each other"));
            }
            match (layer(module), layer(dep)) {
                (Some(from), Some(to)) if to > from => {
                    problems.push(format!("{module:?} imports {dep:?}, a layer above"));
                }
                (None, Some(to)) if module.first().map(String::as_str) != Some("config_tests") => {
                    let telemetry_reads_the_store =
                        module.first().map(String::as_str) == Some("telemetry") && to == 0;
                    if !telemetry_reads_the_store && !module.starts_with(&["layers_tests".into()]) {
                        problems.push(format!("{module:?} (beside the layers) imports {dep:?}"));
                    }
                }
                _ => {}
            }
        }
    }
    let actor = vec!["engine".to_string(), "actor".to_string()];
    if imports[&actor]
        .iter()
        .any(|d| d.starts_with(&["learn".to_string()]))
    {
        problems.push("the actor imports learning code".into());
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The check sees the imports it is meant to see.
    assert!(imports[&actor].contains(&vec!["act".to_string(), "sampling".to_string()]));
}

#[test]
fn only_the_robot_registry_names_a_concrete_robot_type() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&manifest.join("src"), &mut files);
    rust_files(&manifest.join("../src"), &mut files);
    let naming: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains(concat!("Reacher", "2d")) || text.contains(concat!("Push", "T"))
        })
        .collect();
    assert_eq!(naming, vec![manifest.join("src/robot.rs")]);
}
