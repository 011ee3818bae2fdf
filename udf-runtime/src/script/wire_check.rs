//! The worker-to-engine decoders as one entry point over raw bytes, for fuzzing: a frame (header
//! and payload) goes through the same decoder the engine uses for its kind.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};

use super::wire::{
    self, F_EMIT, F_ERROR, F_FETCH, F_GET_CONNECTION, F_HELLO, F_IMPORT, F_READY, F_RESULT,
    F_ROW_ENDS, F_SINGLE_RESULT, FRAME_HEADER_LEN, MAX_FRAME_LEN, Writer,
};
use super::{ColumnSpec, SqlType};

/// The output columns every fuzzed RESULT/EMIT frame is decoded against: one of each wire type.
fn outputs() -> Vec<ColumnSpec> {
    [
        SqlType::Boolean,
        SqlType::BigInt,
        SqlType::Double,
        SqlType::Decimal {
            precision: 18,
            scale: 2,
        },
        SqlType::Varchar(100),
        SqlType::Date,
        SqlType::Timestamp,
    ]
    .into_iter()
    .map(|t| ColumnSpec::new("c", t))
    .collect()
}

/// Decodes one frame a worker could send (`u64 length | u8 kind | payload`) with the engine's
/// own decoder for its kind. Never panics: anything malformed is an `Err` saying what.
pub fn decode_worker_frame(bytes: &[u8]) -> Result<(), String> {
    let header = bytes
        .get(..FRAME_HEADER_LEN)
        .ok_or("shorter than a frame header")?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[..8]);
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME_LEN {
        return Err(format!(
            "a frame of {len} bytes (the limit is {MAX_FRAME_LEN})"
        ));
    }
    let payload = &bytes[FRAME_HEADER_LEN..];
    if payload.len() as u64 != len {
        return Err(format!(
            "{} payload bytes, the header says {len}",
            payload.len()
        ));
    }
    match header[8] {
        F_RESULT | F_EMIT => wire::decode_result(payload, &outputs()).map(drop),
        F_ROW_ENDS => wire::decode_row_ends(payload, 16).map(drop),
        F_FETCH => wire::decode_fetch(payload).map(drop),
        F_IMPORT => wire::decode_import(payload).map(drop),
        F_GET_CONNECTION => wire::decode_get_connection(payload).map(drop),
        F_SINGLE_RESULT | F_HELLO => wire::decode_single_result(payload).map(drop),
        F_ERROR => wire::decode_error(payload).map(drop),
        F_READY => Ok(()),
        other => Err(format!("a worker does not send frames of kind {other}")),
    }
}

/// Valid frames of every kind a worker sends, as seeds for mutation.
pub fn sample_worker_frames() -> Vec<Vec<u8>> {
    let frame = |kind: u8, payload: Vec<u8>| {
        let mut out = (payload.len() as u64).to_le_bytes().to_vec();
        out.push(kind);
        out.extend(payload);
        out
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
        Arc::new(Int64Array::from(vec![Some(1), Some(-2), None])),
        Arc::new(Float64Array::from(vec![Some(0.5), None, Some(f64::NAN)])),
        Arc::new(
            Decimal128Array::from(vec![Some(-12345), None, Some(1)])
                .with_precision_and_scale(18, 2)
                .unwrap_or_else(|_| Decimal128Array::from(vec![0i128, 0, 0])),
        ),
        Arc::new(StringArray::from(vec![Some("hällo"), None, Some("")])),
        Arc::new(Date32Array::from(vec![Some(0), Some(-1), None])),
        Arc::new(TimestampMicrosecondArray::from(vec![
            None,
            Some(1),
            Some(-1),
        ])),
    ];
    let mut frames = Vec::new();
    if let Ok(run) = wire::encode_chunk(3, Some(0), 3, &columns) {
        // RESULT is `u32 cols, u64 rows`, then the columns as RUN carries them.
        let mut result = (columns.len() as u32).to_le_bytes().to_vec();
        result.extend_from_slice(&3u64.to_le_bytes());
        result.extend_from_slice(run.get(21..).unwrap_or_default());
        frames.push(frame(F_EMIT, result.clone()));
        frames.push(frame(F_RESULT, result));
    }
    let mut w = Writer::default();
    for end in [0u64, 2, 2, 5, 16] {
        w.u64(end);
    }
    frames.push(frame(F_ROW_ENDS, w.buf));
    let mut w = Writer::default();
    w.u64(1024);
    frames.push(frame(F_FETCH, w.buf));
    let mut w = Writer::default();
    w.str("retail.helpers");
    frames.push(frame(F_IMPORT, w.buf.clone()));
    frames.push(frame(F_GET_CONNECTION, w.buf.clone()));
    frames.push(frame(F_SINGLE_RESULT, w.buf));
    let mut w = Writer::default();
    w.u8(1);
    for s in ["ValueError", "bad value", "  File \"<script>\", line 3"] {
        w.str(s);
    }
    frames.push(frame(F_ERROR, w.buf));
    frames.push(frame(F_READY, Vec::new()));
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_decode_and_mutants_never_panic() {
        let samples = sample_worker_frames();
        assert!(samples.len() >= 8);
        for s in &samples[..2] {
            decode_worker_frame(s).unwrap();
        }
        // A deterministic mutation loop: flips, truncations, extensions, huge lengths.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut errors = 0;
        for i in 0..20_000 {
            let mut bytes = samples[i % samples.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % (bytes.len() + 1);
                match next() % 5 {
                    0 if at < bytes.len() => bytes[at] ^= 1 << (next() % 8),
                    1 => bytes.truncate(at),
                    2 => bytes.splice(at..at, [0xff, 0, 0x7f, 0x80]).for_each(drop),
                    3 if at + 8 <= bytes.len() => {
                        bytes[at..at + 8].copy_from_slice(&(next() | (1 << 40)).to_le_bytes())
                    }
                    _ => {}
                }
            }
            // The header's length is fixed up half the time, so payload decoders are reached.
            if i % 2 == 0 && bytes.len() >= FRAME_HEADER_LEN {
                let len = (bytes.len() - FRAME_HEADER_LEN) as u64;
                bytes[..8].copy_from_slice(&len.to_le_bytes());
            }
            errors += usize::from(
                std::panic::catch_unwind(|| decode_worker_frame(&bytes))
                    .expect("a panic")
                    .is_err(),
            );
        }
        assert!(errors > 1000, "{errors}");
    }
}
