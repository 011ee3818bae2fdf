// Licensed to the Apache Software Foundation (ASF) under one
// or more contributor license agreements.  See the NOTICE file
// distributed with this work for additional information
// regarding copyright ownership.  The ASF licenses this file
// to you under the Apache License, Version 2.0 (the
// "License"); you may not use this file except in compliance
// with the License.  You may obtain a copy of the License at
//
//   http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing,
// software distributed under the License is distributed on an
// "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
// KIND, either express or implied.  See the License for the
// specific language governing permissions and limitations
// under the License.
//
// Ported from datafusion-sqllogictest 55.2.0, src/test_context.rs and
// src/test_context/range_partitioning.rs. Changes for accelsql:
// - fixtures register into an accelsql session's `SessionContext` (`Session::context`) and
//   return errors instead of panicking (`?` for `unwrap()`/`expect()`);
// - files the fixtures write go under the runner's stand-in for upstream's tree
//   (`crate::workspace`), so that plans print them at upstream's paths;
// - URL tables (dynamic_file.slt) are accelsql's engine option (`EngineOptions::url_tables`),
//   see `needs_url_tables`;
// - the avro fixture is left out (avro is compiled out of accelsql's DataFusion);
// - the temporary table's `schema()` returns an empty schema instead of `unimplemented!()`;
// - arrow and DataFusion are reached through `accelsql_engine::datafusion`.

//! The tables, functions and planners upstream's runner registers for particular `.slt` files
//! (its `TestContext::try_new_for_test_file`), registered the same way into the sessions of
//! those files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accelsql_engine::datafusion;
use accelsql_engine::datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, DictionaryArray, Float64Array, Int32Array, LargeBinaryArray,
    LargeStringArray, StringArray, StructArray, TimestampNanosecondArray, UInt32Array, UnionArray,
};
use accelsql_engine::datafusion::arrow::buffer::ScalarBuffer;
use accelsql_engine::datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit, UInt32Type, UnionFields,
};
use accelsql_engine::datafusion::arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider, Session,
};
use datafusion::common::cast::as_float64_array;
use datafusion::common::{DataFusionError, Result, exec_err, not_impl_err};
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::execution::SessionStateBuilder;
use datafusion::functions::math::abs;
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
    create_udf,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{CsvReadOptions, SessionContext};
use datafusion::sql::sqlparser::ast;

mod range_partitioning;

/// Whether upstream's runner turns URL tables on for the file at `path` (dynamic_file.slt).
pub fn needs_url_tables(path: &Path) -> bool {
    file_name(path) == "dynamic_file.slt"
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Registers into `ctx` what upstream's runner registers for the file at `path`; `dir` is a
/// folder of the file's own for the files a fixture writes.
pub async fn register(path: &Path, ctx: &SessionContext, dir: &Path) -> Result<()> {
    match file_name(path) {
        "cast_extension_type_metadata.slt" => {
            let state = SessionStateBuilder::new_from_existing(ctx.state())
                .with_type_planner(Arc::new(SqlLogicTestTypePlanner))
                .build();
            *ctx.state_ref().write() = state;
        }
        "cte.slt" => register_strict_schema_provider(ctx)?,
        "information_schema_table_types.slt" => register_temp_table(ctx)?,
        "information_schema_columns.slt" => register_table_with_many_types(ctx)?,
        "map.slt" => register_table_with_map(ctx)?,
        "joins.slt" => {
            ctx.register_udf(create_example_udf());
            register_partition_table(ctx, &dir.join("partition_table")).await?;
            register_table_with_many_types(ctx)?;
        }
        "range_partitioning.slt" => {
            range_partitioning::register_range_partitioned_table(ctx);
        }
        "metadata.slt" | "arrow_field.slt" => {
            register_metadata_tables(ctx)?;
            register_conflicting_metadata_tables(ctx)?;
        }
        "union_function.slt" => register_union_table(ctx)?,
        "aggregate.slt" => register_approx_distinct_union_table(ctx)?,
        "dictionary_struct.slt" => register_dictionary_struct_table(ctx)?,
        "async_udf.slt" => register_async_abs_udf(ctx),
        _ => {}
    }
    Ok(())
}

/// The folder for files the fixtures of `path` write: beside upstream's scratch folders.
pub fn fixture_dir(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    crate::workspace::sqllogictest_dir()
        .join("test_files/fixtures")
        .join(stem)
}

#[derive(Debug)]
struct SqlLogicTestTypePlanner;

impl TypePlanner for SqlLogicTestTypePlanner {
    fn plan_type_field(&self, sql_type: &ast::DataType) -> Result<Option<FieldRef>> {
        match sql_type {
            ast::DataType::Uuid => Ok(Some(Arc::new(
                Field::new("", DataType::FixedSizeBinary(16), true).with_metadata(
                    [("ARROW:extension:name".to_string(), "arrow.uuid".to_string())].into(),
                ),
            ))),
            _ => Ok(None),
        }
    }
}

// The goal of `StrictOrdersSchema` is to exercise end-to-end query planning while detecting
// *unexpected* catalog lookups: if DataFusion treats a CTE reference (e.g. `"barbaz"`) as a
// table reference, the planner asks the schema provider for it, and this one fails the
// statement (upstream's panics; an error is as visible in a `.slt` file and keeps the runner up).
#[derive(Debug)]
struct StrictOrdersSchema {
    orders: Arc<dyn TableProvider>,
}

#[async_trait]
impl SchemaProvider for StrictOrdersSchema {
    fn table_names(&self) -> Vec<String> {
        vec!["orders".to_string()]
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        match name {
            "orders" => Ok(Some(Arc::clone(&self.orders))),
            other => exec_err!(
                "unexpected table lookup: {other}. This maybe indicates a CTE reference was \
                 incorrectly treated as a catalog table reference."
            ),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "orders"
    }
}

fn register_strict_schema_provider(ctx: &SessionContext) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "order_id",
        DataType::Int32,
        false,
    )]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(Int32Array::from(vec![1, 2]))],
    )?;
    let orders = MemTable::try_new(schema, vec![vec![batch]])?;
    let schema_provider: Arc<dyn SchemaProvider> = Arc::new(StrictOrdersSchema {
        orders: Arc::new(orders),
    });
    let Some(catalog) = ctx.catalog("datafusion") else {
        return exec_err!("the default catalog datafusion does not exist");
    };
    catalog.register_schema("strict_schema", schema_provider)?;
    Ok(())
}

/// Generates a partitioned CSV file in `dir` and registers it as `test_partition_table`.
async fn register_partition_table(ctx: &SessionContext, dir: &Path) -> Result<()> {
    let partition_count = 1;
    let file_extension = "csv";
    let schema = Arc::new(Schema::new(vec![
        Field::new("c1", DataType::UInt32, false),
        Field::new("c2", DataType::UInt64, false),
        Field::new("c3", DataType::Boolean, false),
    ]));
    std::fs::create_dir_all(dir)?;
    for partition in 0..partition_count {
        let filename = format!("partition-{partition}.{file_extension}");
        let data: String = (0..=10)
            .map(|i| format!("{},{},{}\n", partition, i, i % 2 == 0))
            .collect();
        std::fs::write(dir.join(filename), data)?;
    }
    let Some(dir) = dir.to_str() else {
        return exec_err!("{} is not UTF-8", dir.display());
    };
    ctx.register_csv(
        "test_partition_table",
        dir,
        CsvReadOptions::new().schema(&schema),
    )
    .await
}

/// Registers a LOCAL TEMPORARY table.
fn register_temp_table(ctx: &SessionContext) -> Result<()> {
    #[derive(Debug)]
    struct TestTable(TableType);

    #[async_trait]
    impl TableProvider for TestTable {
        fn schema(&self) -> SchemaRef {
            Arc::new(Schema::empty())
        }

        fn table_type(&self) -> TableType {
            self.0
        }

        async fn scan(
            &self,
            _state: &dyn Session,
            _: Option<&Vec<usize>>,
            _: &[Expr],
            _: Option<usize>,
        ) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
            not_impl_err!("the temporary test table cannot be scanned")
        }
    }

    ctx.register_table(
        "datafusion.public.temp",
        Arc::new(TestTable(TableType::Temporary)),
    )?;
    Ok(())
}

fn register_table_with_many_types(ctx: &SessionContext) -> Result<()> {
    let catalog = MemoryCatalogProvider::new();
    let schema = MemorySchemaProvider::new();
    catalog.register_schema("my_schema", Arc::new(schema))?;
    ctx.register_catalog("my_catalog", Arc::new(catalog));
    ctx.register_table(
        "my_catalog.my_schema.table_with_many_types",
        table_with_many_types()?,
    )?;
    Ok(())
}

fn register_table_with_map(ctx: &SessionContext) -> Result<()> {
    let key = Field::new("key", DataType::Int64, false);
    let value = Field::new("value", DataType::Int64, true);
    let map_field = Field::new("entries", DataType::Struct(vec![key, value].into()), false);
    let fields = vec![
        Field::new("int_field", DataType::Int64, true),
        Field::new("map_field", DataType::Map(map_field.into(), false), true),
    ];
    let schema = Schema::new(fields);
    let memory_table = MemTable::try_new(schema.into(), vec![vec![]])?;
    ctx.register_table("table_with_map", Arc::new(memory_table))?;
    Ok(())
}

fn table_with_many_types() -> Result<Arc<dyn TableProvider>> {
    let schema = Schema::new(vec![
        Field::new("int32_col", DataType::Int32, false),
        Field::new("float64_col", DataType::Float64, true),
        Field::new("utf8_col", DataType::Utf8, true),
        Field::new("large_utf8_col", DataType::LargeUtf8, false),
        Field::new("binary_col", DataType::Binary, false),
        Field::new("large_binary_col", DataType::LargeBinary, false),
        Field::new(
            "timestamp_nanos",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Float64Array::from(vec![1.0])),
            Arc::new(StringArray::from(vec![Some("foo")])),
            Arc::new(LargeStringArray::from(vec![Some("bar")])),
            Arc::new(BinaryArray::from(vec![b"foo" as &[u8]])),
            Arc::new(LargeBinaryArray::from(vec![b"foo" as &[u8]])),
            Arc::new(TimestampNanosecondArray::from(vec![Some(123)])),
        ],
    )?;
    let provider = MemTable::try_new(Arc::new(schema), vec![vec![batch]])?;
    Ok(Arc::new(provider))
}

fn metadata(value: &str) -> HashMap<String, String> {
    HashMap::from([(String::from("metadata_key"), String::from(value))])
}

/// Registers a table_with_metadata that contains both field level and Table level metadata.
fn register_metadata_tables(ctx: &SessionContext) -> Result<()> {
    let id = Field::new("id", DataType::Int32, true).with_metadata(metadata("the id field"));
    let name = Field::new("name", DataType::Utf8, true).with_metadata(metadata("the name field"));
    let l_name =
        Field::new("l_name", DataType::Utf8, true).with_metadata(metadata("the l_name field"));
    let ts = Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false)
        .with_metadata(metadata("ts non-nullable field"));
    let nonnull_name = Field::new("nonnull_name", DataType::Utf8, false)
        .with_metadata(metadata("the nonnull_name field"));
    let schema = Schema::new(vec![id, name, l_name, ts, nonnull_name])
        .with_metadata(metadata("the entire schema"));
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])) as _,
            Arc::new(StringArray::from(vec![None, Some("bar"), Some("baz")])) as _,
            Arc::new(StringArray::from(vec![None, Some("l_bar"), Some("l_baz")])) as _,
            Arc::new(TimestampNanosecondArray::from(vec![
                1599572549190855123,
                1599572549190855123,
                1599572549190855123,
            ])) as _,
            Arc::new(StringArray::from(vec![
                Some("no_foo"),
                Some("no_bar"),
                Some("no_baz"),
            ])) as _,
        ],
    )?;
    ctx.register_batch("table_with_metadata", batch)?;
    Ok(())
}

/// The UDF named "example": the sum of two f64 columns (see DataFusion's `sample_udf.rs`).
fn create_example_udf() -> ScalarUDF {
    let adder = Arc::new(|args: &[ColumnarValue]| {
        let [ColumnarValue::Array(lhs), ColumnarValue::Array(rhs)] = args else {
            return exec_err!("example() takes two columns");
        };
        let lhs = as_float64_array(lhs)?;
        let rhs = as_float64_array(rhs)?;
        let array = lhs
            .iter()
            .zip(rhs.iter())
            .map(|(lhs, rhs)| match (lhs, rhs) {
                (Some(lhs), Some(rhs)) => Some(lhs + rhs),
                _ => None,
            })
            .collect::<Float64Array>();
        Ok(ColumnarValue::from(Arc::new(array) as ArrayRef))
    });
    create_udf(
        "example",
        vec![DataType::Float64, DataType::Float64],
        DataType::Float64,
        Volatility::Immutable,
        adder,
    )
}

fn register_union_table(ctx: &SessionContext) -> Result<()> {
    let union = UnionArray::try_new(
        UnionFields::try_new(
            // typeids: 3 for int, 1 for string
            vec![3, 1],
            vec![
                Field::new("int", DataType::Int32, false),
                Field::new("string", DataType::Utf8, false),
            ],
        )?,
        ScalarBuffer::from(vec![3, 1, 3, 3, 1, 3]),
        None,
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3, 1, 5, 3])),
            Arc::new(StringArray::from(vec![
                Some("foo"),
                Some("bar"),
                Some("baz"),
                Some("qux"),
                Some("bar"),
                Some("quux"),
            ])),
        ],
    )?;
    let schema = Schema::new(vec![Field::new(
        "union_column",
        union.data_type().clone(),
        false,
    )]);
    let batch = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(union)])?;
    ctx.register_batch("union_table", batch)?;
    Ok(())
}

fn register_approx_distinct_union_table(ctx: &SessionContext) -> Result<()> {
    let union = UnionArray::try_new(
        UnionFields::try_new(
            vec![0, 1],
            vec![
                Field::new("i", DataType::Int32, true),
                Field::new("s", DataType::Utf8, true),
            ],
        )?,
        ScalarBuffer::from(vec![0_i8, 0, 1, 1, 0, 0, 1, 0]),
        Some(ScalarBuffer::from(vec![0, 1, 0, 1, 2, 3, 2, 4])),
        vec![
            Arc::new(Int32Array::from(vec![
                Some(1),
                Some(1),
                None,
                None,
                Some(5),
            ])),
            Arc::new(StringArray::from(vec![Some("x"), Some("y"), None])),
        ],
    )?;
    let schema = Schema::new(vec![
        Field::new("g", DataType::Int32, false),
        Field::new("u", union.data_type().clone(), false),
    ]);
    let g = Arc::new(Int32Array::from(vec![1, 1, 1, 2, 2, 3, 3, 4]));
    let batch = RecordBatch::try_new(Arc::new(schema), vec![g, Arc::new(union)])?;
    ctx.register_batch("approx_distinct_union_test", batch)?;
    Ok(())
}

fn register_dictionary_struct_table(ctx: &SessionContext) -> Result<()> {
    // Deduplicated struct values: 3 unique structs.
    let names = Arc::new(StringArray::from(vec!["Alice", "Bob", "Carol"])) as ArrayRef;
    let ids = Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef;
    let struct_fields: Fields = vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("id", DataType::Int32, false),
    ]
    .into();
    let values_struct = Arc::new(StructArray::try_new(
        struct_fields.clone(),
        vec![names, ids],
        None,
    )?) as ArrayRef;
    // Dictionary keys index into the 3-element struct array: 5 rows with repeated references.
    let keys = UInt32Array::from(vec![0u32, 1, 2, 0, 1]);
    let dict = DictionaryArray::<UInt32Type>::try_new(keys, Arc::clone(&values_struct))?;
    // A plain struct column beside it, for comparison.
    let plain_names = Arc::new(StringArray::from(vec![
        "Alice", "Bob", "Carol", "Alice", "Bob",
    ])) as ArrayRef;
    let plain_ids = Arc::new(Int32Array::from(vec![1, 2, 3, 1, 2])) as ArrayRef;
    let plain_struct =
        StructArray::try_new(struct_fields.clone(), vec![plain_names, plain_ids], None)?;
    let dict_type = DataType::Dictionary(
        Box::new(DataType::UInt32),
        Box::new(DataType::Struct(struct_fields.clone())),
    );
    let schema = Schema::new(vec![
        Field::new("dict_struct", dict_type, false),
        Field::new(
            "plain_struct",
            DataType::Struct(struct_fields.clone()),
            false,
        ),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(dict) as ArrayRef,
            Arc::new(plain_struct) as ArrayRef,
        ],
    )?;
    ctx.register_batch("dict_struct_table", batch)?;

    // A dictionary-encoded struct column with null entries.
    let names_nullable = Arc::new(StringArray::from(vec!["X", "Y"])) as ArrayRef;
    let ids_nullable = Arc::new(Int32Array::from(vec![10, 20])) as ArrayRef;
    let struct_fields_nullable: Fields = vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("id", DataType::Int32, false),
    ]
    .into();
    let values_struct_nullable = Arc::new(StructArray::try_new(
        struct_fields_nullable.clone(),
        vec![names_nullable, ids_nullable],
        None,
    )?) as ArrayRef;
    let keys_nullable = UInt32Array::from(vec![Some(0), None, Some(1), None]);
    let dict_nullable =
        DictionaryArray::<UInt32Type>::try_new(keys_nullable, values_struct_nullable)?;
    let dict_type_nullable = DataType::Dictionary(
        Box::new(DataType::UInt32),
        Box::new(DataType::Struct(struct_fields_nullable)),
    );
    let schema_nullable = Schema::new(vec![Field::new("ds", dict_type_nullable, true)]);
    let batch_nullable = RecordBatch::try_new(
        Arc::new(schema_nullable),
        vec![Arc::new(dict_nullable) as ArrayRef],
    )?;
    ctx.register_batch("dict_struct_nullable", batch_nullable)?;
    Ok(())
}

fn register_async_abs_udf(ctx: &SessionContext) {
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct AsyncAbs {
        inner_abs: Arc<ScalarUDF>,
    }
    impl ScalarUDFImpl for AsyncAbs {
        fn name(&self) -> &str {
            "async_abs"
        }

        fn signature(&self) -> &Signature {
            self.inner_abs.signature()
        }

        fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
            self.inner_abs.return_type(arg_types)
        }

        fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
            not_impl_err!("{} can only be called from async contexts", self.name())
        }
    }
    #[async_trait]
    impl AsyncScalarUDFImpl for AsyncAbs {
        async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
            self.inner_abs.invoke_with_args(args)
        }
    }
    let udf = AsyncScalarUDF::new(Arc::new(AsyncAbs { inner_abs: abs() }));
    ctx.register_udf(udf.into_scalar_udf());
}

fn register_conflicting_metadata_tables(ctx: &SessionContext) -> Result<()> {
    let schema_left =
        Schema::new(vec![Field::new("a", DataType::Int32, false)]).with_metadata(metadata("left"));
    let data_left = Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10])) as ArrayRef;
    let batch_left = RecordBatch::try_new(Arc::new(schema_left), vec![data_left])?;
    ctx.register_batch("larger_table", batch_left)?;

    let schema_right =
        Schema::new(vec![Field::new("b", DataType::Int32, false)]).with_metadata(metadata("right"));
    let data_right = Arc::new(Int32Array::from(vec![1])) as ArrayRef;
    let batch_right = RecordBatch::try_new(Arc::new(schema_right), vec![data_right])?;
    ctx.register_batch("smaller_table", batch_right)?;
    Ok(())
}
