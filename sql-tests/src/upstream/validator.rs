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
// Vendored from datafusion-sqllogictest 55.2.0, src/util.rs (`value_normalizer`,
// `df_value_validator` and its test).
// Changes for accelsql: `itertools::join` replaced by `Vec::join`; the `log` warnings printed
// on a mismatch removed (our runner prints expected and actual itself); the `#[expect]`
// attribute on `value_normalizer` became `#[allow]`.

//! How actual rows are compared with a record's expected rows: upstream DataFusion's validator,
//! which trims trailing whitespace only (inner spacing counts) and understands `<slt:ignore>`.

/// Trims trailing whitespace of an expected line (upstream's `value_normalizer`).
#[allow(clippy::ptr_arg)] // the signature sqllogictest's `Normalizer` asks for
pub fn value_normalizer(s: &String) -> String {
    s.trim_end().to_string()
}

/// Compares actual rows (cells joined by one space) with the expected lines; `<slt:ignore>` in
/// the expected text skips a volatile part of the output (upstream's `df_value_validator`).
pub fn df_value_validator(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    // Support ignore marker <slt:ignore> to skip volatile parts of output.
    const IGNORE_MARKER: &str = "<slt:ignore>";
    let contains_ignore_marker = expected.iter().any(|line| line.contains(IGNORE_MARKER));

    let normalized_expected = expected.iter().map(normalizer).collect::<Vec<_>>();
    let normalized_actual = actual
        .iter()
        .map(|strs| strs.join(" "))
        .map(|str| str.trim_end().to_string())
        .collect::<Vec<_>>();

    // If ignore marker present, perform fragment-based matching on the full snapshot.
    if contains_ignore_marker {
        let expected_snapshot = normalized_expected.join("\n");
        let actual_snapshot = normalized_actual.join("\n");
        let fragments: Vec<&str> = expected_snapshot.split(IGNORE_MARKER).collect();
        let mut pos = 0;
        for (i, frag) in fragments.iter().enumerate() {
            if frag.is_empty() {
                continue;
            }
            if let Some(idx) = actual_snapshot[pos..].find(frag) {
                // Edge case: The following example is expected to fail
                // Actual - 'foo bar baz'
                // Expected - 'bar <slt:ignore>'
                if (i == 0) && (idx != 0) {
                    return false;
                }

                pos += idx + frag.len();
            } else {
                return false;
            }
        }
        return true;
    }

    normalized_actual == normalized_expected
}

#[cfg(test)]
mod tests {
    use super::*;

    // Validation should fail for the below case:
    // Actual - 'foo bar baz'
    // Expected - 'bar <slt:ignore>'
    #[test]
    fn ignore_marker_does_not_skip_leading_text() {
        // Actual snapshot contains unexpected prefix before the expected fragment.
        let actual = vec![vec!["foo bar baz".to_string()]];
        let expected = vec!["bar <slt:ignore>".to_string()];

        assert!(!df_value_validator(value_normalizer, &actual, &expected));
    }
}
