//! Files as tables through SQL: embeddings stored in Parquet (`FixedSizeList<Float32>` and
//! `List<Float32>`, several compressions) read by the vector built-ins, files named in FROM
//! (`EngineOptions::url_tables`), and the errors of missing files and unknown formats.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::Path;
use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{
    Array, AsArray, FixedSizeListArray, Float32Array, Int64Array, ListArray, RecordBatch,
};
use accelsql_engine::datafusion::arrow::buffer::OffsetBuffer;
use accelsql_engine::datafusion::arrow::datatypes::{
    DataType, Field, Float64Type, Int64Type, Schema,
};
use accelsql_engine::datafusion::parquet::arrow::ArrowWriter;
use accelsql_engine::datafusion::parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use accelsql_engine::datafusion::parquet::file::properties::WriterProperties;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, Session};

/// Four 3-dimensional embeddings: row i is closest to the query `[1, 0, 0]` in the order
/// 1, 3, 2, 4 (cosine 1, 0.8, 0, -1).
const EMBEDDINGS: [[f32; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.8, 0.6, 0.0],
    [-2.0, 0.0, 0.0],
];

fn session(url_tables: bool) -> Session {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        url_tables,
        ..EngineOptions::default()
    })
    .unwrap()
    .session()
}

/// Writes `id BIGINT, category BIGINT, emb` to `path` with `compression`; `emb` is a
/// `FixedSizeList<Float32>[3]` or, with `fixed` false, a `List<Float32>`.
fn write_embeddings(path: &Path, fixed: bool, compression: Compression) {
    let values = Arc::new(Float32Array::from_iter_values(
        EMBEDDINGS.iter().flatten().copied(),
    ));
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let emb: Arc<dyn Array> = if fixed {
        Arc::new(FixedSizeListArray::new(Arc::clone(&item), 3, values, None))
    } else {
        let offsets = OffsetBuffer::from_lengths([3; EMBEDDINGS.len()]);
        Arc::new(ListArray::new(Arc::clone(&item), offsets, values, None))
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Int64, false),
        Field::new("emb", emb.data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            Arc::new(Int64Array::from(vec![1, 1, 2, 2])),
            emb,
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(compression)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

fn int64s(batches: &[RecordBatch], col: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(col).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn float64s(batches: &[RecordBatch], col: usize) -> Vec<f64> {
    batches
        .iter()
        .flat_map(|b| {
            b.column(col)
                .as_primitive::<Float64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// Every compression Parquet writers commonly use, with the list type alternating.
fn compressions() -> Vec<(&'static str, Compression)> {
    vec![
        ("snappy", Compression::SNAPPY),
        ("zstd", Compression::ZSTD(ZstdLevel::default())),
        ("gzip", Compression::GZIP(GzipLevel::default())),
        ("lz4", Compression::LZ4_RAW),
        ("brotli", Compression::BROTLI(BrotliLevel::default())),
        ("none", Compression::UNCOMPRESSED),
    ]
}

#[tokio::test]
async fn the_vector_builtins_read_parquet_embeddings() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(false);
    for (i, (name, compression)) in compressions().into_iter().enumerate() {
        for fixed in [true, false] {
            let table = format!("docs_{name}_{}", if fixed { "fixed" } else { "list" });
            let path = dir.path().join(format!("{table}.parquet"));
            write_embeddings(&path, fixed, compression);
            s.sql(&format!(
                "CREATE EXTERNAL TABLE {table} STORED AS PARQUET LOCATION '{}'",
                path.display()
            ))
            .await
            .unwrap();
            let what = format!("{table} (file {i})");

            let b = s
                .sql(&format!(
                    "SELECT id, cosine_similarity(emb, [1.0, 0.0, 0.0]) AS s, \
                            dot_product(emb, [1.0, 0.0, 0.0]) AS d, \
                            l2_distance(emb, [1.0, 0.0, 0.0]) AS l \
                     FROM {table} ORDER BY s DESC, id"
                ))
                .await
                .unwrap();
            assert_eq!(int64s(&b, 0), [1, 3, 2, 4], "{what}");
            let cos = float64s(&b, 1);
            for (got, want) in cos.iter().zip([1.0, 0.8, 0.0, -1.0]) {
                assert!((got - want).abs() < 1e-6, "{what}: cosine {cos:?}");
            }
            let dot = float64s(&b, 2);
            for (got, want) in dot.iter().zip([1.0, 0.8, 0.0, -2.0]) {
                assert!((got - want).abs() < 1e-6, "{what}: dot {dot:?}");
            }
            let l2 = float64s(&b, 3);
            for (got, want) in l2.iter().zip([0.0, 0.4f64.sqrt(), 2f64.sqrt(), 3.0]) {
                assert!((got - want).abs() < 1e-6, "{what}: l2 {l2:?}");
            }

            let b = s
                .sql(&format!(
                    "SELECT category, vector_topk(id, emb, [1.0, 0.0, 0.0], 1) \
                     FROM {table} GROUP BY category ORDER BY category"
                ))
                .await
                .unwrap();
            assert_eq!(int64s(&b, 0), [1, 2], "{what}");
            assert_eq!(int64s(&b, 1), [1, 3], "{what}: top row of each category");
        }
    }
}

#[tokio::test]
async fn a_parquet_file_named_in_from_is_a_table_when_url_tables_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.parquet");
    write_embeddings(&path, true, Compression::SNAPPY);
    let sql = format!(
        "SELECT id FROM '{}' ORDER BY cosine_similarity(emb, [1.0, 0.0, 0.0]) DESC LIMIT 2",
        path.display()
    );

    let b = session(true).sql(&sql).await.unwrap();
    assert_eq!(int64s(&b, 0), [1, 3]);

    // Off (the default): the file is an unknown table.
    let e = session(false).sql(&sql).await.unwrap_err();
    assert_eq!(e.code(), "42000", "{e}");
    assert!(e.to_string().contains("not found"), "{e}");
}

#[tokio::test]
async fn a_plain_table_name_is_never_a_folder_of_the_working_directory() {
    // A folder of CSV files in the working directory, named as a table will be.
    let dir = tempfile::Builder::new()
        .prefix("plain_")
        .tempdir_in(".")
        .unwrap();
    std::fs::write(dir.path().join("a.csv"), "x\n7\n").unwrap();
    let name = dir
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let s = session(true);

    // Not a table yet: "not found", not the folder's rows.
    let e = s
        .sql(&format!("SELECT * FROM \"{name}\""))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42000", "{e}");
    // CREATE TABLE does not see the folder as an existing table.
    s.sql(&format!("CREATE TABLE \"{name}\"(v BIGINT) AS VALUES (1)"))
        .await
        .unwrap();
    let b = s.sql(&format!("SELECT v FROM \"{name}\"")).await.unwrap();
    assert_eq!(int64s(&b, 0), [1]);
    // The folder is still reachable as a path.
    let b = s
        .sql(&format!("SELECT count(*) FROM '{name}/'"))
        .await
        .unwrap();
    assert_eq!(int64s(&b, 0), [1]);
}

#[tokio::test]
async fn missing_files_and_unknown_formats_have_codes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(true);
    let missing = dir.path().join("missing.parquet");
    let e = s
        .sql(&format!("SELECT * FROM '{}'", missing.display()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "58P01", "{e}");
    assert!(e.to_string().contains("missing.parquet"), "{e}");

    let e = s
        .sql(&format!("SELECT * FROM '{}/*.csv'", dir.path().display()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "58P01", "{e}");

    let odd = dir.path().join("notes.xyz");
    std::fs::write(&odd, "a,b\n1,2\n").unwrap();
    let e = s
        .sql(&format!("SELECT * FROM '{}'", odd.display()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42E04", "{e}");
    assert!(e.to_string().contains("known extensions"), "{e}");

    let e = s
        .sql(&format!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'",
            missing.display()
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "42000", "{e}");
    assert!(e.to_string().contains("No files found"), "{e}");

    // A plain unknown name is still an unknown table, not a file error.
    let e = s.sql("SELECT * FROM no_such_table").await.unwrap_err();
    assert_eq!(e.code(), "42000", "{e}");
}
