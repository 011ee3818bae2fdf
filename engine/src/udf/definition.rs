//! Rust UDF definitions: signature, output, accelerator annotations, and the CPU (mandatory) and
//! GPU (optional) implementations of a scalar UDF ([`ScalarUdf`]); what both kinds share
//! (argument rules, the builder methods, signature and coercion).

use std::fmt;
use std::sync::Arc;

use accelsql_udf_runtime::annotations::parse_instance_limit;
use accelsql_udf_runtime::{AcceleratorRequest, GpuColumnarKernel, GpuDevice, InstanceContext};
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::plan_datafusion_err;
use datafusion::logical_expr::{ColumnarValue, Signature, TypeSignature, Volatility};

use super::kernel;
use super::script::origin::ScriptOrigin;
use crate::{Result, definition_err};

/// A scalar UDF implementation: `num_rows` rows of arguments in, one column of `num_rows` out.
///
/// Arguments that are constants in the query arrive as [`ColumnarValue::Scalar`] (they are not
/// replicated into columns); use [`ColumnarValue::to_array`] when a column is easier.
pub trait ScalarKernel: Send + Sync {
    /// Evaluates one batch on the instance described by `instance`.
    fn evaluate(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ColumnarValue],
    ) -> datafusion::error::Result<ArrayRef>;
}

impl<F> ScalarKernel for F
where
    F: Fn(&InstanceContext, usize, &[ColumnarValue]) -> datafusion::error::Result<ArrayRef>
        + Send
        + Sync,
{
    fn evaluate(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ColumnarValue],
    ) -> datafusion::error::Result<ArrayRef> {
        self(instance, num_rows, args)
    }
}

/// Which arguments a UDF takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Inputs {
    /// Exactly these types (arguments are coerced to them).
    Exact(Vec<DataType>),
    /// Any number of arguments of any types (`...` in Exasol's script syntax).
    Variadic,
    /// These types; an argument of another type is cast to its parameter's type when Arrow can
    /// cast it (as script parameters take `1` for a DECIMAL or a literal for a TIMESTAMP).
    Castable(Vec<DataType>),
    /// Whatever the rule accepts, cast to the types it gives: for arguments no list of types
    /// describes, e.g. "two vectors of numbers, each any list type" (the vector built-ins).
    Rule(ArgumentRule),
}

/// The check of [`Inputs::Rule`]: from a call's argument types, the types to cast them to, or
/// why the call does not fit (`Err(message)`, a plan error naming the UDF, code 42000).
///
/// ```
/// use accelsql_engine::udf::ArgumentRule;
/// use accelsql_engine::datafusion::arrow::datatypes::DataType;
///
/// // One argument of any integer type, widened to BIGINT.
/// fn one_integer(types: &[DataType]) -> Result<Vec<DataType>, String> {
///     match types {
///         [t] if t.is_integer() => Ok(vec![DataType::Int64]),
///         _ => Err(format!("takes one integer, got ({types:?})")),
///     }
/// }
/// let rule = ArgumentRule::new("(integer)", one_integer);
/// assert_eq!(rule.coerce(&[DataType::Int8]), Ok(vec![DataType::Int64]));
/// assert!(rule.coerce(&[DataType::Utf8]).is_err());
/// ```
#[derive(Clone, Copy)]
pub struct ArgumentRule {
    description: &'static str,
    coerce: fn(&[DataType]) -> std::result::Result<Vec<DataType>, String>,
}

impl ArgumentRule {
    /// A rule described by `description` (the parameters as a user would write them, e.g.
    /// `(a VECTOR, b VECTOR)`), checking and coercing with `coerce`.
    pub const fn new(
        description: &'static str,
        coerce: fn(&[DataType]) -> std::result::Result<Vec<DataType>, String>,
    ) -> Self {
        Self {
            description,
            coerce,
        }
    }

    /// What the rule accepts, in words.
    pub fn description(&self) -> &'static str {
        self.description
    }

    /// The types a call with `arg_types` is cast to, or why it does not fit.
    pub fn coerce(&self, arg_types: &[DataType]) -> std::result::Result<Vec<DataType>, String> {
        (self.coerce)(arg_types)
    }
}

impl fmt::Debug for ArgumentRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ArgumentRule")
            .field(&self.description)
            .finish()
    }
}

impl PartialEq for ArgumentRule {
    fn eq(&self, other: &Self) -> bool {
        self.description == other.description && std::ptr::fn_addr_eq(self.coerce, other.coerce)
    }
}

impl Eq for ArgumentRule {}

impl std::hash::Hash for ArgumentRule {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.description.hash(state);
    }
}

/// What every UDF kind declares and carries: its name, its arguments, Exasol's annotations,
/// and where it comes from (a script of this process, or one another process rebuilds).
#[derive(Clone)]
pub(crate) struct UdfHeader {
    pub(crate) name: String,
    pub(crate) inputs: Inputs,
    pub(crate) accelerator: AcceleratorRequest,
    pub(crate) instance_limit: Option<usize>,
    /// `%perInstanceRequiredAcceleratorMemory`: device memory one GPU instance needs.
    pub(crate) device_memory: Option<u64>,
    /// Defined by a script of this process's catalog (see
    /// [`runs_only_in_this_process`](crate::udf::runs_only_in_this_process)).
    pub(crate) local: bool,
    /// How another process rebuilds it, for a script that can travel.
    pub(crate) origin: Option<Arc<ScriptOrigin>>,
}

impl UdfHeader {
    /// A definition named `name`: no arguments, no annotations.
    pub(crate) fn new(name: String) -> Self {
        Self {
            name,
            inputs: Inputs::Exact(Vec::new()),
            accelerator: AcceleratorRequest::None,
            instance_limit: None,
            device_memory: None,
            local: false,
            origin: None,
        }
    }

    /// The header's fields for a `Debug` of its UDF.
    pub(crate) fn debug_fields<'a, 'b>(
        &self,
        f: &'a mut fmt::DebugStruct<'a, 'b>,
    ) -> &'a mut fmt::DebugStruct<'a, 'b> {
        f.field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("accelerator", &self.accelerator)
            .field("instance_limit", &self.instance_limit)
            .field("device_memory", &self.device_memory)
    }
}

/// The methods every UDF kind shares, read from its [`UdfHeader`] (`self.header`).
macro_rules! common_udf_methods {
    () => {
        /// The SQL name.
        pub fn name(&self) -> &str {
            &self.header.name
        }

        /// The same UDF under `name`, taken as is: a script's quoted or schema-qualified name,
        /// which the front end has already checked (the builder's check is for Rust
        /// identifiers).
        pub(crate) fn renamed(mut self, name: String) -> Self {
            self.header.name = name;
            self
        }

        /// Marks it as defined by a script of this process (it cannot run in another process).
        pub(crate) fn local_to_this_process(mut self) -> Self {
            self.header.local = true;
            self
        }

        /// Marks it as a script that another process rebuilds from `origin`.
        pub(crate) fn with_origin(mut self, origin: Arc<ScriptOrigin>) -> Self {
            self.header.origin = Some(origin);
            self
        }

        /// How another process rebuilds it, when it is a script that can travel.
        pub(crate) fn origin(&self) -> Option<&Arc<ScriptOrigin>> {
            self.header.origin.as_ref()
        }

        /// Whether a script of this process's catalog defined it (it cannot run in another
        /// process unless it carries its [`origin`](Self::origin)).
        pub(crate) fn is_local(&self) -> bool {
            self.header.local
        }

        /// The accelerator annotation.
        pub fn accelerator(&self) -> AcceleratorRequest {
            self.header.accelerator
        }

        /// `%perNodeAndCallInstanceLimit`, if set.
        pub fn instance_limit(&self) -> Option<usize> {
            self.header.instance_limit
        }

        /// `%perInstanceRequiredAcceleratorMemory`: the device memory one GPU instance declares
        /// it needs, if it declares any (see [`GpuSharing`](crate::gpu_scheduler::GpuSharing)).
        pub fn device_memory(&self) -> Option<u64> {
            self.header.device_memory
        }

        /// The arguments it takes.
        pub fn inputs(&self) -> &Inputs {
            &self.header.inputs
        }

        /// Whether it has a GPU implementation.
        pub fn has_gpu_implementation(&self) -> bool {
            self.gpu.is_some()
        }
    };
}
pub(crate) use common_udf_methods;

/// The builder methods every UDF kind shares: arguments and Exasol's annotations (its
/// [`UdfHeader`], `self.header`).
macro_rules! common_builder_methods {
    () => {
        /// Exact argument types.
        pub fn inputs(mut self, types: impl IntoIterator<Item = DataType>) -> Self {
            self.header.inputs = Inputs::Exact(types.into_iter().collect());
            self
        }

        /// Any number of arguments of any type.
        pub fn variadic(mut self) -> Self {
            self.header.inputs = Inputs::Variadic;
            self
        }

        /// These types, casting arguments of other types to them where Arrow can.
        pub fn castable_inputs(mut self, types: impl IntoIterator<Item = DataType>) -> Self {
            self.header.inputs = Inputs::Castable(types.into_iter().collect());
            self
        }

        /// Arguments checked and cast by `rule` (see [`Inputs::Rule`]).
        pub fn rule_inputs(mut self, rule: $crate::udf::ArgumentRule) -> Self {
            self.header.inputs = Inputs::Rule(rule);
            self
        }

        /// The accelerator request, parsed as `%perInstanceRequiredAcceleratorDevices` is.
        pub fn accelerator(mut self, annotation: &str) -> Result<Self> {
            self.header.accelerator = AcceleratorRequest::parse(annotation)?;
            Ok(self)
        }

        /// The accelerator request, typed.
        pub fn accelerator_request(mut self, request: AcceleratorRequest) -> Self {
            self.header.accelerator = request;
            self
        }

        /// `%perNodeAndCallInstanceLimit`, parsed from text.
        pub fn instance_limit_annotation(mut self, annotation: &str) -> Result<Self> {
            self.header.instance_limit = Some(parse_instance_limit(annotation)?);
            Ok(self)
        }

        /// At most `n` parallel instances per call.
        pub fn instance_limit(mut self, n: usize) -> Self {
            self.header.instance_limit = Some(n.max(1));
            self
        }

        /// The device memory one GPU instance needs, in bytes (at least 1): under
        /// `gpu_sharing = 'memory'` a statement calling it reserves that much per instance and
        /// shares devices with other such statements; its GPU runs stay within it. Without it
        /// a GPU call needs whole devices.
        pub fn device_memory(mut self, bytes: u64) -> Self {
            self.header.device_memory = Some(bytes.max(1));
            self
        }

        /// `%perInstanceRequiredAcceleratorMemory`, parsed from text (`6GiB`, `512MiB`, …).
        pub fn device_memory_annotation(mut self, annotation: &str) -> Result<Self> {
            self.header.device_memory = Some(
                accelsql_udf_runtime::annotations::parse_device_memory(annotation)?,
            );
            Ok(self)
        }
    };
}
pub(crate) use common_builder_methods;

/// A scalar Rust UDF with Exasol's accelerator annotations.
///
/// ```
/// use std::sync::Arc;
/// use accelsql_engine::{ScalarUdf, datafusion::arrow::array::{ArrayRef, Int64Array}};
/// use accelsql_engine::datafusion::arrow::datatypes::DataType;
///
/// let double = ScalarUdf::builder("double_it")
///     .inputs([DataType::Int64])
///     .returns(DataType::Int64)
///     .accelerator("GpuNvidia|None").unwrap()
///     .cpu(|_ctx: &_, rows: usize, args: &[_]| {
///         let a = accelsql_engine::datafusion::logical_expr::ColumnarValue::values_to_arrays(args)?;
///         let a = a[0].as_any().downcast_ref::<Int64Array>().unwrap();
///         Ok(Arc::new(a.iter().map(|v| v.map(|v| v * 2)).collect::<Int64Array>()) as ArrayRef)
///     })
///     .build()
///     .unwrap();
/// assert_eq!(double.name(), "double_it");
/// ```
#[derive(Clone)]
pub struct ScalarUdf {
    header: UdfHeader,
    returns: DataType,
    pub(super) cpu: Arc<dyn ScalarKernel>,
    pub(super) gpu: Option<Arc<dyn ScalarKernel>>,
}

impl fmt::Debug for ScalarUdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.header
            .debug_fields(&mut f.debug_struct("ScalarUdf"))
            .field("returns", &self.returns)
            .field("gpu", &self.gpu.is_some())
            .finish()
    }
}

impl ScalarUdf {
    /// Starts a definition; the name is how SQL calls it (lower-case, as SQL folds identifiers).
    pub fn builder(name: impl Into<String>) -> ScalarUdfBuilder {
        ScalarUdfBuilder {
            header: UdfHeader::new(name.into()),
            returns: None,
            cpu: None,
            gpu: None,
        }
    }

    common_udf_methods!();

    /// Its result type.
    pub fn returns(&self) -> &DataType {
        &self.returns
    }
}

/// Builder of [`ScalarUdf`].
pub struct ScalarUdfBuilder {
    header: UdfHeader,
    returns: Option<DataType>,
    cpu: Option<Arc<dyn ScalarKernel>>,
    gpu: Option<Arc<dyn ScalarKernel>>,
}

impl ScalarUdfBuilder {
    common_builder_methods!();

    /// The result type (`RETURNS type`).
    pub fn returns(mut self, data_type: DataType) -> Self {
        self.returns = Some(data_type);
        self
    }

    /// The CPU implementation: mandatory, the fallback and the reference.
    pub fn cpu(mut self, kernel: impl ScalarKernel + 'static) -> Self {
        self.cpu = Some(Arc::new(kernel));
        self
    }

    /// The GPU columnar implementation, used when the call is placed on a GPU of a real device.
    pub fn gpu(mut self, kernel: impl ScalarKernel + 'static) -> Self {
        self.gpu = Some(Arc::new(kernel));
        self
    }

    /// The GPU implementation as CUDA kernels: each batch runs on the instance's pinned device
    /// through [`GpuDevice::run_columnar`], which does the chunking, transfers, NULLs and
    /// out-of-memory splitting; the kernel only enqueues its work on a chunk already on the
    /// device (see [`GpuColumnarKernel`], and `examples/examples/gpu_scalar_udf.rs`). Shorthand
    /// for a [`ScalarUdfBuilder::gpu`] closure that does the same.
    ///
    /// [`GpuDevice::run_columnar`]: accelsql_udf_runtime::GpuDevice::run_columnar
    pub fn gpu_columnar(self, kernel: impl GpuColumnarKernel + 'static) -> Self {
        let kernel = Arc::new(kernel);
        self.gpu(
            move |instance: &InstanceContext,
                  rows: usize,
                  args: &[ColumnarValue]|
                  -> datafusion::error::Result<ArrayRef> {
                let operands = kernel::operands(args)?;
                let device = kernel::pinned_device(instance)?;
                GpuDevice::open(device)
                    .and_then(|gpu| gpu.run_columnar(kernel.as_ref(), rows, &operands))
                    .map_err(kernel::kernel_error)
            },
        )
    }

    /// Checks and finishes the definition.
    pub fn build(self) -> Result<ScalarUdf> {
        let name = check_name(&self.header.name)?;
        let cpu = self.cpu.ok_or_else(|| {
            definition_err!(
                "UDF {name} has no CPU implementation; every UDF needs one (fallback and reference)"
            )
        })?;
        let returns = self
            .returns
            .ok_or_else(|| definition_err!("UDF {name} has no result type (RETURNS)"))?;
        Ok(ScalarUdf {
            header: UdfHeader {
                name,
                ..self.header
            },
            returns,
            cpu,
            gpu: self.gpu,
        })
    }
}

/// Checks a UDF name and folds it to lower case, as SQL folds unquoted identifiers.
pub(crate) fn check_name(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(definition_err!(
            "{name:?} is not a valid UDF name (letters, digits and _)"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

/// The DataFusion signature of a UDF taking `inputs`. Always Volatile: two identical calls stay
/// two calls (no common-subexpression merging), as in Exasol.
pub(crate) fn signature(inputs: &Inputs) -> Signature {
    match inputs {
        Inputs::Exact(types) => Signature::exact(types.clone(), Volatility::Volatile),
        Inputs::Castable(types) if types.is_empty() => Signature::nullary(Volatility::Volatile),
        Inputs::Castable(_) | Inputs::Rule(_) => Signature::user_defined(Volatility::Volatile),
        Inputs::Variadic => Signature::one_of(
            vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
            Volatility::Volatile,
        ),
    }
}

/// The argument types a call of `udf` with `arg_types` gets (for [`Inputs::Castable`]).
pub(crate) fn coerce(
    udf: &str,
    inputs: &Inputs,
    arg_types: &[DataType],
) -> datafusion::error::Result<Vec<DataType>> {
    let types = match inputs {
        Inputs::Castable(types) => types,
        Inputs::Rule(rule) => {
            return rule
                .coerce(arg_types)
                .map_err(|message| plan_datafusion_err!("{udf}: {message}"));
        }
        Inputs::Exact(_) | Inputs::Variadic => return Ok(arg_types.to_vec()),
    };
    if arg_types.len() != types.len() {
        return Err(plan_datafusion_err!(
            "{udf} takes {} argument(s), got {}",
            types.len(),
            arg_types.len()
        ));
    }
    arg_types
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (given, wanted))| {
            if datafusion::arrow::compute::can_cast_types(given, wanted) {
                Ok(wanted.clone())
            } else {
                Err(plan_datafusion_err!("argument {} of {udf} is {given}, which cannot become its parameter type {wanted}",
                    i + 1))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    fn noop() -> impl ScalarKernel {
        |_: &InstanceContext, n: usize, _: &[ColumnarValue]| {
            Ok(Arc::new(Int64Array::from(vec![0; n])) as ArrayRef)
        }
    }

    #[test]
    fn a_cpu_implementation_and_a_result_type_are_mandatory() {
        let e = ScalarUdf::builder("f")
            .returns(DataType::Int64)
            .build()
            .unwrap_err();
        assert_eq!(e.code(), "42E01");
        assert!(e.to_string().contains("no CPU implementation"), "{e}");
        let e = ScalarUdf::builder("f").cpu(noop()).build().unwrap_err();
        assert!(e.to_string().contains("no result type"), "{e}");
        let e = ScalarUdf::builder("bad name")
            .returns(DataType::Int64)
            .cpu(noop())
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("not a valid UDF name"), "{e}");
    }

    #[test]
    fn annotations_are_parsed_like_script_options() {
        let udf = ScalarUdf::builder("F")
            .returns(DataType::Int64)
            .accelerator("GpuNvidia")
            .unwrap()
            .instance_limit_annotation("4")
            .unwrap()
            .cpu(noop())
            .build()
            .unwrap();
        assert_eq!(udf.name(), "f");
        assert_eq!(udf.accelerator(), AcceleratorRequest::Required);
        assert_eq!(udf.instance_limit(), Some(4));
        let e = ScalarUdf::builder("f").accelerator("GpuAmd").err().unwrap();
        assert_eq!(e.code(), "22U01");
    }
}
