//! A checkpoint's integrity: the size and CRC-32 of every weight file, recorded in
//! `meta.json` and checked before loading, and the shape of every loaded tensor checked
//! against the shapes the config gives, naming each tensor that differs.

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use serde::{Deserialize, Serialize};

/// Size and checksum of one file of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the contents.
    pub crc32: u32,
}

impl FileDigest {
    /// The digest of the file at `path`.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let data = std::fs::read(path)?;
        Ok(Self {
            bytes: data.len() as u64,
            crc32: crc32fast::hash(&data),
        })
    }
}

/// Checks every file listed in `files` against its digest; the error names the first
/// file that is missing or differs.
pub fn verify_files(dir: &Path, files: &BTreeMap<String, FileDigest>) -> Result<(), String> {
    for (name, expected) in files {
        let found = FileDigest::of(&dir.join(name))
            .map_err(|e| format!("weight file {name} cannot be read: {e}"))?;
        if found.bytes != expected.bytes {
            return Err(format!(
                "weight file {name} has {} bytes, meta.json records {}: it was cut short or changed",
                found.bytes, expected.bytes
            ));
        }
        if found.crc32 != expected.crc32 {
            return Err(format!(
                "weight file {name} does not match its checksum (crc32 {:08x}, meta.json records {:08x}): it is damaged",
                found.crc32, expected.crc32
            ));
        }
    }
    Ok(())
}

/// How the checksum of `meta.json` follows its other fields, as the last one.
const META_CHECKSUM: &str = ",\n  \"checksum\": ";

/// `meta.json` as written: `body` (pretty JSON of the meta without a checksum, ending
/// in `\n}`) with a last field `checksum`, the CRC-32 of `body`. The checksum covers
/// the exact bytes, so no float is re-parsed to check it.
pub fn sign_meta_json(mut body: Vec<u8>) -> Vec<u8> {
    let checksum = crc32fast::hash(&body);
    if body.ends_with(b"\n}") {
        body.truncate(body.len() - 2);
        body.extend_from_slice(format!("{META_CHECKSUM}{checksum}\n}}").as_bytes());
    }
    body
}

/// Checks the `checksum` field of a `meta.json` written by [`sign_meta_json`] against
/// the bytes before it.
pub fn verify_meta_json(text: &str) -> Result<(), String> {
    let damaged = || "it does not match its own checksum: it is damaged or was edited".to_string();
    let at = text.rfind(META_CHECKSUM).ok_or_else(damaged)?;
    let digits = text[at + META_CHECKSUM.len()..]
        .strip_suffix("\n}")
        .ok_or_else(damaged)?;
    let recorded: u32 = digits.parse().map_err(|_| damaged())?;
    let body = format!("{}\n}}", &text[..at]);
    if crc32fast::hash(body.as_bytes()) == recorded {
        Ok(())
    } else {
        Err(damaged())
    }
}

/// What kind of elements a parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParameterKind {
    /// Floating point.
    Float,
    /// Integers.
    Int,
    /// Booleans.
    Bool,
}

impl ParameterKind {
    /// How an error names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Float => "float tensors",
            Self::Int => "integer tensors",
            Self::Bool => "boolean tensors",
        }
    }

    /// The stored types a parameter of this kind loads from.
    pub fn accepted(self) -> &'static str {
        match self {
            Self::Float => "F32, and F16, BF16 or F64 converted to F32",
            Self::Int => "integer types",
            Self::Bool => "BOOL",
        }
    }
}

/// One parameter of a module: its shape and element kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    /// The shape the config gives.
    pub shape: Vec<usize>,
    /// What its elements are.
    pub kind: ParameterKind,
}

/// Every parameter of `module`, by its path in the module tree
/// (`encoder.layers.0.mha.query.weight`), without initialising lazy parameters.
pub fn parameters<B: Backend, M: Module<B>>(module: &M) -> BTreeMap<String, Parameter> {
    let mut visitor = ParameterVisitor {
        path: Vec::new(),
        parameters: BTreeMap::new(),
    };
    module.visit(&mut visitor);
    visitor.parameters
}

/// The shape of every parameter of `module`, by its path in the module tree.
pub fn parameter_shapes<B: Backend, M: Module<B>>(module: &M) -> BTreeMap<String, Vec<usize>> {
    parameters(module)
        .into_iter()
        .map(|(path, parameter)| (path, parameter.shape))
        .collect()
}

/// Every difference between the parameter shapes a config gives (`expected`) and the
/// ones loaded, one line per tensor.
pub fn shape_differences(
    expected: &BTreeMap<String, Vec<usize>>,
    loaded: &BTreeMap<String, Vec<usize>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, shape) in expected {
        match loaded.get(path) {
            Some(found) if found != shape => out.push(format!(
                "tensor {path}: stored {found:?}, the config gives {shape:?}"
            )),
            None => out.push(format!("tensor {path}: missing")),
            Some(_) => {}
        }
    }
    for path in loaded.keys().filter(|p| !expected.contains_key(*p)) {
        out.push(format!("tensor {path}: not in the model the config gives"));
    }
    out
}

struct ParameterVisitor {
    path: Vec<String>,
    parameters: BTreeMap<String, Parameter>,
}

impl ParameterVisitor {
    fn record(&mut self, shape: Vec<usize>, kind: ParameterKind) {
        self.parameters
            .insert(self.path.join("."), Parameter { shape, kind });
    }
}

impl<B: Backend> ModuleVisitor<B> for ParameterVisitor {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.record(param.lazy_shape().to_vec(), ParameterKind::Float);
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.record(param.lazy_shape().to_vec(), ParameterKind::Int);
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.record(param.lazy_shape().to_vec(), ParameterKind::Bool);
    }
}
