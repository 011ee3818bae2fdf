//! `vector_topk` on the CPU: each row's embedding scored against the group's query by cosine
//! similarity, chunk by chunk, and the best `k` kept.

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array};

use super::group::{TopKChunk, VECTOR_TOPK, check_group};
use super::select::Best;
use super::similarity::{VectorOp, similarity};
use crate::Result;

/// `vector_topk` on the CPU for one group: cosine similarity of each row's embedding to the
/// group's query, then [`top_k`]. Returns the emitted `(row_id, score)` columns.
pub fn vector_topk(rows: usize, args: &[ArrayRef]) -> Result<(Int64Array, Float64Array)> {
    vector_topk_chunks(&[TopKChunk::of_columns(rows, args)])
}

/// [`vector_topk`] for a group given as chunks, without joining them: each chunk is scored and
/// its best rows kept, so beyond the chunks it holds the scores of one chunk and O(k) rows. The
/// result (ties included) and the errors are those of [`vector_topk`] over the joined group.
pub fn vector_topk_chunks(chunks: &[TopKChunk]) -> Result<(Int64Array, Float64Array)> {
    let (k, query) = check_group(chunks)?;
    let mut best = Best::new(k);
    let Some(query) = &query else {
        return Ok(best.finish());
    };
    let mut offset = 0;
    for chunk in chunks {
        let [_, emb, _, _] = chunk.arguments()?;
        let scores = similarity(
            VECTOR_TOPK,
            [2, 3],
            VectorOp::Cosine,
            chunk.rows,
            emb,
            query,
            offset,
        )?;
        let (ids, scalar_ids) = chunk.ids()?;
        best.offer(
            &scores,
            |i| {
                let i = if scalar_ids { 0 } else { i };
                ids.is_valid(i).then(|| ids.value(i))
            },
            offset,
        );
        offset += chunk.rows;
    }
    Ok(best.finish())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::group::{top_k_group, top_k_group_chunks};
    use super::super::test_support::{Rows, close, list, some};
    use super::*;
    use crate::kernels::Operand;

    fn topk_args(ids: Vec<i64>, emb: Rows, query: Rows, k: Vec<Option<i64>>) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(list(emb)),
            Arc::new(list(query)),
            Arc::new(Int64Array::from(k)),
        ]
    }

    #[test]
    fn vector_topk_per_group() {
        let emb = vec![
            some(&[1.0, 0.0]),
            some(&[0.0, 1.0]),
            some(&[1.0, 1.0]),
            None,
            some(&[0.0, 0.0]),
        ];
        let q = some(&[1.0, 0.0]);
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![q.clone(); 5],
            vec![Some(2); 5],
        );
        let (ids, scores) = vector_topk(5, &args).unwrap();
        assert_eq!(ids, Int64Array::from(vec![10, 12]));
        assert!(close(Some(scores.value(1)), 0.5f64.sqrt()));
        // k beyond the scored rows: all of them (NULL and zero-norm rows are skipped).
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![q.clone(); 5],
            vec![Some(50); 5],
        );
        let (ids, scores) = vector_topk(5, &args).unwrap();
        assert_eq!(ids, Int64Array::from(vec![10, 12, 11]));
        assert_eq!(scores.value(2), 0.0);
        // A query column: its first non-NULL value; NULL rows of it are fine.
        let query = vec![None, q.clone(), None, q.clone(), q.clone()];
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            query,
            vec![Some(1); 5],
        );
        assert_eq!(vector_topk(5, &args).unwrap().0, Int64Array::from(vec![10]));
        // Every query NULL: nothing; an empty group: nothing.
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![None; 5],
            vec![Some(1); 5],
        );
        assert_eq!(vector_topk(5, &args).unwrap().0.len(), 0);
        let args = topk_args(vec![], vec![], vec![], vec![]);
        assert_eq!(vector_topk(0, &args).unwrap().0.len(), 0);
        let group = top_k_group(
            5,
            &topk_args(
                vec![1; 5],
                emb.clone(),
                vec![q.clone(); 5],
                vec![Some(3); 5],
            ),
        )
        .unwrap();
        assert_eq!(group.k, 3);
        assert!(matches!(group.query, Some(Operand::Scalar(ref a)) if a.len() == 1));
    }

    #[test]
    fn vector_topk_argument_errors() {
        let emb = vec![some(&[1.0, 0.0]), some(&[0.0, 1.0])];
        let q = some(&[1.0, 0.0]);
        let err = |query: Rows, k: Vec<Option<i64>>| {
            vector_topk(2, &topk_args(vec![1, 2], emb.clone(), query, k))
                .unwrap_err()
                .to_string()
        };
        let q2 = vec![q.clone(), q.clone()];
        assert_eq!(
            err(q2.clone(), vec![Some(0), Some(0)]),
            "[22U20] vector_topk: k must be a positive number of rows, got 0"
        );
        assert!(err(q2.clone(), vec![Some(-3), Some(-3)]).contains("got -3"));
        assert!(err(q2.clone(), vec![None, Some(1)]).contains("k is NULL"));
        assert!(
            err(q2.clone(), vec![Some(1), Some(2)])
                .contains("same in every row of a group, got 1 and 2")
        );
        let e = err(vec![q.clone(), some(&[0.0, 1.0])], vec![Some(1), Some(1)]);
        assert!(
            e.contains("the query vector (argument 3) differs between rows 1 and 2"),
            "{e}"
        );
        // Lengths of embedding and query are checked with vector_topk's name and positions.
        let e = err(vec![some(&[1.0]), some(&[1.0])], vec![Some(1), Some(1)]);
        assert_eq!(
            e,
            "[22U20] vector_topk: vectors of different lengths (2 and 1) in row 1 of the batch"
        );
        let e = top_k_group(
            2,
            &topk_args(vec![1, 2], emb.clone(), q2, vec![Some(1); 2])[..3],
        )
        .unwrap_err();
        assert!(e.to_string().contains("takes 4 arguments"), "{e}");
    }

    /// Splits the columns of a group into chunks at `cuts`, with query and k as scalars where
    /// `scalars` says so.
    fn chunked(args: &[ArrayRef], cuts: &[usize], scalars: bool) -> Vec<TopKChunk> {
        let rows = args[0].len();
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < rows));
        bounds.push(rows);
        bounds
            .windows(2)
            .map(|w| {
                let (start, len) = (w[0], w[1] - w[0]);
                let args = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if scalars && i >= 2 {
                            Operand::Scalar(a.slice(start, 1))
                        } else {
                            Operand::Column(a.slice(start, len))
                        }
                    })
                    .collect();
                TopKChunk { rows: len, args }
            })
            .collect()
    }

    #[test]
    fn vector_topk_over_chunks_equals_the_joined_group() {
        // 3000 rows: repeated embeddings (ties), NULL ids, NULL and zero vectors.
        let n = 3000usize;
        let emb: Rows = (0..n)
            .map(|i| match i % 50 {
                7 => None,
                8 => some(&[0.0, 0.0, 0.0]),
                _ => some(&[(i % 13) as f64, ((i * 7) % 11) as f64 - 5.0, 1.0]),
            })
            .collect();
        let ids: Vec<Option<i64>> = (0..n)
            .map(|i| (i % 97 != 3).then_some(((i * 7919) % 1000) as i64))
            .collect();
        let q = some(&[1.0, 0.5, -0.25]);
        for k in [1, 3, 10, 600, 5000] {
            let args: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(list(emb.clone())),
                Arc::new(list(vec![q.clone(); n])),
                Arc::new(Int64Array::from(vec![k; n])),
            ];
            let joined = vector_topk(n, &args).unwrap();
            for (cuts, scalars) in [
                (vec![], true),
                (vec![1, 2, 1500], true),
                (vec![100, 1124, 2048, 2999], false),
                ((1..n).step_by(7).collect::<Vec<_>>(), true),
            ] {
                let chunks = chunked(&args, &cuts, scalars);
                assert_eq!(vector_topk_chunks(&chunks).unwrap(), joined, "k {k}");
                let group = top_k_group_chunks(&chunks).unwrap();
                assert_eq!(group.k, k as usize);
                assert_eq!(group.ids.len(), n);
                assert_eq!(group.embeddings.array().len(), n);
                assert!(matches!(group.query, Some(Operand::Scalar(ref a)) if a.len() == 1));
            }
        }
        assert_eq!(vector_topk_chunks(&[]).unwrap().0.len(), 0);
        assert_eq!(top_k_group_chunks(&[]).unwrap().k, 0);
    }

    #[test]
    fn vector_topk_chunk_errors_number_rows_in_the_group() {
        let emb = vec![some(&[1.0, 0.0]); 6];
        let q = some(&[1.0, 0.0]);
        let args = |query: Rows, k: Vec<Option<i64>>| {
            topk_args(vec![1, 2, 3, 4, 5, 6], emb.clone(), query, k)
        };
        let err = |args: &[ArrayRef], scalars: bool| {
            vector_topk_chunks(&chunked(args, &[2, 4], scalars))
                .unwrap_err()
                .to_string()
        };
        let mut query = vec![q.clone(); 6];
        query[4] = some(&[0.0, 1.0]);
        let e = err(&args(query, vec![Some(1); 6]), false);
        assert!(e.contains("differs between rows 1 and 5 of a group"), "{e}");
        let mut query = vec![None, None, q.clone(), q.clone(), some(&[0.0, 1.0]), None];
        let e = err(&args(query.clone(), vec![Some(1); 6]), true);
        assert!(e.contains("differs between rows 3 and 5 of a group"), "{e}");
        query[4] = q.clone();
        assert_eq!(
            vector_topk_chunks(&chunked(&args(query, vec![Some(1); 6]), &[2, 4], true))
                .unwrap()
                .0,
            Int64Array::from(vec![1])
        );
        let mut k = vec![Some(2); 6];
        k[4] = Some(3);
        let e = err(&args(vec![q.clone(); 6], k.clone()), true);
        assert!(
            e.contains("same in every row of a group, got 2 and 3"),
            "{e}"
        );
        k[5] = None;
        let e = err(&args(vec![q.clone(); 6], k), false);
        assert!(e.contains("k is NULL"), "{e}");
        let mut emb = emb.clone();
        emb[3] = some(&[1.0]);
        let e = err(
            &topk_args(vec![1; 6], emb, vec![q.clone(); 6], vec![Some(1); 6]),
            true,
        );
        assert!(
            e.ends_with("vectors of different lengths (1 and 2) in row 4 of the batch"),
            "{e}"
        );
    }
}
