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
// Vendored from datafusion-sqllogictest 55.2.0, src/engines/output.rs.
// Changes for accelsql: doc comments added (our crate lints require them); nothing else.

//! The column type letters of a `query` record (`I`, `R`, `T`, …), as upstream DataFusion uses them.

use sqllogictest::{ColumnType, DBOutput};

/// A result column's type letter in a `query` record header.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum DFColumnType {
    /// `B`
    Boolean,
    /// `D`: dates and times of day.
    DateTime,
    /// `I`
    Integer,
    /// `R`: floats and decimals.
    Float,
    /// `T`
    Text,
    /// `P`
    Timestamp,
    /// `?`: anything else (lists, structs, intervals, …).
    Another,
}

impl ColumnType for DFColumnType {
    fn from_char(value: char) -> Option<Self> {
        match value {
            'B' => Some(Self::Boolean),
            'D' => Some(Self::DateTime),
            'I' => Some(Self::Integer),
            'P' => Some(Self::Timestamp),
            'R' => Some(Self::Float),
            'T' => Some(Self::Text),
            _ => Some(Self::Another),
        }
    }

    fn to_char(&self) -> char {
        match self {
            Self::Boolean => 'B',
            Self::DateTime => 'D',
            Self::Integer => 'I',
            Self::Timestamp => 'P',
            Self::Float => 'R',
            Self::Text => 'T',
            Self::Another => '?',
        }
    }
}

/// What one statement returns to the sqllogictest runner.
pub type DFOutput = DBOutput<DFColumnType>;
