//! [`TypedRowConverter`]: arrow's row format, decoded to the types that were encoded.
//!
//! Arrow's `RowConverter` decodes a dictionary column to its values' type (`Dictionary(Int32,
//! Utf8)` comes back as `Utf8`). An operator that keeps rows in that format (top-N, the
//! changelog aggregation) must give them out with its schema's types, so this converter
//! casts such columns back.

use std::ops::Deref;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{Row, RowConverter, SortField};
use datafusion::common::Result;

/// A `RowConverter` whose `convert_rows` gives the encoded types back; see the module
/// documentation.
#[derive(Debug)]
pub struct TypedRowConverter {
    converter: RowConverter,
    types: Vec<DataType>,
}

impl TypedRowConverter {
    /// Rows of columns of `types`, in ascending order.
    pub fn try_new(types: Vec<DataType>) -> Result<Self> {
        let fields = types.iter().cloned().map(SortField::new).collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            types,
        })
    }

    /// The columns of `rows`, of the types encoded.
    pub fn convert_rows<'a>(
        &self,
        rows: impl IntoIterator<Item = Row<'a>>,
    ) -> Result<Vec<ArrayRef>> {
        self.converter
            .convert_rows(rows)?
            .into_iter()
            .zip(&self.types)
            .map(
                |(column, data_type)| match column.data_type() == data_type {
                    true => Ok(column),
                    false => Ok(cast(&column, data_type)?),
                },
            )
            .collect()
    }
}

impl Deref for TypedRowConverter {
    type Target = RowConverter;

    fn deref(&self) -> &RowConverter {
        &self.converter
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, DictionaryArray, Int64Array};
    use datafusion::arrow::datatypes::Int32Type;

    use super::*;

    #[test]
    fn a_dictionary_column_comes_back_a_dictionary() {
        let dictionary: DictionaryArray<Int32Type> = vec![Some("b"), None, Some("a"), Some("b")]
            .into_iter()
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(dictionary),
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
        ];
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let converter = TypedRowConverter::try_new(types.clone()).unwrap();
        let rows = converter.convert_columns(&columns).unwrap();
        let back = converter.convert_rows(rows.iter()).unwrap();
        assert_eq!(back[0].data_type(), &types[0]);
        assert_eq!(&back, &columns);
    }
}
