//! The LeRobot parity fixtures (`tests/fixtures/lerobot/`, made with LeRobot by
//! `scripts/lerobot_policy_fixtures.py`) as the unit tests read them: arrays, the
//! largest gap to one, and PyTorch state dicts loaded through burn-store.

use burn::backend::Flex;
use burn::prelude::*;
use burn_store::{KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use serde::de::DeserializeOwned;

use crate::diffusion::unet::{DiffusionUnet, DiffusionUnetConfig, LEROBOT_KEYS};

/// The committed fixtures' directory.
pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/lerobot");

/// An array of the fixtures: row-major values and their shape.
#[derive(serde::Deserialize)]
pub(crate) struct Array {
    pub(crate) shape: Vec<usize>,
    pub(crate) values: Vec<f32>,
}

impl Array {
    /// The array as a tensor of the tests' backend.
    pub(crate) fn tensor<const D: usize>(&self) -> Tensor<Flex, D> {
        Tensor::from_data(
            TensorData::new(self.values.clone(), self.shape.clone()),
            &Default::default(),
        )
    }

    /// The largest absolute difference between `got` and this array (same shape).
    pub(crate) fn largest_gap<const D: usize>(&self, got: Tensor<Flex, D>) -> f32 {
        assert_eq!(got.dims().to_vec(), self.shape);
        let got: Vec<f32> = got.into_data().to_vec().unwrap();
        got.iter()
            .zip(&self.values)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    }
}

/// The JSON fixture `name` of directory `dir`.
pub(crate) fn read<T: DeserializeOwned>(dir: &str, name: &str) -> T {
    serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{name}.json")).unwrap()).unwrap()
}

/// Loads the PyTorch state dict `dir/file` into `module` through burn-store's PyTorch
/// adapter, renaming keys by `remap` (`(pattern, replacement)` in order) and skipping
/// enum variants in paths. Every parameter must be loaded; the only keys left unused
/// may be norm statistics burn has no use for (`num_batches_tracked`) and a norm's
/// PyTorch names (`weight`, `bias`), which burn-store lists as unused even when its
/// adapter applied them as `gamma` and `beta`: then those must have been applied.
pub(crate) fn load_torch<M: ModuleSnapshot<Flex>>(
    module: &mut M,
    (dir, file): (&str, &str),
    remap: &[(&str, &str)],
) {
    let mut remapper = KeyRemapper::new();
    for (pattern, replacement) in remap {
        remapper = remapper.add_pattern(*pattern, *replacement).unwrap();
    }
    let mut store = SafetensorsStore::from_file(format!("{dir}/{file}"))
        .with_from_adapter(PyTorchToBurnAdapter)
        .skip_enum_variants(true)
        .remap(remapper);
    let applied = module.load_from(&mut store).unwrap();
    assert!(applied.missing.is_empty(), "{:?}", applied.missing);
    for unused in &applied.unused {
        let burn_name = unused
            .replace(".weight", ".gamma")
            .replace(".bias", ".beta");
        assert!(
            unused.ends_with("num_batches_tracked") || applied.applied.contains(&burn_name),
            "{unused} unused; applied {:?}",
            applied.applied
        );
    }
}

/// LeRobot's U-Net of `config`, with the weights of the committed fixture `weights`.
pub(crate) fn lerobot_unet(config: &DiffusionUnetConfig, weights: &str) -> DiffusionUnet<Flex> {
    let mut unet = config.init(&Default::default()).unwrap();
    load_torch(&mut unet, (FIXTURES, weights), &LEROBOT_KEYS);
    unet
}
