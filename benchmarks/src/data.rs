//! The benchmark data sets: generated deterministically from a seed, written once as Parquet
//! (`<dir>/<dataset>-<rows>-seed<N>.parquet` plus a JSON sidecar) and read back into memory.
//!
//! Rows are generated one after another from one random stream per data set, so a smaller data
//! set is exactly the first rows of a larger one with the same seed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{
    ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use accelsql_engine::datafusion::catalog::MemTable;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::bench_err;
use crate::error::Result;
use crate::progress::Progress;

/// Bumped whenever a generator's output changes, so old files are regenerated, not reused.
pub const GENERATOR_VERSION: u32 = 1;
/// Rows per generated batch (and per batch read back).
pub const BATCH_ROWS: usize = 8192;
/// Dimensions of the `embeddings` vectors.
pub const EMBEDDING_DIM: usize = 128;
/// Dimensions of the `embeddings-768` vectors (a common text-embedding size).
pub const WIDE_EMBEDDING_DIM: usize = 768;
/// Distinct `region` keys of the `points` data set (its GROUP BY groups).
pub const REGIONS: u64 = 64;

/// A generated data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dataset {
    /// `x DOUBLE` uniform in [0, 1): the UDF-overhead and concurrency input.
    Doubles,
    /// `region BIGINT` (0..64), `lat1, lon1, lat2, lon2 DOUBLE` (degrees): pairs of points.
    Points,
    /// `spot, strike, years, rate, volatility DOUBLE`: European option parameters.
    Options,
    /// `id BIGINT`, `emb FIXED_SIZE_LIST(128, FLOAT)` uniform in [-1, 1): embeddings.
    Embeddings,
    /// `id BIGINT`, `emb FIXED_SIZE_LIST(768, FLOAT)` uniform in [-1, 1): wide embeddings.
    #[serde(rename = "embeddings-768")]
    Embeddings768,
}

impl Dataset {
    /// The name used for files and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Doubles => "doubles",
            Self::Points => "points",
            Self::Options => "options",
            Self::Embeddings => "embeddings",
            Self::Embeddings768 => "embeddings_768",
        }
    }

    /// The dimensions of its vectors, for the embedding data sets.
    pub fn dim(self) -> Option<usize> {
        match self {
            Self::Embeddings => Some(EMBEDDING_DIM),
            Self::Embeddings768 => Some(WIDE_EMBEDDING_DIM),
            _ => None,
        }
    }

    /// Its Arrow schema.
    pub fn schema(self) -> SchemaRef {
        let double = |name: &str| Field::new(name, DataType::Float64, false);
        let fields = match self {
            Self::Doubles => vec![double("x")],
            Self::Points => vec![
                Field::new("region", DataType::Int64, false),
                double("lat1"),
                double("lon1"),
                double("lat2"),
                double("lon2"),
            ],
            Self::Options => ["spot", "strike", "years", "rate", "volatility"]
                .into_iter()
                .map(double)
                .collect(),
            Self::Embeddings | Self::Embeddings768 => vec![
                Field::new("id", DataType::Int64, false),
                Field::new(
                    "emb",
                    embedding_type(self.dim().unwrap_or(EMBEDDING_DIM)),
                    false,
                ),
            ],
        };
        Arc::new(Schema::new(fields))
    }

    /// The stream id mixed into the seed, so each data set has its own random numbers.
    fn stream(self) -> u64 {
        match self {
            Self::Doubles => 1,
            Self::Points => 2,
            Self::Options => 3,
            Self::Embeddings => 4,
            Self::Embeddings768 => 5,
        }
    }
}

/// `FIXED_SIZE_LIST(dim, FLOAT)`, the type of an embedding data set's `emb`.
pub fn embedding_type(dim: usize) -> DataType {
    DataType::FixedSizeList(
        Arc::new(Field::new("item", DataType::Float32, false)),
        dim as i32,
    )
}

/// A small, fast, seedable random generator (SplitMix64): the same seed gives the same stream
/// on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The stream `stream` of seed `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut rng = Self(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }
}

/// Generates `rows` rows of `dataset` from `seed` in batches of [`BATCH_ROWS`], calling
/// `on_batch` with each (in order).
pub fn generate(
    dataset: Dataset,
    rows: u64,
    seed: u64,
    mut on_batch: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut rng = Rng::new(seed, dataset.stream());
    let schema = dataset.schema();
    let mut start = 0u64;
    while start < rows {
        let n = (rows - start).min(BATCH_ROWS as u64) as usize;
        let columns = generate_columns(dataset, &mut rng, start, n)?;
        on_batch(RecordBatch::try_new(Arc::clone(&schema), columns)?)?;
        start += n as u64;
    }
    Ok(())
}

fn generate_columns(
    dataset: Dataset,
    rng: &mut Rng,
    start: u64,
    n: usize,
) -> Result<Vec<ArrayRef>> {
    Ok(match dataset {
        Dataset::Doubles => {
            let x: Float64Array = (0..n).map(|_| rng.next_f64()).collect();
            vec![Arc::new(x)]
        }
        Dataset::Points => {
            let mut cols: [Vec<f64>; 4] = std::array::from_fn(|_| Vec::with_capacity(n));
            let mut region = Vec::with_capacity(n);
            for _ in 0..n {
                region.push((rng.next_u64() % REGIONS) as i64);
                cols[0].push(rng.range(-90.0, 90.0));
                cols[1].push(rng.range(-180.0, 180.0));
                cols[2].push(rng.range(-90.0, 90.0));
                cols[3].push(rng.range(-180.0, 180.0));
            }
            let mut out: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(region))];
            out.extend(
                cols.into_iter()
                    .map(|c| Arc::new(Float64Array::from(c)) as ArrayRef),
            );
            out
        }
        Dataset::Options => {
            let ranges = [
                (50.0, 150.0),
                (50.0, 150.0),
                (0.1, 2.0),
                (0.0, 0.05),
                (0.1, 0.6),
            ];
            let mut cols: [Vec<f64>; 5] = std::array::from_fn(|_| Vec::with_capacity(n));
            for _ in 0..n {
                for (col, (lo, hi)) in cols.iter_mut().zip(ranges) {
                    col.push(rng.range(lo, hi));
                }
            }
            cols.into_iter()
                .map(|c| Arc::new(Float64Array::from(c)) as ArrayRef)
                .collect()
        }
        Dataset::Embeddings | Dataset::Embeddings768 => {
            let dim = dataset.dim().unwrap_or(EMBEDDING_DIM);
            let ids: Int64Array = (start..start + n as u64).map(|i| i as i64).collect();
            let values: Float32Array = (0..n * dim).map(|_| rng.range(-1.0, 1.0) as f32).collect();
            let field = Arc::new(Field::new("item", DataType::Float32, false));
            let emb = FixedSizeListArray::try_new(field, dim as i32, Arc::new(values), None)?;
            vec![Arc::new(ids), Arc::new(emb)]
        }
    })
}

/// The query vector of `dim` dimensions of the `vectors` suites: its own stream of the seed,
/// uniform in [-1, 1).
pub fn query_vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed, 100);
    (0..dim).map(|_| rng.range(-1.0, 1.0) as f32).collect()
}

/// What a Parquet file's JSON sidecar records; a file is reused only when it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    /// The data set.
    pub dataset: Dataset,
    /// Rows in the file.
    pub rows: u64,
    /// The generator's seed.
    pub seed: u64,
    /// [`GENERATOR_VERSION`] at writing.
    pub generator_version: u32,
    /// Size of the Parquet file in bytes.
    pub bytes: u64,
}

/// The Parquet file of `rows` rows of `dataset` with `seed` under `dir`.
pub fn parquet_path(dir: &Path, dataset: Dataset, rows: u64, seed: u64) -> PathBuf {
    dir.join(format!("{}-{rows}-seed{seed}.parquet", dataset.name()))
}

fn sidecar_path(parquet: &Path) -> PathBuf {
    let mut name = parquet.as_os_str().to_os_string();
    name.push(".json");
    PathBuf::from(name)
}

/// Whether a data file was reused or written now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Found with a matching sidecar.
    Reused,
    /// Generated and written now.
    Generated,
}

/// Makes sure the Parquet file of `rows` rows of `dataset` exists under `dir` (its sidecar
/// must match, else it is written again); `progress` counts rows generated.
pub fn ensure_parquet(
    dir: &Path,
    dataset: Dataset,
    rows: u64,
    seed: u64,
    progress: &Progress,
) -> Result<(PathBuf, Provenance)> {
    let path = parquet_path(dir, dataset, rows, seed);
    let want = |bytes| Sidecar {
        dataset,
        rows,
        seed,
        generator_version: GENERATOR_VERSION,
        bytes,
    };
    let bytes = std::fs::metadata(&path).map(|m| m.len()).ok();
    if let Some(bytes) = bytes {
        let sidecar = std::fs::read_to_string(sidecar_path(&path))
            .ok()
            .and_then(|text| serde_json::from_str::<Sidecar>(&text).ok());
        if sidecar == Some(want(bytes)) {
            progress.inc(rows);
            return Ok((path, Provenance::Reused));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| bench_err!("cannot create {}: {e}", dir.display()))?;
    // Write to a temporary name and rename, so an interrupted run leaves no half file behind.
    let partial = path.with_extension("parquet.partial");
    let file = File::create(&partial)
        .map_err(|e| bench_err!("cannot create {}: {e}", partial.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(file, dataset.schema(), Some(props))?;
    generate(dataset, rows, seed, |batch| {
        progress.inc(batch.num_rows() as u64);
        writer.write(&batch).map_err(Into::into)
    })?;
    writer.close()?;
    std::fs::rename(&partial, &path)?;
    let bytes = std::fs::metadata(&path)?.len();
    std::fs::write(
        sidecar_path(&path),
        serde_json::to_string_pretty(&want(bytes))?,
    )?;
    Ok((path, Provenance::Generated))
}

/// Reads a Parquet file into batches of [`BATCH_ROWS`] rows.
pub fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>> {
    let file = File::open(path).map_err(|e| bench_err!("cannot open {}: {e}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(BATCH_ROWS)
        .build()?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Into::into)
}

/// A memory table of `batches` spread round-robin over `partitions` partitions.
pub fn mem_table(batches: Vec<RecordBatch>, partitions: usize) -> Result<Arc<MemTable>> {
    let schema = batches
        .first()
        .map(RecordBatch::schema)
        .ok_or_else(|| bench_err!("no batches to make a table of"))?;
    let mut parts = vec![Vec::new(); partitions.max(1)];
    let n = parts.len();
    for (i, batch) in batches.into_iter().enumerate() {
        parts[i % n].push(batch);
    }
    Ok(Arc::new(MemTable::try_new(schema, parts)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(dataset: Dataset, rows: u64, seed: u64) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        generate(dataset, rows, seed, |b| {
            out.push(b);
            Ok(())
        })
        .unwrap();
        out
    }

    fn concat(batches: &[RecordBatch]) -> RecordBatch {
        accelsql_engine::datafusion::arrow::compute::concat_batches(&batches[0].schema(), batches)
            .unwrap()
    }

    #[test]
    fn same_seed_same_data_other_seed_other_data() {
        for dataset in [
            Dataset::Doubles,
            Dataset::Points,
            Dataset::Options,
            Dataset::Embeddings,
        ] {
            let a = all(dataset, 10_000, 7);
            assert_eq!(a, all(dataset, 10_000, 7), "{dataset:?}");
            assert_ne!(a, all(dataset, 10_000, 8), "{dataset:?}");
            assert_eq!(a.iter().map(|b| b.num_rows()).sum::<usize>(), 10_000);
            assert_eq!(a[0].schema(), dataset.schema());
        }
    }

    #[test]
    fn a_smaller_data_set_is_a_prefix_of_a_larger_one() {
        let small = concat(&all(Dataset::Points, 5_000, 3));
        let large = concat(&all(Dataset::Points, 20_000, 3));
        assert_eq!(small, large.slice(0, 5_000));
    }

    #[test]
    fn values_lie_in_their_ranges() {
        let b = concat(&all(Dataset::Points, 3_000, 1));
        let lat = b.column(1).as_any().downcast_ref::<Float64Array>().unwrap();
        assert!(lat.values().iter().all(|v| (-90.0..90.0).contains(v)));
        let region = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert!(
            region
                .values()
                .iter()
                .all(|r| (0..REGIONS as i64).contains(r))
        );
        assert_eq!(
            query_vector(5, EMBEDDING_DIM),
            query_vector(5, EMBEDDING_DIM)
        );
        assert_eq!(query_vector(5, EMBEDDING_DIM).len(), EMBEDDING_DIM);
        // A wider query starts with the narrower one.
        assert_eq!(
            query_vector(5, WIDE_EMBEDDING_DIM)[..EMBEDDING_DIM],
            query_vector(5, EMBEDDING_DIM)
        );
    }

    #[test]
    fn parquet_is_written_once_read_back_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let p = Progress::hidden();
        let (path, how) = ensure_parquet(dir.path(), Dataset::Embeddings, 1_000, 9, &p).unwrap();
        assert_eq!(how, Provenance::Generated);
        assert!(path.ends_with("embeddings-1000-seed9.parquet"));
        let (_, how) = ensure_parquet(dir.path(), Dataset::Embeddings, 1_000, 9, &p).unwrap();
        assert_eq!(how, Provenance::Reused);
        let back = concat(&read_parquet(&path).unwrap());
        assert_eq!(back, concat(&all(Dataset::Embeddings, 1_000, 9)));
        // A sidecar that does not match (here: another generator version) is not trusted.
        let sidecar = sidecar_path(&path);
        let text = std::fs::read_to_string(&sidecar).unwrap();
        std::fs::write(
            &sidecar,
            text.replace(
                &format!("\"generator_version\": {GENERATOR_VERSION}"),
                "\"generator_version\": 0",
            ),
        )
        .unwrap();
        let (_, how) = ensure_parquet(dir.path(), Dataset::Embeddings, 1_000, 9, &p).unwrap();
        assert_eq!(how, Provenance::Generated);
    }

    #[test]
    fn mem_table_spreads_batches_over_partitions() {
        let batches = all(Dataset::Doubles, 5 * BATCH_ROWS as u64, 1);
        assert!(mem_table(batches, 2).is_ok());
        assert!(mem_table(Vec::new(), 2).is_err());
    }
}
