//! The window functions `tumble`, `hop` and `session` that window keys are written with.
//!
//! `tumble(ts, size [, offset])` returns the start of the epoch-aligned window `ts` falls in,
//! the value `date_bin(size, ts)` gives, so a tumbling GROUP BY is also correct batch SQL.
//! `hop` and `session` put a record into several windows or into windows that depend on other
//! records; they have no per-row value and are computed by Freshet's window aggregation,
//! which replaces the GROUP BY they key.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use freshet_engine::window::{WindowSpec, duration_in_unit, time_unit_type, window_starts_array};

/// Freshet's other scalar functions, which plain batch SQL over the same tables may call as
/// well: `count_char`, `regexp_extract` and Flink's spellings (`mod`, `hour`, `split_index`,
/// …).
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    let mut functions = vec![
        crate::count_char::count_char_function(),
        crate::regexp_extract::regexp_extract_function(),
    ];
    functions.extend(crate::flink_functions::flink_functions());
    functions
}

/// DataFusion's functions that Freshet computes faster with the same answers, registered
/// in a streaming session in place of DataFusion's: `to_char`, `split_part` and
/// `date_part`. (Batch
/// references, such as the test oracle, keep DataFusion's own, so that every comparison
/// checks them.)
pub fn faster_builtin_functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        crate::to_char::to_char_function(),
        crate::split_part::split_part_function(),
        crate::date_part::date_part_function(),
    ]
}

/// The description of a function of [`faster_builtin_functions`] — name, aliases,
/// signature, return type, documentation — taken from DataFusion's function it stands in
/// for (held in `self.datafusion`), so that planning cannot tell the two apart.
macro_rules! described_as_datafusion_s {
    () => {
        fn name(&self) -> &str {
            self.datafusion.name()
        }

        fn aliases(&self) -> &[String] {
            self.datafusion.aliases()
        }

        fn signature(&self) -> &datafusion::logical_expr::Signature {
            self.datafusion.signature()
        }

        fn return_type(
            &self,
            arg_types: &[datafusion::arrow::datatypes::DataType],
        ) -> datafusion::common::Result<datafusion::arrow::datatypes::DataType> {
            self.datafusion.return_type(arg_types)
        }

        fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
            self.datafusion.documentation()
        }
    };
}
pub(crate) use described_as_datafusion_s;

/// The window functions, for registration in a session.
pub fn window_functions() -> Vec<Arc<ScalarUDF>> {
    [
        WindowFunction::Tumble,
        WindowFunction::Hop,
        WindowFunction::Session,
    ]
    .into_iter()
    .map(|function| Arc::new(ScalarUDF::new_from_impl(WindowFunctionUdf::new(function))))
    .chain([Arc::new(ScalarUDF::new_from_impl(SessionEnd::new()))])
    .collect()
}

/// `session_end(last_time, gap)`: a session's `window_end`, its last event time plus the gap,
/// as a timestamp in the time column's unit (milliseconds for an integer time column), the
/// type of `window_start`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionEnd {
    signature: Signature,
}

impl SessionEnd {
    fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SessionEnd {
    fn name(&self) -> &str {
        "session_end"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        time_unit_type(&arg_types[0])
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let time_type = args.arg_fields[0].data_type().clone();
        let ColumnarValue::Scalar(gap) = &args.args[1] else {
            return plan_err!("session_end(): the gap must be a constant interval");
        };
        let gap = duration_in_unit(gap, &time_type)?;
        let times = cast(&args.args[0].to_array(args.number_rows)?, &DataType::Int64)?;
        let ends: Int64Array = times
            .as_primitive::<Int64Type>()
            .iter()
            .map(|t| t.map(|t| t.saturating_add(gap)))
            .collect();
        Ok(ColumnarValue::Array(cast(
            &ends,
            &time_unit_type(&time_type)?,
        )?))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum WindowFunction {
    Tumble,
    Hop,
    Session,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowFunctionUdf {
    function: WindowFunction,
    signature: Signature,
}

/// The window function `expr` calls — `tumble`, `hop` or `session` as Freshet registers them
/// (a user function of the same name is not one) — with its name and arguments.
pub fn window_function_call(
    expr: &Arc<dyn PhysicalExpr>,
) -> Option<(&str, &[Arc<dyn PhysicalExpr>])> {
    let function = expr.downcast_ref::<ScalarFunctionExpr>()?;
    let implementation: &dyn std::any::Any = function.fun().inner().as_ref();
    implementation
        .is::<WindowFunctionUdf>()
        .then(|| (function.name(), function.args()))
}

impl WindowFunctionUdf {
    fn new(function: WindowFunction) -> Self {
        let arities = match function {
            WindowFunction::Tumble => vec![TypeSignature::Any(2), TypeSignature::Any(3)],
            WindowFunction::Hop => vec![TypeSignature::Any(3)],
            WindowFunction::Session => vec![TypeSignature::Any(2)],
        };
        // `hop` and `session` have no per-row value: as volatile functions, no optimizer rule
        // moves a predicate over them (a HAVING on the window bounds) below the aggregation.
        let volatility = match function {
            WindowFunction::Tumble => Volatility::Immutable,
            WindowFunction::Hop | WindowFunction::Session => Volatility::Volatile,
        };
        Self {
            function,
            signature: Signature::one_of(arities, volatility),
        }
    }
}

impl ScalarUDFImpl for WindowFunctionUdf {
    fn name(&self) -> &str {
        match self.function {
            WindowFunction::Tumble => "tumble",
            WindowFunction::Hop => "hop",
            WindowFunction::Session => "session",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(time_type) => time_unit_type(time_type).or_else(|_| {
                plan_err!(
                    "{}() needs a timestamp or integer (epoch milliseconds) time column as its first argument, got {time_type}",
                    self.name()
                )
            }),
            None => plan_err!("{}() needs a time column", self.name()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if self.function != WindowFunction::Tumble {
            return exec_err!(
                "{}() puts a record into several windows and can only key the GROUP BY of a streaming aggregation",
                self.name()
            );
        }
        let time_type = args.arg_fields[0].data_type().clone();
        let durations = args.args[1..]
            .iter()
            .map(|arg| match arg {
                ColumnarValue::Scalar(value) => Ok(value.clone()),
                ColumnarValue::Array(_) => {
                    plan_err!("tumble(): the window size must be a constant interval")
                }
            })
            .collect::<Result<Vec<ScalarValue>>>()?;
        let WindowSpec::Tumble { size, offset } =
            WindowSpec::from_call("tumble", &durations, &time_type)?
        else {
            return exec_err!("tumble() built a non-tumbling window");
        };
        let times = args.args[0].to_array(args.number_rows)?;
        Ok(ColumnarValue::Array(window_starts_array(
            &times, size, offset,
        )?))
    }
}
