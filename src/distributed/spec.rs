//! [`QuerySpec`]: a query as the command line gives it — its SQL and the session it runs in
//! — which every worker plans for itself, as bytes that travel with the plan's fragments.

use datafusion::common::{Result, plan_err};
use freshet_planner::StreamingQuery;

use freshet_planner::StreamingContext;

use super::streams::{StreamSpec, context_settings};
use crate::cli::{PlanArgs, SessionArgs, apply_settings, plan_query, with_absolute_path};

/// What a worker needs to plan the query the coordinator planned: the SQL (session
/// statements and the query), the session's streams and settings — the command line's
/// `--table`s, or the streams of a library user's context — and the number of streams the
/// whole query runs on, spread over `workers` workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuerySpec {
    pub script: String,
    pub settings: Vec<String>,
    pub tables: Vec<String>,
    pub event_time: Option<String>,
    pub watermark: Option<String>,
    pub strategy: Option<String>,
    /// The streams of a [`StreamingContext`], registered in place of `tables` (and of the
    /// command line's default generators).
    pub streams: Option<Vec<StreamSpec>>,
    /// Streams over all workers: the query's partitions, as in one process.
    pub partitions: usize,
    pub workers: usize,
}

impl QuerySpec {
    /// The query `script` with the session of `session`, on `partitions` streams spread
    /// evenly over `workers` workers, with the session's strategy (automatic unless named).
    pub fn new(
        script: String,
        session: &SessionArgs,
        partitions: usize,
        workers: usize,
    ) -> Result<Self> {
        check_spread(partitions, workers)?;
        Ok(Self {
            script,
            settings: session.settings.clone(),
            // Workers started in another directory read the same files.
            tables: session
                .tables
                .iter()
                .map(|table| with_absolute_path(table))
                .collect::<Result<_>>()?,
            event_time: session.event_time.clone(),
            watermark: session.watermark.clone(),
            strategy: session.strategy.clone(),
            streams: None,
            partitions,
            workers,
        })
    }

    /// The query `sql` over the streams and Freshet settings of `ctx`, on its number of
    /// streams spread evenly over `workers` workers. In-memory streams travel with the query
    /// as Arrow IPC, to every worker.
    pub async fn of_context(ctx: &StreamingContext, sql: &str, workers: usize) -> Result<Self> {
        let partitions = ctx.session().state().config().target_partitions();
        check_spread(partitions, workers)?;
        Ok(Self {
            script: sql.to_string(),
            settings: context_settings(ctx),
            tables: Vec::new(),
            event_time: None,
            watermark: None,
            strategy: None,
            streams: Some(StreamSpec::of_context(ctx).await?),
            partitions,
            workers,
        })
    }

    /// The streams each worker runs.
    pub fn streams_per_worker(&self) -> usize {
        self.partitions / self.workers
    }

    /// The query planned as one process would plan it, on all the streams.
    pub async fn plan(&self) -> Result<StreamingQuery> {
        if let Some(streams) = &self.streams {
            let ctx = StreamingContext::with_partitions(self.partitions);
            apply_settings(&ctx, &self.settings_across_workers()).await?;
            for stream in streams {
                stream.register(&ctx).await?;
            }
            return ctx.sql(&self.script).await;
        }
        plan_query(&PlanArgs {
            sql: Some(self.script.clone()),
            file: None,
            session: SessionArgs {
                settings: self.settings_across_workers(),
                tables: self.tables.clone(),
                partitions: Some(self.partitions),
                event_time: self.event_time.clone(),
                watermark: self.watermark.clone(),
                strategy: self.strategy.clone(),
            },
        })
        .await
    }

    /// [`Self::plan`] on a worker, whose errors say where they happened.
    pub async fn plan_on_worker(&self) -> Result<StreamingQuery> {
        self.plan().await.map_err(|error| {
            error.context(
                "a worker could not plan its part of the query (workers must see the query's \
                 files at the same paths)",
            )
        })
    }

    /// The settings, and that the query runs across workers.
    fn settings_across_workers(&self) -> Vec<String> {
        let mut settings = self.settings.clone();
        settings.push("across_workers=true".to_string());
        settings
    }

    pub fn encode(&self, buf: &mut Vec<u8>) {
        put_str(buf, &self.script);
        put_list(buf, &self.settings);
        put_list(buf, &self.tables);
        for option in [&self.event_time, &self.watermark, &self.strategy] {
            put_option(buf, option.as_deref());
        }
        match &self.streams {
            Some(streams) => {
                buf.push(1);
                put_u64(buf, streams.len() as u64);
                for stream in streams {
                    stream.encode(buf);
                }
            }
            None => buf.push(0),
        }
        put_u64(buf, self.partitions as u64);
        put_u64(buf, self.workers as u64);
    }

    /// Reads what [`Self::encode`] wrote at the start of `bytes`; returns the rest too.
    pub fn decode(bytes: &[u8]) -> Result<(Self, &[u8])> {
        let mut reader = Reader(bytes);
        let spec = Self {
            script: reader.string()?,
            settings: reader.list()?,
            tables: reader.list()?,
            event_time: reader.option()?,
            watermark: reader.option()?,
            strategy: reader.option()?,
            streams: match reader.byte()? {
                0 => None,
                _ => {
                    let count = reader.u64()? as usize;
                    Some(
                        (0..count)
                            .map(|_| StreamSpec::decode(&mut reader))
                            .collect::<Result<_>>()?,
                    )
                }
            },
            partitions: reader.u64()? as usize,
            workers: reader.u64()? as usize,
        };
        Ok((spec, reader.0))
    }
}

/// `partitions` streams spread evenly over `workers` workers, or the error that says why not.
fn check_spread(partitions: usize, workers: usize) -> Result<()> {
    if workers == 0 || partitions == 0 || !partitions.is_multiple_of(workers) {
        return plan_err!(
            "{partitions} streams cannot be spread evenly over {workers} workers: give \
             --partitions (or the context's partitions) as a multiple of the number of workers"
        );
    }
    Ok(())
}

pub(super) fn put_u64(buf: &mut Vec<u8>, value: u64) {
    buf.extend_from_slice(&value.to_le_bytes());
}

pub(super) fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

fn put_str(buf: &mut Vec<u8>, value: &str) {
    put_bytes(buf, value.as_bytes());
}

fn put_list(buf: &mut Vec<u8>, values: &[String]) {
    put_u64(buf, values.len() as u64);
    for value in values {
        put_str(buf, value);
    }
}

fn put_option(buf: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => {
            buf.push(1);
            put_str(buf, value);
        }
        None => buf.push(0),
    }
}

/// Reads what the `put_*` functions wrote.
pub(super) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return plan_err!("a Freshet plan fragment's bytes end early");
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    pub fn u64(&mut self) -> Result<u64> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.u64()? as usize;
        self.take(len)
    }

    pub fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn string(&mut self) -> Result<String> {
        match String::from_utf8(self.bytes()?.to_vec()) {
            Ok(value) => Ok(value),
            Err(_) => plan_err!("a Freshet plan fragment holds a string that is not UTF-8"),
        }
    }

    pub fn pairs(&mut self) -> Result<Vec<(String, String)>> {
        let len = self.u64()? as usize;
        (0..len)
            .map(|_| Ok((self.string()?, self.string()?)))
            .collect()
    }

    fn list(&mut self) -> Result<Vec<String>> {
        let len = self.u64()? as usize;
        (0..len).map(|_| self.string()).collect()
    }

    fn option(&mut self) -> Result<Option<String>> {
        match self.take(1)?[0] {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relative path is made absolute where the coordinator runs, so that workers started
    /// in another directory read the same file; a worker that cannot plan says so.
    #[tokio::test]
    async fn paths_are_absolute_and_a_worker_says_when_it_cannot_plan() {
        let session = SessionArgs {
            settings: Vec::new(),
            tables: vec![
                "t=no/such/file.parquet,event_time=ts".into(),
                "g=generator:orders".into(),
            ],
            partitions: None,
            event_time: None,
            watermark: None,
            strategy: None,
        };
        let spec = QuerySpec::new("SELECT * FROM t".into(), &session, 2, 2).unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            spec.tables,
            [
                format!(
                    "t=\"{}\",event_time=ts",
                    here.join("no/such/file.parquet").display()
                ),
                "g=generator:orders".to_string()
            ]
        );
        let Err(error) = spec.plan_on_worker().await else {
            panic!("a missing file planned");
        };
        let error = error.to_string();
        assert!(
            error.contains("a worker could not plan its part"),
            "{error}"
        );
        assert!(error.contains("not found"), "{error}");
    }

    #[test]
    fn a_spec_comes_back_from_its_bytes() {
        let spec = QuerySpec {
            script: "SET a = 'b'; SELECT 1".into(),
            settings: vec!["emit=changes".into()],
            tables: vec![
                "t=/x/y.parquet,event_time=ts".into(),
                "u=generator:orders".into(),
            ],
            event_time: None,
            watermark: Some("4s".into()),
            strategy: Some("hash".into()),
            streams: None,
            partitions: 4,
            workers: 2,
        };
        let mut buf = Vec::new();
        spec.encode(&mut buf);
        buf.extend_from_slice(b"rest");
        let (decoded, rest) = QuerySpec::decode(&buf).unwrap();
        assert_eq!(decoded, spec);
        assert_eq!(rest, b"rest");
        assert!(QuerySpec::decode(&buf[..buf.len() - 10]).is_err());
    }
}
