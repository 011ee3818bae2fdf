//! `vector_topk(row_id, emb, query, k) EMITS (row_id BIGINT, score DOUBLE)`: per group (the
//! whole input without GROUP BY), the `k` rows whose embedding is most cosine-similar to the
//! query, best first. Semantics and edge cases are those of
//! `accelsql_udf_runtime::kernels::vectors::{top_k_group, top_k}`. Without GROUP BY, and with a
//! constant query and `k`, each input partition's run keeps its `k` best and a merge keeps the
//! `k` best of those ([`TopKMerge`]), so every core scores rows.
//!
//! ```sql
//! SELECT vector_topk(id, emb, [0.1, 0.2, 0.3], 10) FROM docs;
//! SELECT category, vector_topk(id, emb, [0.1, 0.2, 0.3], 3) FROM docs GROUP BY category;
//! ```

use std::sync::Arc;

use accelsql_udf_runtime::gpu;
use accelsql_udf_runtime::kernels::Operand;
use accelsql_udf_runtime::kernels::vectors::{self, TopKChunk, VECTOR_TOPK, VectorOp};
use datafusion::arrow::array::{ArrayRef, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::logical_expr::ColumnarValue;

use super::vectors::vector_type;
use crate::udf::kernel::{kernel_error, pinned_device};
use crate::udf::{ArgumentRule, RunInput};
use crate::{AcceleratorRequest, InstanceContext, Result, SetKernel, SetUdf, TopKMerge};

/// `(row_id BIGINT, emb VECTOR, query VECTOR, k BIGINT)`: integers are widened to BIGINT,
/// vectors as for the vector functions.
const ARGUMENTS: ArgumentRule = ArgumentRule::new(
    "(row_id BIGINT, emb VECTOR, query VECTOR, k BIGINT)",
    |types| {
        let integer = |position: usize, name: &str, given: &DataType| {
            if given.is_integer() || given.is_null() {
                Ok(DataType::Int64)
            } else {
                Err(format!(
                    "argument {position} ({name}) is {given}; expected an integer"
                ))
            }
        };
        match types {
            [id, emb, query, k] => Ok(vec![
                integer(1, "row_id", id)?,
                vector_type(2, emb)?,
                vector_type(3, query)?,
                integer(4, "k", k)?,
            ]),
            _ => Err(format!(
                "takes 4 arguments (row_id, emb, query, k), got {}",
                types.len()
            )),
        }
    },
);

/// The `vector_topk` definition: a CPU and a GPU implementation.
pub(super) fn vector_topk() -> Result<SetUdf> {
    SetUdf::builder(VECTOR_TOPK)
        .rule_inputs(ARGUMENTS)
        .emits([
            Field::new("row_id", DataType::Int64, true),
            Field::new("score", DataType::Float64, false),
        ])
        .accelerator_request(AcceleratorRequest::Preferred)
        .device_memory(accelsql_udf_runtime::gpu::builtin_device_memory(
            super::estimates::ROW_BYTES_TOPK,
        ))
        // Without GROUP BY: each partition's k best, then the k best of those.
        .merged_as_top_k(TopKMerge {
            k_argument: 3,
            constant_arguments: vec![2],
            score_column: "score".into(),
            id_column: "row_id".into(),
        })
        .cpu(TopKOnCpu)
        .gpu(TopKOnGpu)
        .build()
}

/// The CPU implementation: each chunk of the group scored and its best rows kept, so the group
/// is never joined and its query vector never replicated.
struct TopKOnCpu;

impl SetKernel for TopKOnCpu {
    fn run(
        &self,
        _: &InstanceContext,
        rows: usize,
        args: &[ArrayRef],
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let (ids, scores) = vectors::vector_topk(rows, args).map_err(kernel_error)?;
        Ok(vec![Arc::new(ids), Arc::new(scores)])
    }

    fn run_input(
        &self,
        _: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let (ids, scores) = vectors::vector_topk_chunks(&chunks(input)?).map_err(kernel_error)?;
        Ok(vec![Arc::new(ids), Arc::new(scores)])
    }
}

/// The GPU implementation: scores on the GPU (the bandwidth-bound part) over the group's joined
/// embeddings, the k best picked on the CPU.
struct TopKOnGpu;

impl TopKOnGpu {
    fn select(
        instance: &InstanceContext,
        group: &vectors::TopKGroup,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let (ids, scores) = match &group.query {
            None => vectors::top_k(&group.ids, &Float64Array::from(Vec::<f64>::new()), 0),
            Some(query) => {
                let device = pinned_device(instance)?;
                let scores = gpu::vector_similarity(
                    device,
                    VectorOp::Cosine,
                    group.ids.len(),
                    &group.embeddings,
                    query,
                )
                .map_err(kernel_error)?;
                vectors::top_k(&group.ids, &scores, group.k)
            }
        };
        Ok(vec![Arc::new(ids), Arc::new(scores)])
    }
}

impl SetKernel for TopKOnGpu {
    fn run(
        &self,
        instance: &InstanceContext,
        rows: usize,
        args: &[ArrayRef],
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let group = vectors::top_k_group(rows, args).map_err(kernel_error)?;
        Self::select(instance, &group)
    }

    fn run_input(
        &self,
        instance: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let group = vectors::top_k_group_chunks(&chunks(input)?).map_err(kernel_error)?;
        Self::select(instance, &group)
    }
}

/// The run's chunks as the kernels take them: a scalar becomes a one-row array.
fn chunks(input: &RunInput) -> datafusion::error::Result<Vec<TopKChunk>> {
    input
        .chunks()
        .iter()
        .map(|chunk| {
            let args = chunk
                .args()
                .iter()
                .map(|arg| {
                    Ok(match arg {
                        ColumnarValue::Array(a) => Operand::Column(Arc::clone(a)),
                        ColumnarValue::Scalar(s) => Operand::Scalar(s.to_array_of_size(1)?),
                    })
                })
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            Ok(TopKChunk {
                rows: chunk.num_rows(),
                args,
            })
        })
        .collect()
}
