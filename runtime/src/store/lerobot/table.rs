//! Parquet files of a LeRobot dataset read into typed columns, and written from them.
//! Every error names the file and the column.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait, RecordBatch};
use arrow_schema::{DataType, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// A parquet file read whole.
pub struct Table {
    path: PathBuf,
    batches: Vec<RecordBatch>,
    rows: usize,
}

impl Table {
    /// Reads the parquet file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot open it ({e})", path.display()))?;
        let bad = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "{}: not a readable parquet file ({e}); it is damaged or was not written completely",
                path.display()
            )
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| bad(&e))?
            .build()
            .map_err(|e| bad(&e))?;
        let batches = reader.collect::<Result<Vec<_>, _>>().map_err(|e| bad(&e))?;
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        Ok(Self {
            path: path.to_path_buf(),
            batches,
            rows,
        })
    }

    /// Rows in the file.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Whether the file has a column `name`.
    pub fn has(&self, name: &str) -> bool {
        self.batches
            .first()
            .is_some_and(|b| b.schema().index_of(name).is_ok())
    }

    fn column(&self, name: &str) -> anyhow::Result<Vec<&ArrayRef>> {
        self.batches
            .iter()
            .map(|batch| {
                batch.column_by_name(name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: no column `{name}`; its columns: {}",
                        self.path.display(),
                        batch
                            .schema()
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect()
    }

    fn unexpected(&self, name: &str, found: &DataType, wanted: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{}: column `{name}` holds {found}, imago reads {wanted} there",
            self.path.display()
        )
    }

    /// An integer column, as `i64`.
    pub fn integers(&self, name: &str) -> anyhow::Result<Vec<i64>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            match array.data_type() {
                DataType::Int64 => out.extend(
                    array
                        .as_primitive::<Int64Type>()
                        .iter()
                        .map(|v| v.unwrap_or(-1)),
                ),
                DataType::Int32 => out.extend(
                    array
                        .as_primitive::<Int32Type>()
                        .iter()
                        .map(|v| v.map_or(-1, i64::from)),
                ),
                DataType::UInt32 => out.extend(
                    array
                        .as_primitive::<UInt32Type>()
                        .iter()
                        .map(|v| v.map_or(-1, i64::from)),
                ),
                DataType::UInt64 => out.extend(
                    array
                        .as_primitive::<UInt64Type>()
                        .iter()
                        .map(|v| v.map_or(-1, |v| v as i64)),
                ),
                other => return Err(self.unexpected(name, other, "integers")),
            }
        }
        Ok(out)
    }

    /// A float column (one value per row), as `f32`; a list column of length one too.
    pub fn floats(&self, name: &str) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            match array.data_type() {
                DataType::Float32 => out.extend(
                    array
                        .as_primitive::<Float32Type>()
                        .iter()
                        .map(|v| v.unwrap_or(f32::NAN)),
                ),
                DataType::Float64 => out.extend(
                    array
                        .as_primitive::<Float64Type>()
                        .iter()
                        .map(|v| v.map_or(f32::NAN, |v| v as f32)),
                ),
                _ => {
                    for row in self.vectors_of(name, array, 1)? {
                        out.push(row[0]);
                    }
                }
            }
        }
        Ok(out)
    }

    /// A boolean column.
    pub fn booleans(&self, name: &str) -> anyhow::Result<Vec<bool>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            match array.data_type() {
                DataType::Boolean => {
                    out.extend(array.as_boolean().iter().map(|v| v.unwrap_or(false)))
                }
                DataType::List(_) | DataType::FixedSizeList(_, _) => {
                    let list = list_values(array)
                        .ok_or_else(|| self.unexpected(name, array.data_type(), "booleans"))?;
                    let values = list
                        .values()
                        .as_boolean_opt()
                        .ok_or_else(|| self.unexpected(name, array.data_type(), "booleans"))?;
                    out.extend((0..list.len()).map(|i| values.value(list.offset(i))));
                }
                other => return Err(self.unexpected(name, other, "booleans")),
            }
        }
        Ok(out)
    }

    /// A vector column (a list of `dim` floats per row), as `f32`.
    pub fn vectors(&self, name: &str, dim: usize) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            out.extend(self.vectors_of(name, array, dim)?);
        }
        Ok(out)
    }

    fn vectors_of(
        &self,
        name: &str,
        array: &ArrayRef,
        dim: usize,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        let wanted = format!("lists of {dim} floats");
        let list =
            list_values(array).ok_or_else(|| self.unexpected(name, array.data_type(), &wanted))?;
        let values: Vec<f32> = match list.values().data_type() {
            DataType::Float32 => list
                .values()
                .as_primitive::<Float32Type>()
                .values()
                .to_vec(),
            DataType::Float64 => list
                .values()
                .as_primitive::<Float64Type>()
                .values()
                .iter()
                .map(|&v| v as f32)
                .collect(),
            other => return Err(self.unexpected(name, other, &wanted)),
        };
        (0..list.len())
            .map(|row| {
                let (start, len) = (list.offset(row), list.length(row));
                anyhow::ensure!(
                    len == dim,
                    "{}: column `{name}` row {row} has {len} values, the dataset's info.json gives {dim}",
                    self.path.display()
                );
                Ok(values[start..start + len].to_vec())
            })
            .collect()
    }

    /// A column of lists of text (an episode's tasks).
    pub fn string_lists(&self, name: &str) -> anyhow::Result<Vec<Vec<String>>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            let list = list_values(array)
                .ok_or_else(|| self.unexpected(name, array.data_type(), "lists of text"))?;
            let values: Vec<String> = match list.values().data_type() {
                DataType::Utf8 => list
                    .values()
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect(),
                DataType::LargeUtf8 => list
                    .values()
                    .as_string::<i64>()
                    .iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect(),
                other => return Err(self.unexpected(name, other, "lists of text")),
            };
            out.extend(
                (0..list.len()).map(|row| {
                    values[list.offset(row)..list.offset(row) + list.length(row)].to_vec()
                }),
            );
        }
        Ok(out)
    }

    /// The encoded bytes of an image column (LeRobot's `{bytes, path}` structs).
    pub fn image_bytes(&self, name: &str) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(self.rows);
        for array in self.column(name)? {
            let wanted = "images ({bytes, path} structs)";
            let structs = array
                .as_struct_opt()
                .ok_or_else(|| self.unexpected(name, array.data_type(), wanted))?;
            let bytes = structs
                .column_by_name("bytes")
                .ok_or_else(|| self.unexpected(name, array.data_type(), wanted))?;
            match bytes.data_type() {
                DataType::Binary => out.extend(
                    bytes
                        .as_binary::<i32>()
                        .iter()
                        .map(|v| v.unwrap_or_default().to_vec()),
                ),
                DataType::LargeBinary => out.extend(
                    bytes
                        .as_binary::<i64>()
                        .iter()
                        .map(|v| v.unwrap_or_default().to_vec()),
                ),
                other => return Err(self.unexpected(name, other, wanted)),
            }
        }
        Ok(out)
    }
}

/// The rows of a list column as `(offset, length)` into its flat values.
struct ListView<'a> {
    values: &'a ArrayRef,
    offsets: Vec<(usize, usize)>,
}

impl ListView<'_> {
    fn len(&self) -> usize {
        self.offsets.len()
    }
    fn offset(&self, row: usize) -> usize {
        self.offsets[row].0
    }
    fn length(&self, row: usize) -> usize {
        self.offsets[row].1
    }
    fn values(&self) -> &ArrayRef {
        self.values
    }
}

fn list_values(array: &ArrayRef) -> Option<ListView<'_>> {
    fn view<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> ListView<'_> {
        ListView {
            values: list.values(),
            offsets: list
                .offsets()
                .windows(2)
                .map(|w| (w[0].as_usize(), (w[1] - w[0]).as_usize()))
                .collect(),
        }
    }
    match array.data_type() {
        DataType::List(_) => Some(view(array.as_list::<i32>())),
        DataType::LargeList(_) => Some(view(array.as_list::<i64>())),
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list();
            let size = *size as usize;
            Some(ListView {
                values: list.values(),
                offsets: (0..list.len())
                    .map(|row| ((list.offset() + row) * size, size))
                    .collect(),
            })
        }
        _ => None,
    }
}

/// Writes record batches to a parquet file (snappy), as LeRobot's files are.
pub struct TableWriter {
    path: PathBuf,
    schema: Arc<Schema>,
    writer: ArrowWriter<File>,
}

impl TableWriter {
    /// Creates `path` (and its folders) for rows of `schema`, with `metadata` as the
    /// schema's key-value metadata (pandas' index description, for one).
    pub fn create(
        path: &Path,
        schema: Schema,
        metadata: HashMap<String, String>,
    ) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        let file = File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let schema = Arc::new(schema.with_metadata(metadata));
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            schema,
            writer,
        })
    }

    /// Appends one batch of rows.
    pub fn write(&mut self, columns: Vec<ArrayRef>) -> anyhow::Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| {
            anyhow::anyhow!(
                "rows for {} do not fit its columns: {e}",
                self.path.display()
            )
        })?;
        self.writer
            .write(&batch)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.path.display()))
    }

    /// Finishes the file and flushes it to disk.
    pub fn finish(self) -> anyhow::Result<()> {
        let file = self
            .writer
            .into_inner()
            .map_err(|e| anyhow::anyhow!("cannot finish {}: {e}", self.path.display()))?;
        file.sync_all()
            .map_err(|e| anyhow::anyhow!("cannot flush {}: {e}", self.path.display()))
    }
}
