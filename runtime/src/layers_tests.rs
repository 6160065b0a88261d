//! The runtime's layout rules (docs/architecture.md), checked by reading the sources'
//! `crate::` and `super::` paths: imports point down the layers (jobs -> engine ->
//! learn -> act -> store), the modules beside them (robot, device, telemetry and the
//! leaves) import no layer but the store (telemetry draws recorded episodes), no two
//! files import each other and no longer circle closes, the actor imports no
//! fine-tuning code, only the robot registry names a concrete robot type, and no
//! source file of the workspace outside tests is over 1,000 lines.

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

/// `text` up to its unit-test module: a test may import what the code may not (a
/// fixture built from a higher layer).
fn without_tests(mut text: String) -> String {
    if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
        text.truncate(at);
    }
    text
}

/// The imports of every module of the runtime (its code, not its unit tests),
/// resolved to modules that have files.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeMap<Module, String> = files
        .iter()
        .map(|f| (module_of(&root, f), std::fs::read_to_string(f).unwrap()))
        .map(|(module, text)| (module, without_tests(text)))
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

/// A circle of imports through `module`, found by walking `imports` depth first
/// (edges between a module and its own submodules, re-exports, are left out).
fn circle_through(
    imports: &BTreeMap<Module, BTreeSet<Module>>,
    path: &mut Vec<Module>,
    done: &mut BTreeSet<Module>,
) -> Option<Vec<Module>> {
    let module = path.last()?.clone();
    for dep in imports.get(&module).into_iter().flatten() {
        if dep.starts_with(&module) || module.starts_with(dep) || done.contains(dep) {
            continue;
        }
        if let Some(at) = path.iter().position(|m| m == dep) {
            return Some(path[at..].to_vec());
        }
        path.push(dep.clone());
        if let Some(circle) = circle_through(imports, path, done) {
            return Some(circle);
        }
        path.pop();
    }
    done.insert(module);
    None
}

#[test]
fn no_circle_of_imports_of_any_length() {
    let imports = imports();
    let mut done = BTreeSet::new();
    for module in imports.keys() {
        let circle = circle_through(&imports, &mut vec![module.clone()], &mut done);
        assert!(circle.is_none(), "an import circle: {circle:?}");
    }
    // The walk sees circles: one made up of two files is found.
    let mut made_up = imports.clone();
    let (a, b) = (vec!["act".to_string()], vec!["store".to_string()]);
    made_up.entry(b.clone()).or_default().insert(a.clone());
    made_up.entry(a.clone()).or_default().insert(b);
    let found = circle_through(&made_up, &mut vec![a], &mut BTreeSet::new());
    assert_eq!(found.map(|c| c.len()), Some(2));
}

#[test]
fn no_source_file_outside_tests_is_over_1000_lines() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in [
        "src",
        "runtime",
        "policies",
        "worldmodel",
        "robots",
        "kernels",
        "shaders",
    ] {
        let dir = workspace.join(krate);
        let sources = if krate == "src" { dir } else { dir.join("src") };
        rust_files(&sources, &mut files);
    }
    assert!(files.len() > 100, "{} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            name != "tests.rs" && !name.ends_with("_tests.rs")
        })
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > 1000).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "{long:#?}");
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
