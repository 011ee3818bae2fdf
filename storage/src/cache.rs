//! Decoded data files kept in memory ([`FileCache`], the tables' buffer cache): a Delta table's
//! Parquet files never change once written, so a file's rows — decoded and cast to the table's
//! logical columns — answer later scans without reading or decoding it again. Keyed by the
//! file's path and the columns it was decoded as (a table whose columns changed reads its files
//! anew), least recently used first out, its bytes held in the engine's memory pool so that
//! queries and the cache share one budget.
//!
//! A file enters the cache when this process writes it (small writes) or after a scan read it
//! from disk (in the background, when it fits); a scan reads the cached files from memory and
//! the others from disk. An engine that runs its queries on a cluster does not use it: its
//! plans travel to the executors, which read the files themselves.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};

/// A file of more than this share of the cache's budget is not cached.
const LARGEST_SHARE: usize = 4;

/// At most this many files are read into the cache at once (the reads are extra I/O and their
/// rows are held outside the budget until they arrive).
const CONCURRENT_LOADS: usize = 2;

/// Decoded data files, shared by an engine's sessions (a session config extension).
#[derive(Debug)]
pub struct FileCache {
    budget: usize,
    state: Mutex<State>,
    /// Permits for reads into the cache.
    loads: Arc<tokio::sync::Semaphore>,
}

#[derive(Debug)]
struct State {
    entries: HashMap<String, Entry>,
    /// Files being read into the cache now.
    loading: HashSet<String>,
    /// The bytes held, in the engine's pool.
    reservation: MemoryReservation,
    tick: u64,
}

#[derive(Debug)]
struct Entry {
    /// The columns the rows were decoded as.
    columns: String,
    batches: Arc<Vec<RecordBatch>>,
    bytes: usize,
    used: u64,
}

/// The key of a schema's columns (names and types).
fn columns_key(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(",")
}

impl FileCache {
    /// A cache of at most `budget` bytes, held in `pool`.
    pub fn new(pool: &Arc<dyn MemoryPool>, budget: usize) -> Self {
        let reservation = MemoryConsumer::new("accelsql table cache").register(pool);
        Self {
            budget,
            state: Mutex::new(State {
                entries: HashMap::new(),
                loading: HashSet::new(),
                reservation,
                tick: 0,
            }),
            loads: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_LOADS)),
        }
    }

    /// Waits for a turn to read a file into the cache (see [`FileCache::claim`]).
    pub(crate) async fn load_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.loads).acquire_owned().await.ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes the cache holds now.
    pub fn bytes(&self) -> usize {
        self.lock().reservation.size()
    }

    /// The rows of file `path` decoded as `schema`'s columns, if cached.
    pub fn get(&self, path: &str, schema: &SchemaRef) -> Option<Arc<Vec<RecordBatch>>> {
        let key = columns_key(schema);
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        let entry = state.entries.get_mut(path)?;
        if entry.columns != key {
            return None;
        }
        entry.used = tick;
        Some(Arc::clone(&entry.batches))
    }

    /// Whether file `path` is worth reading into the cache now: not cached, not being read,
    /// and of a size the cache takes (its Parquet bytes `size`). Marks it as being read.
    pub fn claim(&self, path: &str, size: u64) -> bool {
        if size as usize > self.budget / LARGEST_SHARE {
            return false;
        }
        let mut state = self.lock();
        if state.entries.contains_key(path) || state.loading.contains(path) {
            return false;
        }
        state.loading.insert(path.to_string())
    }

    /// Gives up a [`FileCache::claim`] (the read failed).
    pub fn release(&self, path: &str) {
        self.lock().loading.remove(path);
    }

    /// Keeps the rows of file `path`, decoded as `schema`'s columns, evicting the least
    /// recently used files to make room; nothing happens when they do not fit the budget or
    /// the engine's pool.
    pub fn insert(&self, path: &str, schema: &SchemaRef, batches: Vec<RecordBatch>) {
        let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
        let mut state = self.lock();
        state.loading.remove(path);
        if bytes > self.budget / LARGEST_SHARE {
            return;
        }
        if let Some(old) = state.entries.remove(path) {
            state.reservation.shrink(old.bytes);
        }
        while state.reservation.size() + bytes > self.budget {
            let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = state.entries.remove(&oldest) {
                state.reservation.shrink(e.bytes);
            }
        }
        if state.reservation.try_grow(bytes).is_err() {
            return;
        }
        state.tick += 1;
        let used = state.tick;
        state.entries.insert(
            path.to_string(),
            Entry {
                columns: columns_key(schema),
                batches: Arc::new(batches),
                bytes,
                used,
            },
        );
    }

    /// Forgets every file (a dropped table's, say, or to give the memory back).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.entries.clear();
        state.reservation.free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    fn batch(n: usize) -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..n as i64))],
        )
        .unwrap();
        (schema, b)
    }

    #[test]
    fn files_are_kept_within_the_budget_least_recently_used_first_out() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 30));
        let (schema, b) = batch(1000);
        let one = b.get_array_memory_size();
        let cache = FileCache::new(&pool, one * 4);
        cache.insert("a", &schema, vec![b.clone()]);
        cache.insert("b", &schema, vec![b.clone()]);
        assert!(cache.get("a", &schema).is_some());
        cache.insert("c", &schema, vec![b.clone()]);
        cache.insert("d", &schema, vec![b.clone()]);
        cache.insert("e", &schema, vec![b.clone()]);
        // b was the least recently used.
        assert!(cache.get("b", &schema).is_none());
        assert!(cache.get("a", &schema).is_some());
        assert!(cache.bytes() <= one * 4);
        assert_eq!(pool.reserved(), cache.bytes());
        // Another decoding of the columns is a miss.
        let other = Arc::new(Schema::new(vec![Field::new("y", DataType::Int64, false)]));
        assert!(cache.get("a", &other).is_none());
        // A claim is taken once; a cached file is not claimed.
        assert!(cache.claim("z", 10));
        assert!(!cache.claim("z", 10));
        assert!(!cache.claim("a", 10));
        cache.clear();
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn a_full_pool_keeps_nothing() {
        let (schema, b) = batch(1000);
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(16));
        let cache = FileCache::new(&pool, 1 << 30);
        cache.insert("a", &schema, vec![b]);
        assert!(cache.get("a", &schema).is_none());
    }
}
