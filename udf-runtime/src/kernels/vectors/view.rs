//! One argument's vectors viewed without copying: a `List`, `LargeList` or `FixedSizeList` of
//! FLOAT or DOUBLE (or `Null`), its row validity, element validity and where each row lies.

use std::ops::Range;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Float32Type, Float64Type};

use crate::Result;
use crate::kernels::invalid_argument;

/// The element values of a vector array (all its rows, flat).
#[derive(Debug, Clone, Copy)]
pub(super) enum Elements<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

/// Where row `i`'s vector lies in the flat elements.
#[derive(Debug, Clone, Copy)]
enum Layout<'a> {
    /// `FixedSizeList` of this size: `i * size .. (i + 1) * size` (its values are sliced with it).
    Fixed(usize),
    /// `List` offsets.
    Offsets(&'a [i32]),
    /// `LargeList` offsets.
    LargeOffsets(&'a [i64]),
    /// A `Null`-typed array: every row is NULL.
    AllNull,
}

/// Which elements are NULL.
#[derive(Debug, Clone, Copy)]
pub(super) enum ElementNulls<'a> {
    None,
    Some(&'a NullBuffer),
    /// A list of `Null` elements: every element is NULL.
    All,
}

/// One argument's vectors, viewed without copying (also the GPU path's host-side view, so that
/// both check arguments alike).
#[derive(Debug)]
pub(crate) struct Vectors<'a> {
    layout: Layout<'a>,
    pub(super) elements: Elements<'a>,
    /// The list's flat values (`None` for a `Null`-typed argument).
    values: Option<&'a ArrayRef>,
    nulls: Option<&'a NullBuffer>,
    pub(super) element_nulls: ElementNulls<'a>,
}

impl<'a> Vectors<'a> {
    /// Views `array`, argument `position` of `function`; an array that is not a list of FLOAT or
    /// DOUBLE is an invalid argument.
    pub(crate) fn new(function: &str, position: usize, array: &'a ArrayRef) -> Result<Self> {
        let (layout, values, nulls) = match array.data_type() {
            DataType::Null => {
                return Ok(Self {
                    layout: Layout::AllNull,
                    elements: Elements::F64(&[]),
                    values: None,
                    nulls: None,
                    element_nulls: ElementNulls::None,
                });
            }
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (
                    Layout::Offsets(list.value_offsets()),
                    list.values(),
                    list.nulls(),
                )
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                let offsets = list.value_offsets();
                (Layout::LargeOffsets(offsets), list.values(), list.nulls())
            }
            DataType::FixedSizeList(_, size) => {
                let list = array.as_fixed_size_list();
                let size = usize::try_from(*size).unwrap_or(0);
                (Layout::Fixed(size), list.values(), list.nulls())
            }
            other => {
                return Err(invalid_argument(
                    function,
                    format!(
                        "argument {position} is {other}; expected a vector (an array of FLOAT or DOUBLE)"
                    ),
                ));
            }
        };
        let mut element_nulls = match values.nulls() {
            Some(n) if n.null_count() > 0 => ElementNulls::Some(n),
            _ => ElementNulls::None,
        };
        let elements = match values.data_type() {
            DataType::Float32 => Elements::F32(values.as_primitive::<Float32Type>().values()),
            DataType::Float64 => Elements::F64(values.as_primitive::<Float64Type>().values()),
            DataType::Null => {
                element_nulls = ElementNulls::All;
                Elements::F64(&[])
            }
            other => {
                return Err(invalid_argument(
                    function,
                    format!(
                        "argument {position} is a vector of {other}; expected FLOAT or DOUBLE elements"
                    ),
                ));
            }
        };
        Ok(Self {
            layout,
            elements,
            values: Some(values),
            nulls,
            element_nulls,
        })
    }

    /// The list's flat values (`None` for a `Null`-typed argument).
    pub(crate) fn values(&self) -> Option<&'a ArrayRef> {
        self.values
    }

    /// The length of every vector of a `FixedSizeList`.
    pub(crate) fn fixed_len(&self) -> Option<usize> {
        match self.layout {
            Layout::Fixed(size) => Some(size),
            _ => None,
        }
    }

    /// The length of every vector where every row is a vector of that many non-NULL elements
    /// (a `FixedSizeList` without NULL rows or elements): rows can then be taken without
    /// per-row checks.
    pub(super) fn dense_len(&self) -> Option<usize> {
        match self.layout {
            Layout::Fixed(size)
                if self.nulls.is_none_or(|n| n.null_count() == 0)
                    && matches!(self.element_nulls, ElementNulls::None) =>
            {
                Some(size)
            }
            _ => None,
        }
    }

    /// Whether some element may be NULL (its elements have NULLs, or are of type `Null`).
    pub(crate) fn may_have_null_elements(&self) -> bool {
        !matches!(self.element_nulls, ElementNulls::None)
    }

    /// Whether row `i` is NULL.
    #[inline]
    pub(crate) fn is_null(&self, i: usize) -> bool {
        matches!(self.layout, Layout::AllNull) || self.nulls.is_some_and(|n| n.is_null(i))
    }

    /// Whether element `index` (of the flat elements) is NULL.
    #[inline]
    pub(super) fn element_is_null(&self, index: usize) -> bool {
        match self.element_nulls {
            ElementNulls::None => false,
            ElementNulls::All => true,
            ElementNulls::Some(n) => n.is_null(index),
        }
    }

    /// Where row `i`'s (non-NULL) vector lies in the elements.
    #[inline]
    pub(crate) fn range(&self, i: usize) -> Range<usize> {
        match self.layout {
            Layout::Fixed(size) => i * size..(i + 1) * size,
            Layout::Offsets(o) => o[i] as usize..o[i + 1] as usize,
            Layout::LargeOffsets(o) => o[i] as usize..o[i + 1] as usize,
            Layout::AllNull => 0..0,
        }
    }

    /// Whether an element in `range` is NULL.
    #[inline]
    pub(crate) fn has_null_element(&self, range: &Range<usize>) -> bool {
        match self.element_nulls {
            ElementNulls::None => false,
            ElementNulls::All => !range.is_empty(),
            ElementNulls::Some(n) => {
                let valid = n
                    .buffer()
                    .count_set_bits_offset(n.offset() + range.start, range.len());
                valid != range.len()
            }
        }
    }
}
