//! Files imago did not write, or that a disk damaged, never crash a command and never
//! cost an undamaged episode. Each case is made as a converter, a hand edit or a
//! damaged disk would make it (checksums recomputed where a tool would recompute
//! them), then every command that reads the file runs: each either gives one error
//! line and writes nothing, or keeps every undamaged episode.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{assert_one_line_error, imago, stderr};

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// `args` on the CPU backend, as owned arguments.
fn cpu(args: &[&str]) -> Vec<String> {
    ["--device", "cpu"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect()
}

fn succeeds(args: &[&str]) -> String {
    let output = imago(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A replay of 6 reacher2d demonstrations, a policy and a world model trained on it.
struct Trained {
    root: tempfile::TempDir,
    replay: PathBuf,
    policy: PathBuf,
    world_model: PathBuf,
}

fn trained() -> Trained {
    let root = tempfile::tempdir().unwrap();
    let (replay, policy, world_model) = (
        root.path().join("replay"),
        root.path().join("policy"),
        root.path().join("wm"),
    );
    succeeds(&["collect", "--episodes", "6", "--out", &path(&replay)]);
    let train = |what: &str, out: &Path, extra: &[&str]| {
        let (replay, out) = (path(&replay), path(out));
        let mut args = vec![
            "--device",
            "cpu",
            "train",
            "--what",
            what,
            "--replay",
            &replay,
            "--out",
            &out,
            "--steps",
            "2",
            "--batch-size",
            "4",
        ];
        args.extend(extra);
        succeeds(&args)
    };
    train("bc", &policy, &[]);
    train("worldmodel", &world_model, &["--horizon", "4"]);
    Trained {
        root,
        replay,
        policy,
        world_model,
    }
}

impl Trained {
    /// A copy of checkpoint `from` named `name`, to mutate.
    fn copy(&self, from: &Path, name: &str) -> PathBuf {
        let to = self.root.path().join(name);
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(from).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
        to
    }

    /// Where a command may write; it must still not exist after a refused command.
    fn out(&self) -> PathBuf {
        self.root.path().join("out")
    }

    /// Every command that reads a policy checkpoint, reading `policy`.
    fn policy_readers(&self, policy: &Path) -> Vec<Vec<String>> {
        let (p, good, replay, wm, out) = (
            path(policy),
            path(&self.policy),
            path(&self.replay),
            path(&self.world_model),
            path(&self.out()),
        );
        vec![
            cpu(&["eval", "--ckpt", &p, "--episodes", "2"]),
            cpu(&[
                "eval",
                "--ckpt",
                &good,
                "--paired-with",
                &p,
                "--episodes",
                "2",
            ]),
            cpu(&[
                "train", "--replay", &replay, "--init", &p, "--out", &out, "--steps", "2",
            ]),
            cpu(&[
                "train",
                "--what",
                "finetune",
                "--replay",
                &replay,
                "--init",
                &p,
                "--world-model",
                &wm,
                "--out",
                &out,
                "--rounds",
                "1",
            ]),
            cpu(&["gate", "--champion", &good, "--challenger", &p]),
            cpu(&["accelerate", "--ckpt", &p]),
        ]
    }

    /// Every command that reads a world-model checkpoint, reading `model`.
    fn world_model_readers(&self, model: &Path) -> Vec<Vec<String>> {
        let (w, policy, replay, out) = (
            path(model),
            path(&self.policy),
            path(&self.replay),
            path(&self.out()),
        );
        vec![
            cpu(&[
                "wm-eval",
                "--ckpt",
                &w,
                "--replay",
                &replay,
                "--horizon",
                "4",
            ]),
            cpu(&[
                "inspect",
                "--replay",
                &replay,
                "--ckpt",
                &w,
                "--horizon",
                "4",
                "--rrd",
                &out,
            ]),
            cpu(&[
                "train",
                "--what",
                "worldmodel",
                "--replay",
                &replay,
                "--init",
                &w,
                "--out",
                &out,
                "--steps",
                "2",
            ]),
            cpu(&[
                "train",
                "--what",
                "finetune",
                "--replay",
                &replay,
                "--init",
                &policy,
                "--world-model",
                &w,
                "--out",
                &out,
                "--rounds",
                "1",
            ]),
        ]
    }

    /// Runs every command of `readers`: each is one error line mentioning
    /// `must_mention`, writes nothing, and leaves the replay as it was.
    fn all_refuse(&self, readers: Vec<Vec<String>>, must_mention: &str) {
        let replay_before = files(&self.replay);
        for args in readers {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_one_line_error(&args, must_mention);
            assert!(
                !self.out().exists(),
                "{args:?} wrote {}",
                self.out().display()
            );
        }
        assert!(files(&self.replay) == replay_before, "the replay changed");
    }
}

/// Every file under `dir`, by relative path, with its contents.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap().path();
            if entry.is_dir() {
                stack.push(entry);
            } else {
                let relative = entry.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(relative, std::fs::read(&entry).unwrap());
            }
        }
    }
    out
}

/// Edits the `meta.json` of `ckpt` and signs it again as imago does (the CRC-32 of
/// the pretty JSON without its checksum, as its last field), as a careful hand edit
/// or a converter would.
fn resign_meta(ckpt: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let file = ckpt.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    edit(&mut meta);
    meta.as_object_mut().unwrap().remove("checksum");
    let mut body = serde_json::to_vec_pretty(&meta).unwrap();
    let checksum = crc32fast::hash(&body);
    assert!(body.ends_with(b"\n}"));
    body.truncate(body.len() - 2);
    body.extend_from_slice(format!(",\n  \"checksum\": {checksum}\n}}").as_bytes());
    std::fs::write(&file, body).unwrap();
}

/// Rewrites tensor `name` of `ckpt`'s `model.safetensors` as `dtype`, its data
/// converted by `convert` (from little-endian F32 bytes), keeping the file consistent
/// (header, offsets) and `meta.json`'s record of its size and checksum right.
fn retype_tensor(ckpt: &Path, name: &str, dtype: &str, convert: impl Fn(&[u8]) -> Vec<u8>) {
    let file = ckpt.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let data = &bytes[8 + header_len..];
    let offsets = |v: &serde_json::Value| {
        let o = v["data_offsets"].as_array().unwrap();
        (
            o[0].as_u64().unwrap() as usize,
            o[1].as_u64().unwrap() as usize,
        )
    };
    let mut names: Vec<String> = header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    names.sort_by_key(|k| offsets(&header[k]));
    assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    let mut rewritten = Vec::new();
    for tensor in &names {
        let (start, end) = offsets(&header[tensor]);
        let mut stored = data[start..end].to_vec();
        if tensor == name {
            assert_eq!(header[tensor]["dtype"], "F32");
            stored = convert(&stored);
            header[tensor]["dtype"] = dtype.into();
        }
        let begin = rewritten.len();
        rewritten.extend_from_slice(&stored);
        header[tensor]["data_offsets"] = serde_json::json!([begin, rewritten.len()]);
    }
    let mut text = serde_json::to_vec(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&rewritten);
    std::fs::write(&file, &out).unwrap();
    resign_meta(ckpt, |meta| {
        meta["files"]["model.safetensors"] =
            serde_json::json!({ "bytes": out.len(), "crc32": crc32fast::hash(&out) });
    });
}

/// The first float tensor of `ckpt`'s weights, by offset.
fn first_tensor(ckpt: &Path) -> String {
    let bytes = std::fs::read(ckpt.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .min_by_key(|(_, v)| v["data_offsets"][0].as_u64().unwrap())
        .map(|(k, _)| k.clone())
        .unwrap()
}

fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
}

#[test]
fn tensors_of_a_foreign_type_are_one_error_and_other_float_types_load() {
    let t = trained();
    // I32 over the same bytes: a consistent file burn would take and crash on.
    for (source, readers) in [
        (
            &t.policy,
            Trained::policy_readers as fn(&Trained, &Path) -> _,
        ),
        (&t.world_model, Trained::world_model_readers),
    ] {
        let tensor = first_tensor(source);
        let foreign = t.copy(source, "as-i32");
        retype_tensor(&foreign, &tensor, "I32", <[u8]>::to_vec);
        t.all_refuse(
            readers(&t, &foreign),
            &format!("tensor {tensor}: stored as I32, the model holds float tensors"),
        );
        std::fs::remove_dir_all(&foreign).unwrap();
    }

    // F64 is converted exactly: the same actions, so the same evaluation.
    let tensor = first_tensor(&t.policy);
    let report = |ckpt: &Path, name: &str| {
        let json = t.root.path().join(name);
        succeeds(&[
            "--device",
            "cpu",
            "eval",
            "--ckpt",
            &path(ckpt),
            "--episodes",
            "3",
            "--report",
            &path(&json),
        ]);
        let mut report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        report.as_object_mut().unwrap().remove("name");
        report
    };
    let wide = t.copy(&t.policy, "as-f64");
    retype_tensor(&wide, &tensor, "F64", |b| {
        f32s(b).flat_map(|v| f64::from(v).to_le_bytes()).collect()
    });
    assert_eq!(report(&wide, "f64.json"), report(&t.policy, "f32.json"));
    // BF16 (the upper half of each F32) loads and runs; world models too.
    let narrow = t.copy(&t.policy, "as-bf16");
    retype_tensor(&narrow, &tensor, "BF16", |b| {
        f32s(b)
            .flat_map(|v| v.to_le_bytes()[2..].to_vec())
            .collect()
    });
    report(&narrow, "bf16.json");
    let model = t.copy(&t.world_model, "wm-bf16");
    retype_tensor(&model, &first_tensor(&model), "BF16", |b| {
        f32s(b)
            .flat_map(|v| v.to_le_bytes()[2..].to_vec())
            .collect()
    });
    let recording = t.root.path().join("wm-bf16.rrd");
    succeeds(&[
        "--device",
        "cpu",
        "inspect",
        "--replay",
        &path(&t.replay),
        "--ckpt",
        &path(&model),
        "--horizon",
        "4",
        "--rrd",
        &path(&recording),
    ]);
}

#[test]
fn stored_configs_out_of_range_or_apart_from_their_robot_are_one_error() {
    let t = trained();
    let limit = serde_json::json!([1e30, 1e30]);
    // The config alone edited: out of the range a config file allows.
    let edited = t.copy(&t.policy, "policy-limit");
    resign_meta(&edited, |m| m["config"]["action_limit"] = limit.clone());
    t.all_refuse(t.policy_readers(&edited), "action_limit[0] = 1e30");
    // Config and recorded robot edited together: the robot's own ranges refuse it.
    resign_meta(&edited, |m| m["spec"]["action_limit"] = limit.clone());
    t.all_refuse(
        t.policy_readers(&edited),
        "the robot spec it records: action_limit[0] = 1e30",
    );
    // In range, but not the robot's: the config disagrees with the spec it records.
    resign_meta(&edited, |m| {
        m["spec"]["action_limit"] = serde_json::json!([1.0, 1.0]);
        m["config"]["action_limit"] = serde_json::json!([2.0, 2.0]);
    });
    t.all_refuse(
        t.policy_readers(&edited),
        "disagree with the robot it records",
    );
    let edited = t.copy(&t.world_model, "wm-limit");
    resign_meta(&edited, |m| m["config"]["action_limit"] = limit.clone());
    t.all_refuse(t.world_model_readers(&edited), "action_limit[0] = 1e30");
}

/// Splits the only segment of `replay` in two at the frame boundary nearest its
/// middle that falls inside an episode, and lists both in the manifest: the layout a
/// writer with a small `segment_bytes` leaves, with an episode running across.
fn split_inside_an_episode(replay: &Path) {
    let segments = replay.join("segments");
    let data = std::fs::read(segments.join("000000.seg")).unwrap();
    let mut boundaries = Vec::new();
    let mut offset = 0;
    while offset < data.len() {
        let len = u32::from_le_bytes(data[offset..offset + 4].try_into().unwrap()) as usize;
        offset += 8 + len;
        boundaries.push(offset);
    }
    // A boundary whose next record is a transition (postcard's variant tag 1) lies
    // inside an episode.
    let split = boundaries
        .iter()
        .copied()
        .filter(|&b| b < data.len() && data[b + 8] == 1)
        .min_by_key(|&b| b.abs_diff(data.len() / 2))
        .unwrap();
    let records = boundaries.iter().filter(|&&b| b <= split).count();
    std::fs::write(segments.join("000000.seg"), &data[..split]).unwrap();
    std::fs::write(segments.join("000001.seg"), &data[split..]).unwrap();
    let manifest_file = replay.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_file).unwrap()).unwrap();
    let closed = manifest["closed"].as_array_mut().unwrap();
    assert_eq!(closed.len(), 1);
    let total = closed[0]["records"].as_u64().unwrap() as usize;
    let mut second = closed[0].clone();
    closed[0]["bytes"] = split.into();
    closed[0]["records"] = records.into();
    closed[0]["ends_session"] = false.into();
    second["file"] = "000001.seg".into();
    second["bytes"] = (data.len() - split).into();
    second["records"] = (total - records).into();
    closed.push(second);
    std::fs::write(
        &manifest_file,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
}

#[test]
fn junk_after_a_closed_segment_costs_no_episode_in_any_command() {
    let root = tempfile::tempdir().unwrap();
    let replay = root.path().join("replay");
    succeeds(&["collect", "--episodes", "8", "--out", &path(&replay)]);
    split_inside_an_episode(&replay);
    let check = succeeds(&["replay", "check", &path(&replay)]);
    assert!(check.contains("8 whole episodes, 0 damaged"), "{check}");
    let first = replay.join("segments/000000.seg");
    let pristine = std::fs::read(&first).unwrap();
    // One garbage byte, seven, a partial frame: as a damaged disk or a stray append.
    let partial = pristine[..pristine.len().min(40)].to_vec();
    for (what, junk) in [
        ("1 byte", vec![0xa5]),
        ("7 bytes", vec![7; 7]),
        ("a partial frame", partial),
    ] {
        let mut data = pristine.clone();
        data.extend_from_slice(&junk);
        std::fs::write(&first, &data).unwrap();
        let output = imago(&["replay", "check", &path(&replay)]);
        let table = String::from_utf8_lossy(&output.stdout);
        assert!(
            table.contains("8 whole episodes, 0 damaged")
                && table.contains("bytes beyond are not read"),
            "{what}: {table}"
        );
        // Every other command that reads the replay keeps all 8 episodes.
        let (replay, out) = (path(&replay), root.path().join("out"));
        let o = path(&out);
        let readers: [(&[&str], &str); 4] = [
            (
                &["replay", "repair", &replay, "--out", &o],
                "copied 8 whole episodes",
            ),
            (
                &[
                    "--device",
                    "cpu",
                    "train",
                    "--replay",
                    &replay,
                    "--out",
                    &o,
                    "--steps",
                    "1",
                    "--batch-size",
                    "4",
                ],
                "trained on 8 episodes",
            ),
            (
                &["inspect", "--replay", &replay, "--rrd", &o],
                "logged 8 of 8 episodes",
            ),
            (
                &["export", "lerobot", "--replay", &replay, "--out", &o],
                "exported 8 episodes",
            ),
        ];
        for (args, kept) in readers {
            let stdout = succeeds(args);
            assert!(stdout.contains(kept), "{what}, {args:?}: {stdout}");
            if out.is_dir() {
                std::fs::remove_dir_all(&out).unwrap();
            } else {
                std::fs::remove_file(&out).unwrap();
            }
        }
    }
}

#[test]
fn used_up_episode_ids_are_one_error_before_anything_is_written() {
    let root = tempfile::tempdir().unwrap();
    let replay = root.path().join("replay");
    succeeds(&["collect", "--episodes", "2", "--out", &path(&replay)]);
    let manifest_file = replay.join("manifest.json");
    let set_next = |next: u64| {
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest_file).unwrap()).unwrap();
        manifest["next_episode"] = next.into();
        std::fs::write(
            &manifest_file,
            serde_json::to_vec_pretty(&manifest).unwrap(),
        )
        .unwrap();
    };
    let collect = |episodes: &'static str| {
        vec![
            "collect",
            "--episodes",
            episodes,
            "--out",
            replay.to_str().unwrap(),
        ]
    };
    for (next, episodes, must_mention) in [
        (u64::MAX, "1", "episode ids are used up"),
        (
            u64::MAX - 1,
            "2",
            "episode ids for 1 more episodes, not the 2 this run records",
        ),
    ] {
        set_next(next);
        let before = files(&replay.join("segments"));
        assert_one_line_error(&collect(episodes), must_mention);
        assert!(
            files(&replay.join("segments")) == before,
            "{next}: segments changed"
        );
    }
    // The last id is given once, then used up; the replay counts every episode.
    let stdout = succeeds(&collect("1"));
    assert!(stdout.contains("recorded 1 episodes"), "{stdout}");
    assert_one_line_error(&collect("1"), "episode ids are used up");
    let check = succeeds(&["replay", "check", &path(&replay)]);
    assert!(check.contains("3 whole episodes, 0 damaged"), "{check}");
}
