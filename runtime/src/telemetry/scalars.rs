//! Report structs as named scalar series, so every number a report carries is
//! plotted without a hand-kept list that could drift from the struct.

use serde::Serialize;
use serde_json::Value;

/// Every number in `value`'s serialised form, named by its path of field names
/// joined with `/` (array elements by index); other values are left out.
pub fn scalars_of(value: &impl Serialize) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    if let Ok(json) = serde_json::to_value(value) {
        collect(&json, String::new(), &mut out);
    }
    out
}

fn collect(value: &Value, path: String, out: &mut Vec<(String, f64)>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}/{key}")
        }
    };
    match value {
        Value::Number(n) => {
            if let Some(v) = n.as_f64() {
                out.push((path, v));
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                collect(field, join(key), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect(item, join(&i.to_string()), out);
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Inner {
        loss: f32,
        name: &'static str,
    }

    #[derive(Serialize)]
    struct Outer {
        version: u64,
        inner: Inner,
        curve: Vec<f64>,
    }

    #[test]
    fn numbers_are_named_by_their_path() {
        let mut values = scalars_of(&Outer {
            version: 3,
            inner: Inner {
                loss: 0.5,
                name: "x",
            },
            curve: vec![1.0, 2.0],
        });
        values.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            values,
            vec![
                ("curve/0".to_string(), 1.0),
                ("curve/1".to_string(), 2.0),
                ("inner/loss".to_string(), 0.5),
                ("version".to_string(), 3.0),
            ]
        );
    }
}
