//! The element types a checkpoint's tensors may be stored in, checked before burn sees
//! a tensor. burn takes a stored tensor's type as it finds it: an integer tensor loaded
//! into a float parameter ends in a panic deep inside a backend (and, on some, in memory
//! corruption), so a converted or hand-edited file must be refused first. Float
//! parameters read `F32` as stored and `F16`, `BF16` and `F64` (what PyTorch users save)
//! converted to `F32`; integer and boolean parameters read their own kind; anything else
//! is one error line per tensor, naming it, its type and what the model holds.

use std::collections::BTreeMap;
use std::rc::Rc;

use burn::tensor::DType;
use burn_store::{ModuleAdapter, TensorSnapshot};

use super::integrity::{Parameter, ParameterKind};

/// How a file's stored tensors fit the element kinds of a model's parameters.
#[derive(Debug, Default)]
pub struct StoredTypes {
    /// One line per tensor whose type the model cannot take.
    pub problems: Vec<String>,
    /// Some float tensor is stored in another float type than `F32`: load through
    /// [`ToF32`].
    pub needs_conversion: bool,
}

/// Checks the type of every stored tensor that names a parameter of the model
/// (`model`, by path); tensors the model lacks are left to the loader, which names them.
pub fn check_stored_types(
    stored: &BTreeMap<String, TensorSnapshot>,
    model: &BTreeMap<String, Parameter>,
) -> StoredTypes {
    let mut out = StoredTypes::default();
    for (path, snapshot) in stored {
        let Some(parameter) = model.get(path) else {
            continue;
        };
        let dtype = snapshot.dtype;
        let fits = match parameter.kind {
            ParameterKind::Float => match dtype {
                DType::F32 | DType::Flex32 => true,
                DType::F16 | DType::BF16 | DType::F64 => {
                    out.needs_conversion = true;
                    true
                }
                _ => false,
            },
            ParameterKind::Int => dtype.is_int(),
            ParameterKind::Bool => dtype.is_bool(),
        };
        if !fits {
            out.problems.push(format!(
                "tensor {path}: stored as {dtype:?}, the model holds {} (imago reads {})",
                parameter.kind.name(),
                parameter.kind.accepted()
            ));
        }
    }
    out
}

/// Converts float tensors stored as `F16`, `BF16` or `F64` to `F32` as they are loaded;
/// every other tensor passes unchanged. Used only after [`check_stored_types`] passed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToF32;

impl ModuleAdapter for ToF32 {
    fn adapt(&self, snapshot: &TensorSnapshot) -> TensorSnapshot {
        if !matches!(snapshot.dtype, DType::F16 | DType::BF16 | DType::F64) {
            return snapshot.clone();
        }
        let stored = snapshot.clone_data_fn();
        TensorSnapshot::from_closure(
            Rc::new(move || Ok(stored()?.convert_dtype(DType::F32))),
            DType::F32,
            snapshot.shape.clone(),
            snapshot.path_stack.clone().unwrap_or_default(),
            snapshot.container_stack.clone().unwrap_or_default(),
            snapshot.tensor_id.unwrap_or_default(),
        )
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(*self)
    }
}

#[cfg(test)]
mod tests {
    use burn::module::ParamId;
    use burn::tensor::TensorData;

    use super::*;

    fn stored(data: TensorData) -> TensorSnapshot {
        TensorSnapshot::from_data(
            data,
            vec!["layer".into(), "weight".into()],
            vec!["Struct:Linear".into()],
            ParamId::new(),
        )
    }

    fn model(kind: ParameterKind) -> BTreeMap<String, Parameter> {
        BTreeMap::from([(
            "layer.weight".to_string(),
            Parameter {
                shape: vec![2],
                kind,
            },
        )])
    }

    fn check(data: TensorData, kind: ParameterKind) -> StoredTypes {
        let file = BTreeMap::from([("layer.weight".to_string(), stored(data))]);
        check_stored_types(&file, &model(kind))
    }

    #[test]
    fn integer_and_boolean_tensors_in_float_parameters_are_refused_by_name() {
        let types = check(TensorData::new(vec![1i32, 2], [2]), ParameterKind::Float);
        assert_eq!(
            types.problems,
            [
                "tensor layer.weight: stored as I32, the model holds float tensors (imago reads F32, and F16, BF16 or F64 converted to F32)"
            ]
        );
        let types = check(
            TensorData::new(vec![true, false], [2]),
            ParameterKind::Float,
        );
        assert!(types.problems[0].contains("stored as Bool"), "{types:?}");
        // A float stored where the model holds integers is refused the same way.
        let types = check(TensorData::new(vec![1.0f32, 2.0], [2]), ParameterKind::Int);
        assert!(types.problems[0].contains("integer tensors"), "{types:?}");
        // A tensor the model does not have is the loader's to name.
        let file = BTreeMap::from([(
            "other.weight".to_string(),
            stored(TensorData::new(vec![1i32, 2], [2])),
        )]);
        assert!(
            check_stored_types(&file, &model(ParameterKind::Float))
                .problems
                .is_empty()
        );
    }

    #[test]
    fn half_and_double_floats_are_converted_to_f32_values() {
        let values = [0.5f32, -3.25];
        let cases = [
            TensorData::new(values.map(f64::from).to_vec(), [2]),
            TensorData::new(values.map(burn::tensor::f16::from_f32).to_vec(), [2]),
            TensorData::new(values.map(burn::tensor::bf16::from_f32).to_vec(), [2]),
        ];
        for data in cases {
            let dtype = data.dtype;
            let types = check(data.clone(), ParameterKind::Float);
            assert!(
                types.problems.is_empty() && types.needs_conversion,
                "{dtype:?}"
            );
            let converted = ToF32.adapt(&stored(data));
            assert_eq!(converted.dtype, DType::F32);
            let loaded = converted.to_data().unwrap();
            assert_eq!(loaded.dtype, DType::F32, "{dtype:?}");
            // 0.5 and -3.25 are exact in every one of these types.
            assert_eq!(loaded.to_vec::<f32>().unwrap(), values, "{dtype:?}");
        }
        let plain = check(TensorData::new(values.to_vec(), [2]), ParameterKind::Float);
        assert!(plain.problems.is_empty() && !plain.needs_conversion);
    }
}
