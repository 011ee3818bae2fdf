//! A table's columns twice: as the engine sees them (the *logical* schema: Arrow types as SQL
//! made them, with the declared SQL type and other field metadata) and as its Parquet files and
//! Delta log hold them (the *storage* schema: the Arrow types of Delta's own types, which every
//! Delta reader understands). Where the two differ (`VARCHAR` is `Utf8View` to DataFusion and
//! `string` to Delta; `TIMESTAMP` is nanoseconds to DataFusion and microseconds to Delta), the
//! logical type is kept in the column's Delta metadata (`accelsql.arrow_type`) and rows are cast
//! on their way in and out.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use deltalake::kernel::engine::arrow_conversion::{TryIntoArrow, TryIntoKernel};
use deltalake::kernel::{MetadataValue, StructType};

use crate::error::{Result, StorageError};

/// The Delta column metadata key that keeps a column's logical Arrow type when its storage type
/// differs.
pub const ARROW_TYPE_KEY: &str = "accelsql.arrow_type";

/// A table's columns as the engine sees them and as its files hold them.
#[derive(Debug, Clone)]
pub struct TableSchema {
    /// As the engine sees them: the types SQL gave them, with their field metadata.
    pub logical: SchemaRef,
    /// As the Parquet files hold them: Delta's types in Arrow.
    pub storage: SchemaRef,
    /// As the Delta log holds them.
    pub delta: StructType,
}

impl TableSchema {
    /// The schema of a new table whose columns are `logical`.
    ///
    /// # Errors
    ///
    /// 0A000 for a column whose type a table cannot hold (a union, say).
    pub fn from_logical(logical: &Schema) -> Result<Self> {
        let mut storage_fields = Vec::with_capacity(logical.fields().len());
        for field in logical.fields() {
            let stored =
                storage_type(field.data_type()).ok_or_else(|| StorageError::Unsupported {
                    what: format!(
                        "column {} of type {} cannot be kept in a table",
                        field.name(),
                        field.data_type()
                    ),
                })?;
            let mut metadata: HashMap<String, String> = field
                .metadata()
                .iter()
                .filter(|(k, _)| k.as_str() != ARROW_TYPE_KEY)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if &stored != field.data_type() {
                metadata.insert(ARROW_TYPE_KEY.to_string(), field.data_type().to_string());
            }
            storage_fields.push(
                Field::new(field.name(), stored, field.is_nullable()).with_metadata(metadata),
            );
        }
        let with_metadata = Schema::new(storage_fields);
        let delta: StructType =
            (&with_metadata)
                .try_into_kernel()
                .map_err(|e| StorageError::Unsupported {
                    what: format!("these columns cannot be kept in a Delta table: {e}"),
                })?;
        Self::from_delta(&delta)
    }

    /// The schema of a table whose Delta log says `delta`.
    ///
    /// # Errors
    ///
    /// XX001 when the log's schema has no Arrow form (a damaged or foreign log).
    pub fn from_delta(delta: &StructType) -> Result<Self> {
        let storage: Schema = delta.try_into_arrow().map_err(|e| StorageError::Corrupt {
            table: String::new(),
            detail: format!("the log's schema has no Arrow form: {e}"),
        })?;
        let mut storage_fields: Vec<FieldRef> = Vec::with_capacity(storage.fields().len());
        let mut logical_fields: Vec<FieldRef> = Vec::with_capacity(storage.fields().len());
        for (field, column) in storage.fields().iter().zip(delta.fields()) {
            let mut metadata: HashMap<String, String> = column
                .metadata()
                .iter()
                .filter_map(|(k, v)| match v {
                    MetadataValue::String(s) => Some((k.clone(), s.clone())),
                    _ => None,
                })
                .collect();
            let logical_type = match metadata.remove(ARROW_TYPE_KEY) {
                Some(text) => {
                    DataType::from_str(&text).unwrap_or_else(|_| field.data_type().clone())
                }
                None => field.data_type().clone(),
            };
            storage_fields.push(Arc::new(Field::new(
                field.name(),
                field.data_type().clone(),
                field.is_nullable(),
            )));
            logical_fields.push(Arc::new(
                Field::new(field.name(), logical_type, field.is_nullable()).with_metadata(metadata),
            ));
        }
        Ok(Self {
            logical: Arc::new(Schema::new(logical_fields)),
            storage: Arc::new(Schema::new(storage_fields)),
            delta: delta.clone(),
        })
    }

    /// `batch` (with the logical schema's columns, in order) as its files hold it.
    ///
    /// # Errors
    ///
    /// 23502 for a NULL in a NOT NULL column; 22000 for a value its storage type cannot hold.
    pub fn to_storage(&self, table: &str, batch: &RecordBatch) -> Result<RecordBatch> {
        if batch.num_columns() != self.storage.fields().len() {
            return Err(StorageError::Data {
                detail: format!(
                    "table {table} has {} columns, the rows written to it {}",
                    self.storage.fields().len(),
                    batch.num_columns()
                ),
            });
        }
        let options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        for (array, field) in batch.columns().iter().zip(self.storage.fields()) {
            if !field.is_nullable() && array.null_count() > 0 {
                return Err(StorageError::NotNull {
                    table: table.to_string(),
                    column: field.name().clone(),
                });
            }
            if array.data_type() == field.data_type() {
                columns.push(Arc::clone(array));
                continue;
            }
            let cast = cast_with_options(array, field.data_type(), &options).map_err(|e| {
                StorageError::Data {
                    detail: format!(
                        "column {} of table {table}: a {} value does not fit its stored type {}: {e}",
                        field.name(),
                        array.data_type(),
                        field.data_type()
                    ),
                }
            })?;
            columns.push(cast);
        }
        RecordBatch::try_new_with_options(
            Arc::clone(&self.storage),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(|e| StorageError::Data {
            detail: format!("rows for table {table}: {e}"),
        })
    }

    /// This schema with `field` added at the end (`ALTER TABLE … ADD COLUMN`): nullable, as
    /// the rows already there have no value for it.
    pub fn with_column(&self, field: &Field) -> Result<Self> {
        let mut fields: Vec<Field> = self
            .logical
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(field.clone().with_nullable(true));
        Self::from_logical(&Schema::new(fields))
    }
}

/// The Delta-compatible Arrow type a column of `logical` type is stored as; `None` when there
/// is none.
pub fn storage_type(logical: &DataType) -> Option<DataType> {
    use DataType::*;
    Some(match logical {
        Boolean | Int8 | Int16 | Int32 | Int64 | Float32 | Float64 | Utf8 | Binary | Date32 => {
            logical.clone()
        }
        Null | Utf8View | LargeUtf8 | Interval(_) => Utf8,
        UInt8 => Int16,
        UInt16 => Int32,
        UInt32 => Int64,
        UInt64 => Decimal128(20, 0),
        Float16 => Float32,
        BinaryView | LargeBinary | FixedSizeBinary(_) => Binary,
        Decimal32(p, s) | Decimal64(p, s) | Decimal128(p, s) if *s >= 0 => Decimal128(*p, *s),
        Decimal256(p, s) if *p <= 38 && *s >= 0 => Decimal128(*p, *s),
        Decimal32(..) | Decimal64(..) | Decimal128(..) | Decimal256(..) => Utf8,
        Date64 => Timestamp(TimeUnit::Microsecond, None),
        Timestamp(_, None) => Timestamp(TimeUnit::Microsecond, None),
        Timestamp(_, Some(_)) => Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Time32(_) | Time64(_) | Duration(_) => Int64,
        List(item)
        | LargeList(item)
        | ListView(item)
        | LargeListView(item)
        | FixedSizeList(item, _) => List(Arc::new(Field::new(
            "element",
            storage_type(item.data_type())?,
            item.is_nullable(),
        ))),
        Struct(fields) => Struct(
            fields
                .iter()
                .map(|f| {
                    Some(Field::new(
                        f.name(),
                        storage_type(f.data_type())?,
                        f.is_nullable(),
                    ))
                })
                .collect::<Option<Fields>>()?,
        ),
        Map(entries, _) => {
            let Struct(kv) = entries.data_type() else {
                return None;
            };
            let [key, value] = kv.iter().collect::<Vec<_>>()[..] else {
                return None;
            };
            Map(
                Arc::new(Field::new(
                    "key_value",
                    Struct(Fields::from(vec![
                        Field::new("key", storage_type(key.data_type())?, false),
                        Field::new(
                            "value",
                            storage_type(value.data_type())?,
                            value.is_nullable(),
                        ),
                    ])),
                    false,
                )),
                false,
            )
        }
        Dictionary(_, value) => storage_type(value)?,
        RunEndEncoded(_, values) => storage_type(values.data_type())?,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        FixedSizeListBuilder, Float32Builder, Int64Array, StringViewArray, TimestampNanosecondArray,
    };

    fn logical() -> Schema {
        let mut declared = HashMap::new();
        declared.insert(
            "accelsql.sql_type".to_string(),
            "VARCHAR(100) UTF8".to_string(),
        );
        Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, true).with_metadata(declared),
            Field::new("at", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
            Field::new(
                "v",
                DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 2),
                true,
            ),
        ])
    }

    #[test]
    fn the_logical_schema_survives_the_delta_log() {
        let schema = TableSchema::from_logical(&logical()).unwrap();
        // The log's schema, as JSON and back, as another process would read it.
        let json = serde_json::to_string(&schema.delta).unwrap();
        let delta: StructType = serde_json::from_str(&json).unwrap();
        let again = TableSchema::from_delta(&delta).unwrap();
        assert_eq!(again.logical.as_ref(), &logical());
        assert_eq!(
            again.storage.field(1).data_type(),
            &DataType::Utf8,
            "Delta's string"
        );
        assert_eq!(
            again.storage.field(2).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        assert!(json.contains("VARCHAR(100) UTF8"), "{json}");
    }

    #[test]
    fn rows_are_cast_for_storage_and_nulls_in_not_null_columns_refused() {
        let schema = TableSchema::from_logical(&logical()).unwrap();
        let mut v = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        v.values().append_slice(&[1.0, 2.0]);
        v.append(true);
        let batch = RecordBatch::try_new(
            Arc::new(logical()),
            vec![
                Arc::new(Int64Array::from(vec![1])),
                Arc::new(StringViewArray::from(vec!["a"])),
                Arc::new(TimestampNanosecondArray::from(vec![1_000_000_123])),
                Arc::new(v.finish()),
            ],
        )
        .unwrap();
        let stored = schema.to_storage("t", &batch).unwrap();
        assert_eq!(stored.schema(), schema.storage);
        let bad = RecordBatch::try_new(
            Arc::new(logical()),
            vec![
                Arc::new(Int64Array::from(vec![None])),
                Arc::new(StringViewArray::from(vec!["a"])),
                Arc::new(TimestampNanosecondArray::from(vec![1])),
                batch.column(3).clone(),
            ],
        );
        // The batch itself refuses a NULL in a non-nullable field; a nullable one reaching a
        // NOT NULL column is refused by the table.
        assert!(bad.is_err());
        let nullable = Schema::new(vec![Field::new("id", DataType::Int64, true)]);
        let strict =
            TableSchema::from_logical(&Schema::new(vec![Field::new("id", DataType::Int64, false)]))
                .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(nullable),
            vec![Arc::new(Int64Array::from(vec![None, Some(1)]))],
        )
        .unwrap();
        let e = strict.to_storage("t", &batch).unwrap_err();
        assert_eq!(e.code(), "23502", "{e}");
    }

    #[test]
    fn unions_are_refused_with_a_code() {
        let schema = Schema::new(vec![Field::new(
            "u",
            DataType::Union(
                arrow::datatypes::UnionFields::empty(),
                arrow::datatypes::UnionMode::Dense,
            ),
            true,
        )]);
        let e = TableSchema::from_logical(&schema).unwrap_err();
        assert_eq!(e.code(), "0A000");
    }
}
