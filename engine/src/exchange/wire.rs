//! The exchange's items as record batches, for a network boundary that carries only
//! batches (see [`super::remote`]).
//!
//! A wire batch holds the data columns (made nullable) followed by five columns that say
//! what each row is: `route` (a value the network's hash partitioning sends to the row's
//! output), `input` (the exchange input the row comes from), `kind` (rows, progress,
//! watermark, passed, end), and two numbers whose meaning depends on the kind (a merge key,
//! and a watermark or the input's largest event time). Rows are data rows with their merge
//! keys; every other item is one row whose data columns are null. Each row describes itself,
//! so the network may split batches or join batches of several inputs into one: decoding
//! splits a batch into runs of one input and one kind, in order.
//!
//! Merging by replay position, an input follows each batch's rows for an output with a
//! `Passed` item at the rows' own key. The pair travels as one wire batch: its last data
//! row has the kind "rows, then passed" and carries the input's largest event time, and
//! decoding gives back both items. Half the wire batches of such an exchange would
//! otherwise be one-row `Passed` items, each paying the network's cost per batch.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch, UInt32Array, new_null_array,
};
use datafusion::arrow::datatypes::{
    DataType, Field, Int8Type, Int64Type, Schema, SchemaRef, UInt32Type,
};
use datafusion::common::{Result, internal_err};

use crate::kernels::compact_views;

use super::ordered_merge::{Routed, RowKeys};

/// The names of the columns a wire batch adds after the data columns.
pub const ROUTE_COLUMN: &str = "__freshet_route";
const INPUT_COLUMN: &str = "__freshet_input";
const KIND_COLUMN: &str = "__freshet_kind";
const KEY_COLUMN: &str = "__freshet_key";
const TIME_COLUMN: &str = "__freshet_time";
const ADDED_COLUMNS: usize = 5;

const ROWS: i8 = 0;
const PROGRESS: i8 = 1;
const WATERMARK: i8 = 2;
const PASSED: i8 = 3;
const END: i8 = 4;
/// The last row of a run of rows, after which the input passed that row's merge key.
const ROWS_THEN_PASSED: i8 = 5;

/// What one wire item tells the receiving side about one input.
pub enum WireItem {
    Routed(Routed),
    /// The input has sent everything: an input that stops without it did not end normally.
    End,
}

/// What an input sends as one wire batch: an item, or rows and the `Passed` item after
/// them (see the module documentation), which decode as two items.
pub enum Outgoing {
    Item(WireItem),
    /// Rows whose last merge key the input has then passed, with its largest event time.
    RowsThenPassed {
        batch: RecordBatch,
        keys: RowKeys,
        newest: Option<i64>,
    },
}

impl From<WireItem> for Outgoing {
    fn from(item: WireItem) -> Self {
        Self::Item(item)
    }
}

impl Outgoing {
    /// Whether `passed` can travel folded into `rows`: it is at the key of their last row.
    pub fn folds(rows: &Routed, passed: &Routed) -> bool {
        match (rows, passed) {
            (Routed::Rows(batch, Some(keys)), Routed::Passed { key, .. }) => {
                batch.num_rows() > 0 && keys.at(batch.num_rows() - 1) == *key
            }
            _ => false,
        }
    }

    /// `rows` and the `passed` item that follows them as one item (see [`Self::folds`]).
    pub fn fold(rows: Routed, passed: Routed) -> Result<Self> {
        if !Self::folds(&rows, &passed) {
            return internal_err!("a Passed item folded into rows it does not follow");
        }
        match (rows, passed) {
            (Routed::Rows(batch, Some(keys)), Routed::Passed { newest, .. }) => {
                Ok(Self::RowsThenPassed {
                    batch,
                    keys,
                    newest,
                })
            }
            _ => internal_err!("a Passed item folded into rows it does not follow"),
        }
    }
}

/// The schema of the wire batches that carry batches of `data`.
pub fn wire_schema(data: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = data
        .fields()
        .iter()
        .map(|field| field.as_ref().clone().with_nullable(true))
        .collect();
    fields.push(Field::new(ROUTE_COLUMN, DataType::Int64, false));
    fields.push(Field::new(INPUT_COLUMN, DataType::UInt32, false));
    fields.push(Field::new(KIND_COLUMN, DataType::Int8, false));
    fields.push(Field::new(KEY_COLUMN, DataType::Int64, false));
    fields.push(Field::new(TIME_COLUMN, DataType::Int64, true));
    Arc::new(Schema::new_with_metadata(fields, data.metadata().clone()))
}

/// `item` of input `input` as a wire batch of schema `wire` whose rows all carry `route`.
pub fn encode(
    wire: &SchemaRef,
    route: i64,
    input: usize,
    item: impl Into<Outgoing>,
) -> Result<RecordBatch> {
    let input = u32::try_from(input).unwrap_or(u32::MAX);
    let item = match item.into() {
        Outgoing::Item(item) => item,
        Outgoing::RowsThenPassed {
            batch,
            keys,
            newest,
        } => {
            let keys = key_values(Some(keys), batch.num_rows());
            return encode_columns(
                wire,
                route,
                input,
                Some(batch),
                ROWS_THEN_PASSED,
                keys,
                newest,
            );
        }
    };
    let (data, kind, keys, time): (Option<RecordBatch>, i8, Vec<i64>, Option<i64>) = match item {
        WireItem::Routed(Routed::Rows(batch, keys)) => {
            let keys = key_values(keys, batch.num_rows());
            (Some(batch), ROWS, keys, None)
        }
        // Rows for an output that does not merge its inputs: the input column says whose.
        WireItem::Routed(Routed::Piece { batch, .. }) => {
            let rows = batch.num_rows();
            (Some(batch), ROWS, vec![0; rows], None)
        }
        WireItem::Routed(Routed::Progress(key)) => (None, PROGRESS, vec![key], None),
        WireItem::Routed(Routed::Watermark { watermark, key }) => {
            (None, WATERMARK, vec![key], Some(watermark))
        }
        WireItem::Routed(Routed::Passed { key, newest }) => (None, PASSED, vec![key], newest),
        WireItem::End => (None, END, vec![0], None),
        WireItem::Routed(Routed::BarrierPassed { .. } | Routed::Ended { .. }) => {
            return internal_err!("this exchange item does not cross a network boundary");
        }
    };
    encode_columns(wire, route, input, data, kind, keys, time)
}

/// One merge key per row.
fn key_values(keys: Option<RowKeys>, rows: usize) -> Vec<i64> {
    match keys {
        Some(RowKeys::PerRow(keys)) => keys,
        Some(RowKeys::All(key)) => vec![key; rows],
        None => vec![0; rows],
    }
}

/// A wire batch of `data` (or one row of nulls without it) whose rows are of kind `kind`
/// with merge keys `keys` and time `time` — except a run of rows then passed, whose rows
/// before the last are plain rows without a time.
fn encode_columns(
    wire: &SchemaRef,
    route: i64,
    input: u32,
    data: Option<RecordBatch>,
    kind: i8,
    keys: Vec<i64>,
    time: Option<i64>,
) -> Result<RecordBatch> {
    let rows = keys.len();
    let data_columns = wire.fields().len() - ADDED_COLUMNS;
    let mut columns: Vec<ArrayRef> = match data {
        // The network sends every buffer a view array holds, whole.
        Some(batch) => batch.columns().iter().map(compact_views).collect(),
        None => wire.fields()[..data_columns]
            .iter()
            .map(|field| new_null_array(field.data_type(), rows))
            .collect(),
    };
    columns.push(Arc::new(Int64Array::from_value(route, rows)));
    columns.push(Arc::new(UInt32Array::from_value(input, rows)));
    let (kinds, times) = match kind {
        ROWS_THEN_PASSED => {
            let mut kinds = vec![ROWS; rows];
            let mut times = vec![None; rows];
            if let (Some(kind), Some(time_of_last)) = (kinds.last_mut(), times.last_mut()) {
                *kind = ROWS_THEN_PASSED;
                *time_of_last = time;
            }
            (Int8Array::from(kinds), Int64Array::from(times))
        }
        _ => match time {
            Some(time) => (
                Int8Array::from_value(kind, rows),
                Int64Array::from_value(time, rows),
            ),
            None => (
                Int8Array::from_value(kind, rows),
                Int64Array::new_null(rows),
            ),
        },
    };
    columns.push(Arc::new(kinds));
    columns.push(Arc::new(Int64Array::from(keys)));
    columns.push(Arc::new(times));
    Ok(RecordBatch::try_new(Arc::clone(wire), columns)?)
}

/// The items of a wire batch, in order, with their inputs; data batches get schema `data`.
pub fn decode(batch: &RecordBatch, data: &SchemaRef) -> Result<Vec<(usize, WireItem)>> {
    let data_columns = data.fields().len();
    if batch.num_columns() != data_columns + ADDED_COLUMNS {
        return internal_err!(
            "a wire batch has {} columns, expected {}",
            batch.num_columns(),
            data_columns + ADDED_COLUMNS
        );
    }
    let inputs = batch.column(data_columns + 1).as_primitive::<UInt32Type>();
    let kinds = batch.column(data_columns + 2).as_primitive::<Int8Type>();
    let keys = batch.column(data_columns + 3).as_primitive::<Int64Type>();
    let times = batch.column(data_columns + 4).as_primitive::<Int64Type>();
    let time = |row: usize| times.is_valid(row).then(|| times.value(row));
    let mut items = Vec::new();
    let mut row = 0;
    while row < batch.num_rows() {
        let (input, kind) = (inputs.value(row), kinds.value(row));
        let item = match kind {
            ROWS | ROWS_THEN_PASSED => {
                // A run of one input's rows, to its end or its first row then passed.
                let mut end = row + 1;
                while kinds.value(end - 1) == ROWS
                    && end < batch.num_rows()
                    && inputs.value(end) == input
                    && matches!(kinds.value(end), ROWS | ROWS_THEN_PASSED)
                {
                    end += 1;
                }
                let rows = batch.slice(row, end - row);
                let columns = rows.columns()[..data_columns].to_vec();
                let piece = RecordBatch::try_new(Arc::clone(data), columns)?;
                let piece_keys = &keys.values()[row..end];
                let piece_keys = if piece_keys.iter().all(|key| *key == piece_keys[0]) {
                    RowKeys::All(piece_keys[0])
                } else {
                    RowKeys::PerRow(piece_keys.to_vec())
                };
                row = end - 1;
                if kinds.value(row) == ROWS_THEN_PASSED {
                    let rows = WireItem::Routed(Routed::Rows(piece, Some(piece_keys)));
                    items.push((input as usize, rows));
                    WireItem::Routed(Routed::Passed {
                        key: keys.value(row),
                        newest: time(row),
                    })
                } else {
                    WireItem::Routed(Routed::Rows(piece, Some(piece_keys)))
                }
            }
            PROGRESS => WireItem::Routed(Routed::Progress(keys.value(row))),
            WATERMARK => match time(row) {
                Some(watermark) => WireItem::Routed(Routed::Watermark {
                    watermark,
                    key: keys.value(row),
                }),
                None => return internal_err!("a wire watermark without its time"),
            },
            PASSED => WireItem::Routed(Routed::Passed {
                key: keys.value(row),
                newest: time(row),
            }),
            END => WireItem::End,
            other => return internal_err!("unknown wire item kind {other}"),
        };
        items.push((input as usize, item));
        row += 1;
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::compute::concat_batches;

    fn data_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("t", DataType::Int64, false),
        ]))
    }

    fn rows(keys: &[&str], times: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            data_schema(),
            vec![
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(Int64Array::from(times.to_vec())),
            ],
        )
        .unwrap()
    }

    fn describe((input, item): &(usize, WireItem)) -> String {
        match item {
            WireItem::Routed(Routed::Rows(batch, keys)) => {
                format!("{input}: {} rows {keys:?}", batch.num_rows())
            }
            WireItem::Routed(Routed::Passed { key, newest }) => {
                format!("{input}: passed {key} {newest:?}")
            }
            WireItem::Routed(Routed::Progress(key)) => format!("{input}: progress {key}"),
            WireItem::Routed(Routed::Watermark { watermark, key }) => {
                format!("{input}: watermark {watermark} at {key}")
            }
            WireItem::End => format!("{input}: end"),
            WireItem::Routed(_) => unreachable!(),
        }
    }

    #[test]
    fn items_of_several_inputs_in_one_batch_come_back_in_order() {
        let data = data_schema();
        let wire = wire_schema(&data);
        let batches = [
            encode(
                &wire,
                7,
                0,
                WireItem::Routed(Routed::Rows(
                    rows(&["a", "b"], &[1, 2]),
                    Some(RowKeys::All(5)),
                )),
            )
            .unwrap(),
            encode(
                &wire,
                7,
                3,
                WireItem::Routed(Routed::Rows(
                    rows(&["c"], &[3]),
                    Some(RowKeys::PerRow(vec![9])),
                )),
            )
            .unwrap(),
            encode(
                &wire,
                7,
                0,
                WireItem::Routed(Routed::Passed {
                    key: 5,
                    newest: Some(2),
                }),
            )
            .unwrap(),
            encode(&wire, 7, 3, WireItem::Routed(Routed::Progress(11))).unwrap(),
            encode(
                &wire,
                7,
                3,
                WireItem::Routed(Routed::Watermark {
                    watermark: 4,
                    key: 12,
                }),
            )
            .unwrap(),
            encode(&wire, 7, 0, WireItem::End).unwrap(),
        ];
        // The network may join batches: one batch decodes as the six.
        let joined = concat_batches(&wire, &batches).unwrap();
        let items = decode(&joined, &data).unwrap();
        let described: Vec<String> = items.iter().map(describe).collect();
        assert_eq!(
            described,
            [
                "0: 2 rows Some(All(5))",
                "3: 1 rows Some(All(9))",
                "0: passed 5 Some(2)",
                "3: progress 11",
                "3: watermark 4 at 12",
                "0: end",
            ]
        );
        let WireItem::Routed(Routed::Rows(first, _)) = &items[0].1 else {
            unreachable!()
        };
        assert_eq!(first, &rows(&["a", "b"], &[1, 2]));
    }

    #[test]
    fn rows_then_passed_travel_as_one_batch_and_decode_as_both_items() {
        let data = data_schema();
        let wire = wire_schema(&data);
        let folded = |times: &[i64], key: i64, newest: i64| {
            let keys = Some(RowKeys::All(key));
            let rows = Routed::Rows(rows(&vec!["a"; times.len()], times), keys);
            let passed = Routed::Passed {
                key,
                newest: Some(newest),
            };
            assert!(Outgoing::folds(&rows, &passed));
            encode(&wire, 7, 2, Outgoing::fold(rows, passed).unwrap()).unwrap()
        };
        let first = folded(&[1, 2, 3], 10, 3);
        assert_eq!(first.num_rows(), 3, "no row of its own for the passed item");
        // Two of one input joined by the network: the first run ends at its passed row.
        let joined = concat_batches(&wire, &[first, folded(&[4], 11, 4)]).unwrap();
        let described: Vec<String> = decode(&joined, &data)
            .unwrap()
            .iter()
            .map(describe)
            .collect();
        assert_eq!(
            described,
            [
                "2: 3 rows Some(All(10))",
                "2: passed 10 Some(3)",
                "2: 1 rows Some(All(11))",
                "2: passed 11 Some(4)",
            ]
        );
        // A passed item at another key than the rows' last stays an item of its own.
        let rows = Routed::Rows(rows(&["a"], &[1]), Some(RowKeys::All(10)));
        let passed = Routed::Passed {
            key: 12,
            newest: None,
        };
        assert!(!Outgoing::folds(&rows, &passed));
        assert!(Outgoing::fold(rows, passed).is_err());
    }
}
