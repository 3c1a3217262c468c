//! [`FreshetCodec`]: how Freshet's parts of a distributed plan travel to the workers.
//!
//! A worker receives [`ExchangeSendExec`] and [`FragmentExec`] nodes as the query's
//! [`QuerySpec`], the node's place in the plan and its schema, and plans its part of the
//! query itself (see `placement`): Freshet's operators hold state shared between them in one
//! process (a source's replay positions read by the exchange above it) which a plan node by
//! node would not carry. DataFusion's own nodes and the network boundaries travel as
//! datafusion-distributed encodes them.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal, lit};
use datafusion::physical_expr_common::physical_expr::proto_decode::PhysicalExprDecodeCtx;
use datafusion::physical_expr_common::physical_expr::proto_encode::PhysicalExprEncodeCtx;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use freshet_engine::kernels::{IntegerSet, StringSet};
use freshet_planner::{ConstantDivisorExpr, LiteralSet, LiteralSetExpr};

use super::exchange_send::ExchangeSendExec;
use super::fragment::FragmentExec;
use super::spec::{QuerySpec, Reader, put_bytes, put_u64};

const EXCHANGE_SEND: u8 = 1;
const FRAGMENT: u8 = 2;

/// A [`ConstantDivisorExpr`]'s operator: a quotient or a remainder, of Int64 or Int32.
const QUOTIENT_64: u8 = 1;
const REMAINDER_64: u8 = 2;
const QUOTIENT_32: u8 = 3;
const REMAINDER_32: u8 = 4;
/// A [`LiteralSetExpr`] of strings or of integers: the number of literals, then each.
const STRING_SET: u8 = 5;
const INTEGER_SET: u8 = 6;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct FreshetCodec;

fn put_schema(buf: &mut Vec<u8>, schema: &SchemaRef) -> Result<()> {
    let mut bytes = Vec::new();
    StreamWriter::try_new(&mut bytes, schema)?.finish()?;
    put_bytes(buf, &bytes);
    Ok(())
}

fn read_schema(reader: &mut Reader) -> Result<SchemaRef> {
    let bytes = reader.bytes()?;
    let stream = StreamReader::try_new(bytes, None)?;
    Ok(Arc::new(Schema::clone(stream.schema().as_ref())))
}

impl PhysicalExtensionCodec for FreshetCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((&kind, rest)) = buf.split_first() else {
            return plan_err!("an empty Freshet plan node");
        };
        let (spec, rest) = QuerySpec::decode(rest)?;
        let spec = Arc::new(spec);
        let mut reader = Reader(rest);
        match kind {
            EXCHANGE_SEND => {
                let exchange = reader.u64()? as usize;
                let per_worker = reader.u64()? as usize;
                let wire = read_schema(&mut reader)?;
                Ok(Arc::new(ExchangeSendExec::new(
                    spec,
                    exchange,
                    wire,
                    inputs.to_vec(),
                    per_worker,
                )))
            }
            FRAGMENT => {
                let schema = read_schema(&mut reader)?;
                Ok(Arc::new(FragmentExec::new(spec, schema, inputs.to_vec())))
            }
            other => plan_err!("unknown Freshet plan node kind {other}"),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(send) = node.downcast_ref::<ExchangeSendExec>() {
            buf.push(EXCHANGE_SEND);
            send.spec().encode(buf);
            put_u64(buf, send.exchange() as u64);
            put_u64(buf, send.inputs_per_worker() as u64);
            return put_schema(buf, &node.schema());
        }
        if let Some(fragment) = node.downcast_ref::<FragmentExec>() {
            buf.push(FRAGMENT);
            fragment.spec().encode(buf);
            return put_schema(buf, &node.schema());
        }
        plan_err!(
            "{} cannot be sent to a worker: Freshet sends its operators as fragments of the query",
            node.name()
        )
    }

    /// A [`ConstantDivisorExpr`] travels as its kind and divisor, its dividend as its child;
    /// a [`LiteralSetExpr`] as its literals, the expression compared as its child.
    fn try_encode_expr(
        &self,
        node: &Arc<dyn PhysicalExpr>,
        buf: &mut Vec<u8>,
        _ctx: &PhysicalExprEncodeCtx<'_>,
    ) -> Result<()> {
        if let Some(set) = node.downcast_ref::<LiteralSetExpr>() {
            match set.set() {
                LiteralSet::Strings(set) => {
                    buf.push(STRING_SET);
                    put_u64(buf, set.literals().len() as u64);
                    for literal in set.literals() {
                        put_bytes(buf, literal.as_bytes());
                    }
                }
                LiteralSet::Integers(set) => {
                    buf.push(INTEGER_SET);
                    put_u64(buf, set.literals().len() as u64);
                    for &literal in set.literals() {
                        put_u64(buf, literal as u64);
                    }
                }
            }
            return Ok(());
        }
        let Some(divided) = node.downcast_ref::<ConstantDivisorExpr>() else {
            return plan_err!("{node} cannot be sent to a worker");
        };
        let binary = divided.binary();
        let modulo = *binary.op() == Operator::Modulo;
        let Some(literal) = binary.right().downcast_ref::<Literal>() else {
            return plan_err!("{node} has no literal divisor");
        };
        let (kind, divisor) = match (literal.value(), modulo) {
            (ScalarValue::Int64(Some(d)), false) => (QUOTIENT_64, *d),
            (ScalarValue::Int64(Some(d)), true) => (REMAINDER_64, *d),
            (ScalarValue::Int32(Some(d)), false) => (QUOTIENT_32, i64::from(*d)),
            (ScalarValue::Int32(Some(d)), true) => (REMAINDER_32, i64::from(*d)),
            _ => return plan_err!("{node} has no integer divisor"),
        };
        buf.push(kind);
        put_u64(buf, divisor as u64);
        Ok(())
    }

    fn try_decode_expr(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn PhysicalExpr>],
        _ctx: &PhysicalExprDecodeCtx<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let (Some((&kind, rest)), [operand]) = (buf.split_first(), inputs) else {
            return plan_err!("a Freshet expression without its kind or operand");
        };
        let mut reader = Reader(rest);
        let set = match kind {
            STRING_SET => {
                let count = reader.u64()?;
                let literals = (0..count)
                    .map(|_| reader.string())
                    .collect::<Result<Vec<_>>>()?;
                Some(LiteralSet::Strings(StringSet::new(literals)))
            }
            INTEGER_SET => {
                let count = reader.u64()?;
                let literals = (0..count)
                    .map(|_| Ok(reader.u64()? as i64))
                    .collect::<Result<Vec<_>>>()?;
                Some(LiteralSet::Integers(IntegerSet::new(literals)))
            }
            _ => None,
        };
        if let Some(set) = set {
            return Ok(Arc::new(LiteralSetExpr::new(Arc::clone(operand), set)));
        }
        let divisor = reader.u64()? as i64;
        let (op, divisor) = match kind {
            QUOTIENT_64 => (Operator::Divide, ScalarValue::Int64(Some(divisor))),
            REMAINDER_64 => (Operator::Modulo, ScalarValue::Int64(Some(divisor))),
            QUOTIENT_32 => (Operator::Divide, ScalarValue::Int32(Some(divisor as i32))),
            REMAINDER_32 => (Operator::Modulo, ScalarValue::Int32(Some(divisor as i32))),
            other => return plan_err!("unknown Freshet expression kind {other}"),
        };
        let binary = BinaryExpr::new(Arc::clone(operand), op, lit(divisor));
        match ConstantDivisorExpr::of(&binary) {
            Some(divided) => Ok(Arc::new(divided)),
            None => plan_err!("{binary} is not a division by a constant"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    fn spec() -> Arc<QuerySpec> {
        Arc::new(QuerySpec {
            script: "SELECT k, COUNT(*) FROM t GROUP BY k".into(),
            settings: vec!["emit=changes".into()],
            tables: vec!["t=/data/t.parquet,event_time=ts".into()],
            event_time: None,
            watermark: Some("2s".into()),
            strategy: Some("hash".into()),
            streams: None,
            partitions: 6,
            workers: 3,
        })
    }

    fn round_trip(
        node: Arc<dyn ExecutionPlan>,
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Arc<dyn ExecutionPlan> {
        let mut buf = Vec::new();
        FreshetCodec
            .try_encode(
                Arc::clone(&node),
                &mut buf,
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap();
        let decoded = FreshetCodec
            .try_decode(
                &buf,
                inputs,
                &TaskContext::default(),
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap();
        assert_eq!(decoded.schema(), node.schema());
        assert_eq!(
            displayable(decoded.as_ref()).indent(true).to_string(),
            displayable(node.as_ref()).indent(true).to_string()
        );
        decoded
    }

    #[test]
    fn a_division_by_a_constant_travels_as_itself() {
        use datafusion::physical_expr::expressions::col;
        use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
        use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int32, true),
        ]);
        for (column, divisor, op) in [
            ("a", ScalarValue::Int64(Some(10_000)), Operator::Modulo),
            ("a", ScalarValue::Int64(Some(-16)), Operator::Divide),
            ("b", ScalarValue::Int32(Some(7)), Operator::Modulo),
            ("b", ScalarValue::Int32(Some(-3)), Operator::Divide),
        ] {
            let binary = BinaryExpr::new(col(column, &schema).unwrap(), op, lit(divisor));
            let expr: Arc<dyn PhysicalExpr> = Arc::new(ConstantDivisorExpr::of(&binary).unwrap());
            let proto = serialize_physical_expr(&expr, &FreshetCodec).unwrap();
            let decoded =
                parse_physical_expr(&proto, &TaskContext::default(), &schema, &FreshetCodec)
                    .unwrap();
            assert_eq!(&decoded, &expr);
        }
    }

    #[test]
    fn a_literal_set_travels_as_itself() {
        use datafusion::physical_expr::expressions::col;
        use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
        use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
        let schema = Schema::new(vec![
            Field::new("state", DataType::Utf8View, true),
            Field::new("category", DataType::Int64, true),
        ]);
        let strings = ["OR", "ID", "", "a literal longer than twelve bytes"];
        let sets = [
            ("state", LiteralSet::Strings(StringSet::new(strings))),
            (
                "category",
                LiteralSet::Integers(IntegerSet::new([10, -1, i64::MIN])),
            ),
        ];
        for (column, set) in sets {
            let expr: Arc<dyn PhysicalExpr> =
                Arc::new(LiteralSetExpr::new(col(column, &schema).unwrap(), set));
            let proto = serialize_physical_expr(&expr, &FreshetCodec).unwrap();
            let decoded =
                parse_physical_expr(&proto, &TaskContext::default(), &schema, &FreshetCodec)
                    .unwrap();
            assert_eq!(&decoded, &expr);
            assert_eq!(decoded.to_string(), expr.to_string());
        }
    }

    #[test]
    fn freshet_nodes_come_back_from_the_codec() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let below: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        let send = round_trip(
            Arc::new(ExchangeSendExec::new(
                spec(),
                2,
                Arc::clone(&schema),
                vec![Arc::clone(&below)],
                3,
            )),
            &[below],
        );
        assert_eq!(send.children().len(), 1);
        let send = send.downcast_ref::<ExchangeSendExec>().unwrap();
        assert_eq!(
            (send.spec(), send.exchange(), send.inputs_per_worker()),
            (&spec(), 2, 3)
        );
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        let fragment = FragmentExec::new(spec(), schema, vec![Arc::clone(&input)]);
        let fragment = round_trip(Arc::new(fragment), &[input]);
        assert_eq!(fragment.children().len(), 1);
        assert_eq!(
            fragment.downcast_ref::<FragmentExec>().unwrap().spec(),
            &spec()
        );
    }

    #[test]
    fn other_nodes_are_refused_with_a_reason() {
        let schema = Arc::new(Schema::empty());
        let error = FreshetCodec
            .try_encode(
                Arc::new(datafusion::physical_plan::empty::EmptyExec::new(schema)),
                &mut Vec::new(),
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap_err();
        assert!(
            error.to_string().contains("EmptyExec cannot be sent"),
            "{error}"
        );
        assert!(
            FreshetCodec
                .try_decode(
                    &[9],
                    &[],
                    &TaskContext::default(),
                    &DefaultPhysicalProtoConverter {}
                )
                .is_err()
        );
    }

    /// A worker plans the query once more from the bytes of the node it receives: each
    /// operator a query across workers can hold comes back as the coordinator planned it,
    /// with its settings and every kind of source (generators, files, CSV).
    #[tokio::test]
    async fn every_operator_is_planned_again_from_the_codec_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("side.csv");
        std::fs::write(&side, "key,value\n1000,1\n1001,2\n").unwrap();
        let tables = vec![
            "bid=generator:nexmark,events=20000".to_string(),
            "auction=generator:nexmark,events=20000".to_string(),
            format!("side_input={}", side.display()),
        ];
        let windowed = "SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction WINDOW";
        let cases: [(&str, &str, &[&str]); 11] = [
            (
                "WindowAggregateExec",
                &format!("{windowed} TUMBLING (date_time, INTERVAL '10' SECOND)"),
                &[],
            ),
            (
                "window=Hop",
                &format!(
                    "{windowed} HOPPING (date_time, INTERVAL '10' SECOND, INTERVAL '2' SECOND)"
                ),
                &[],
            ),
            (
                "window=Session",
                &format!("{windowed} SESSION (date_time, INTERVAL '10' SECOND)"),
                &[],
            ),
            (
                "emit=changes",
                &format!("{windowed} TUMBLING (date_time, INTERVAL '10' SECOND)"),
                &["emit=changes"],
            ),
            (
                "WindowAggregateExec",
                "SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction",
                &[],
            ),
            (
                "OverWindowExec",
                "SELECT auction, SUM(price) OVER (PARTITION BY auction ORDER BY date_time \
                 ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s FROM bid",
                &[],
            ),
            (
                "TopNExec",
                "SELECT * FROM (SELECT auction, price, ROW_NUMBER() OVER (PARTITION BY \
                 auction ORDER BY price DESC) AS rn FROM bid) WHERE rn <= 3",
                &[],
            ),
            (
                "IntervalJoinExec",
                "SELECT a.id, b.price FROM auction a JOIN bid b ON a.id = b.auction \
                 AND b.date_time BETWEEN a.date_time AND a.expires",
                &[],
            ),
            (
                "LookupJoinExec",
                "SELECT b.auction, s.value FROM bid b JOIN side_input s ON b.auction = s.key",
                &[],
            ),
            (
                "StreamFilterExec",
                "SELECT auction, price FROM bid WHERE price > 1000",
                &[],
            ),
            ("StreamExchangeExec", "SELECT COUNT(*) FROM bid", &[]),
        ];
        for (operator, sql, settings) in cases {
            let spec = QuerySpec {
                script: sql.to_string(),
                settings: settings.iter().map(|s| s.to_string()).collect(),
                tables: tables.clone(),
                event_time: None,
                watermark: Some("4s".into()),
                strategy: None,
                streams: None,
                partitions: 4,
                workers: 2,
            };
            let planned = spec.plan().await.unwrap();
            let schema = planned.plan().schema();
            let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::clone(&schema)));
            let node = FragmentExec::new(Arc::new(spec), schema, vec![Arc::clone(&input)]);
            let decoded = round_trip(Arc::new(node), &[input]);
            let on_worker = decoded
                .downcast_ref::<FragmentExec>()
                .unwrap()
                .spec()
                .plan_on_worker()
                .await
                .unwrap();
            let (here, there) = (planned.explain(), on_worker.explain());
            assert!(here.contains(operator), "{operator} not in {here}");
            assert_eq!(there, here, "{sql}");
        }
    }
}
