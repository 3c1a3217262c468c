//! [`BuiltinAggregate`]: which of DataFusion's built-in aggregate functions an aggregate is,
//! told by its implementation rather than its name, so that a user-defined function that
//! happens to be called `sum` never gets a built-in kernel.

use std::any::Any;

use datafusion::functions_aggregate::average::Avg;
use datafusion::functions_aggregate::count::Count;
use datafusion::functions_aggregate::min_max::{Max, Min};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

/// The aggregate functions Freshet has hand-written kernels for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinAggregate {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl BuiltinAggregate {
    /// The built-in `function` is, if it is one of DataFusion's COUNT, SUM, AVG, MIN or MAX.
    pub fn of_function(function: &AggregateUDF) -> Option<Self> {
        let implementation: &dyn Any = function.inner().as_ref();
        if implementation.is::<Count>() {
            Some(Self::Count)
        } else if implementation.is::<Sum>() {
            Some(Self::Sum)
        } else if implementation.is::<Avg>() {
            Some(Self::Avg)
        } else if implementation.is::<Min>() {
            Some(Self::Min)
        } else if implementation.is::<Max>() {
            Some(Self::Max)
        } else {
            None
        }
    }

    /// The built-in `aggregate` calls, ignoring DISTINCT, FILTER and ORDER BY (the caller
    /// decides whether its kernel handles them).
    pub fn of(aggregate: &AggregateFunctionExpr) -> Option<Self> {
        Self::of_function(aggregate.fun())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::common::Result;
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::function::AccumulatorArgs;
    use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

    use super::*;

    /// A user-defined aggregate that calls itself `sum`.
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct NotTheBuiltinSum {
        signature: Signature,
    }

    impl AggregateUDFImpl for NotTheBuiltinSum {
        fn name(&self) -> &str {
            "sum"
        }
        fn signature(&self) -> &Signature {
            &self.signature
        }
        fn return_type(&self, _: &[DataType]) -> Result<DataType> {
            Ok(DataType::Int64)
        }
        fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
            unimplemented!("never run")
        }
        fn state_fields(
            &self,
            _: datafusion::logical_expr::function::StateFieldsArgs,
        ) -> Result<Vec<Arc<Field>>> {
            unimplemented!("never run")
        }
    }

    #[test]
    fn built_ins_are_told_by_implementation() {
        assert_eq!(
            BuiltinAggregate::of_function(&count_udaf()),
            Some(BuiltinAggregate::Count)
        );
        assert_eq!(
            BuiltinAggregate::of_function(&sum_udaf()),
            Some(BuiltinAggregate::Sum)
        );
        assert_eq!(
            BuiltinAggregate::of_function(&avg_udaf()),
            Some(BuiltinAggregate::Avg)
        );
        assert_eq!(
            BuiltinAggregate::of_function(&min_udaf()),
            Some(BuiltinAggregate::Min)
        );
        assert_eq!(
            BuiltinAggregate::of_function(&max_udaf()),
            Some(BuiltinAggregate::Max)
        );
    }

    #[test]
    fn a_user_function_named_like_a_built_in_is_not_one() {
        let udaf = AggregateUDF::new_from_impl(NotTheBuiltinSum {
            signature: Signature::any(1, Volatility::Immutable),
        });
        assert_eq!(udaf.name(), "sum");
        assert_eq!(BuiltinAggregate::of_function(&udaf), None);
    }
}
