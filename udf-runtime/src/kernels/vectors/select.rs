//! The selection step of `vector_topk`: the `k` best rows by score, then row id, then
//! position, kept in O(k) memory as chunks of scores are offered.

use std::cmp::Ordering;

use arrow::array::{Array, Float64Array, Int64Array};

/// The `k` rows with the highest scores, best first: the selection step of `vector_topk`, over
/// scores already computed (on the CPU or a GPU).
///
/// Rows with a NULL score are skipped. Order: score descending (NaN ranks below every number),
/// then row id ascending (NULL ids last), then input position, so the result is deterministic.
/// Fewer than `k` scored rows give all of them. Costs O(n + k log k).
///
/// ```
/// use accelsql_udf_runtime::kernels::vectors::top_k;
/// use arrow::array::{Float64Array, Int64Array};
/// let ids = Int64Array::from(vec![10, 11, 12, 13]);
/// let scores = Float64Array::from(vec![Some(0.5), None, Some(0.9), Some(0.5)]);
/// let (ids, scores) = top_k(&ids, &scores, 2);
/// assert_eq!(ids, Int64Array::from(vec![12, 10]));
/// assert_eq!(scores, Float64Array::from(vec![0.9, 0.5]));
/// ```
pub fn top_k(ids: &Int64Array, scores: &Float64Array, k: usize) -> (Int64Array, Float64Array) {
    let n = ids.len().min(scores.len());
    let mut best = Best::new(k);
    best.offer(
        &scores.slice(0, n),
        |i| ids.is_valid(i).then(|| ids.value(i)),
        0,
    );
    best.finish()
}

/// A row that may be among the best: its score (not NULL), row id and position in the group.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f64,
    id: Option<i64>,
    position: usize,
}

/// The order of [`top_k`]: `Less` when `a` ranks before `b`. A total order (positions differ).
fn rank(a: &Candidate, b: &Candidate) -> Ordering {
    let by_score = match (a.score.is_nan(), b.score.is_nan()) {
        (false, false) => b.score.partial_cmp(&a.score).unwrap_or(Ordering::Equal),
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
    };
    by_score
        .then_with(|| match (a.id, b.id) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then(a.position.cmp(&b.position))
}

/// The `k` best rows of those offered so far, offered a chunk at a time (positions increasing).
/// Holds at most `max(2k, 1024)` candidates; once it has pruned to `k`, a row that ranks after
/// the `k`-th kept one is dropped at once.
pub(super) struct Best {
    k: usize,
    kept: Vec<Candidate>,
    /// The worst of the `k` kept after the last pruning: later rows must beat it.
    worst: Option<Candidate>,
}

impl Best {
    const MIN_BUFFER: usize = 1024;

    pub(super) fn new(k: usize) -> Self {
        Self {
            k,
            kept: Vec::new(),
            worst: None,
        }
    }

    /// Offers the rows of `scores` (NULL ones are skipped), whose ids `id(i)` gives and whose
    /// positions in the group start at `first_position`.
    pub(super) fn offer(
        &mut self,
        scores: &Float64Array,
        id: impl Fn(usize) -> Option<i64>,
        first_position: usize,
    ) {
        if self.k == 0 {
            return;
        }
        let limit = self.k.saturating_mul(2).max(Self::MIN_BUFFER);
        for (i, &score) in scores.values().iter().enumerate() {
            if scores.is_null(i) {
                continue;
            }
            let candidate = Candidate {
                score,
                id: id(i),
                position: first_position + i,
            };
            if self
                .worst
                .is_some_and(|w| rank(&candidate, &w) == Ordering::Greater)
            {
                continue;
            }
            self.kept.push(candidate);
            if self.kept.len() >= limit {
                self.prune();
            }
        }
    }

    /// Keeps only the `k` best.
    fn prune(&mut self) {
        if self.k > 0 && self.kept.len() > self.k {
            self.kept.select_nth_unstable_by(self.k - 1, rank);
            self.kept.truncate(self.k);
            self.worst = self.kept.last().copied();
        }
    }

    /// The `k` best (or all offered, if fewer), best first.
    pub(super) fn finish(mut self) -> (Int64Array, Float64Array) {
        self.prune();
        self.kept.sort_unstable_by(rank);
        let ids: Int64Array = self.kept.iter().map(|c| c.id).collect();
        let scores: Vec<f64> = self.kept.iter().map(|c| c.score).collect();
        (ids, Float64Array::from(scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_score_then_id_and_skips_nulls() {
        let ids = Int64Array::from(vec![
            Some(5),
            Some(3),
            Some(9),
            None,
            Some(1),
            Some(2),
            Some(7),
        ]);
        let scores = Float64Array::from(vec![
            Some(0.5),
            Some(0.9),
            None,
            Some(0.9),
            Some(0.5),
            Some(f64::NAN),
            Some(-1.0),
        ]);
        let (i, s) = top_k(&ids, &scores, 3);
        assert_eq!(i, Int64Array::from(vec![Some(3), None, Some(1)]));
        assert_eq!(s, Float64Array::from(vec![0.9, 0.9, 0.5]));
        let (i, s) = top_k(&ids, &scores, 100);
        assert_eq!(
            i,
            Int64Array::from(vec![Some(3), None, Some(1), Some(5), Some(7), Some(2)])
        );
        assert_eq!(s.len(), 6);
        assert!(s.value(5).is_nan());
        let (i, s) = top_k(&ids, &scores, 0);
        assert_eq!((i.len(), s.len()), (0, 0));
        let (i, _) = top_k(
            &Int64Array::from(Vec::<i64>::new()),
            &Float64Array::from(Vec::<f64>::new()),
            3,
        );
        assert_eq!(i.len(), 0);
        // Large input, small k: the same as sorting everything.
        let n = 10_000;
        let ids = Int64Array::from((0..n).map(|i| (i * 7919) % n).collect::<Vec<i64>>());
        let scores = Float64Array::from((0..n).map(|i| ((i * 31) % 97) as f64).collect::<Vec<_>>());
        let (i, s) = top_k(&ids, &scores, 10);
        let (all_i, all_s) = top_k(&ids, &scores, n as usize);
        assert_eq!(i, all_i.slice(0, 10));
        assert_eq!(s, all_s.slice(0, 10));
        assert!(s.values().iter().all(|&v| v == 96.0));
    }
}
