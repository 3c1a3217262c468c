//! [`StreamSpec`]: a stream of a [`StreamingContext`] as a worker registers it again — files
//! by their location, a generator by its parameters, in-memory batches as Arrow IPC — with
//! the options it was registered with; and the context's Freshet settings as `KEY=VALUE`
//! text. With them a query of a library user's context travels to the workers as a query of
//! the command line does.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::config::ExtensionOptions;
use datafusion::common::{Result, plan_err};
use freshet_engine::{GeneratorKind, GeneratorSpec, ReplaySource, StreamOptions, StreamTable};
use freshet_planner::{FreshetOptions, StreamingContext};

use super::spec::{Reader, put_bytes, put_u64};

/// One stream of a context; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    pub source: StreamSource,
    /// [`StreamOptions::to_pairs`] of the options it was registered with.
    pub options: Vec<(String, String)>,
}

/// Where a [`StreamSpec`]'s records come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamSource {
    /// Files at this location (a path the workers see too).
    Files(String),
    /// A generator of this kind (`market_data`, `nexmark.bid`, …) with these parameters.
    Generator {
        kind: String,
        parameters: Vec<(String, String)>,
    },
    /// In-memory batches, one Arrow IPC stream per source partition (one for a replay
    /// dealt to the partitions by Freshet).
    Batches {
        partitions: Vec<Vec<u8>>,
        dealt: bool,
    },
}

impl StreamSpec {
    /// The streams of `ctx`'s default schema; a table that is not a Freshet stream, or a
    /// stream of batches the application hands over, cannot be sent.
    pub async fn of_context(ctx: &StreamingContext) -> Result<Vec<Self>> {
        let mut streams = Vec::new();
        for (name, table) in ctx.tables().await? {
            let Some(stream) = table.downcast_ref::<StreamTable>() else {
                return plan_err!(
                    "table '{name}' is not a Freshet stream, so workers cannot read it: register \
                     it with register_files, register_generator or register_batches"
                );
            };
            streams.push(Self::of_stream(&name, stream)?);
        }
        Ok(streams)
    }

    fn of_stream(name: &str, stream: &StreamTable) -> Result<Self> {
        let (source, options) = stream.registration();
        let source = match source {
            // Workers started in another directory read the same files.
            ReplaySource::Files { location, .. } if location.contains("://") => {
                StreamSource::Files(location.clone())
            }
            ReplaySource::Files { location, .. } => {
                StreamSource::Files(std::path::absolute(location)?.display().to_string())
            }
            ReplaySource::Generator(spec) => StreamSource::Generator {
                kind: spec.kind.to_string(),
                parameters: owned(spec.to_pairs()),
            },
            ReplaySource::Batches { schema, batches } => StreamSource::Batches {
                partitions: vec![ipc_bytes(schema, batches)?],
                dealt: true,
            },
            ReplaySource::Partitioned { schema, partitions } => StreamSource::Batches {
                partitions: partitions
                    .iter()
                    .map(|batches| ipc_bytes(schema, batches))
                    .collect::<Result<_>>()?,
                dealt: false,
            },
            ReplaySource::Live(_) => {
                return plan_err!(
                    "stream '{name}' is read from batches the application hands over, which \
                     workers cannot read: register its data as files or in-memory batches"
                );
            }
        };
        Ok(Self {
            name: name.to_string(),
            source,
            options: owned(options.to_pairs()),
        })
    }

    /// Registers the stream on `ctx` as it was registered where it was described.
    pub async fn register(&self, ctx: &StreamingContext) -> Result<()> {
        let mut options = StreamOptions::default();
        for (key, value) in &self.options {
            if !options.set(key, value)? {
                return plan_err!("stream '{}': unknown option '{key}'", self.name);
            }
        }
        match &self.source {
            StreamSource::Files(location) => {
                ctx.register_files(&self.name, location, None, options)
                    .await
            }
            StreamSource::Generator { kind, parameters } => {
                let mut spec = match kind.parse::<GeneratorKind>()? {
                    GeneratorKind::Nexmark(table) => GeneratorSpec::nexmark(table, None),
                    kind => GeneratorSpec::new(kind, None),
                };
                for (key, value) in parameters {
                    if !spec.set(key, value)? {
                        return plan_err!("stream '{}': unknown parameter '{key}'", self.name);
                    }
                }
                ctx.register_generator(&self.name, spec, options)
            }
            StreamSource::Batches { partitions, dealt } => {
                let mut read = partitions
                    .iter()
                    .map(|bytes| from_ipc_bytes(bytes))
                    .collect::<Result<Vec<_>>>()?;
                let Some((schema, _)) = read.first() else {
                    return plan_err!("stream '{}' has no partitions", self.name);
                };
                let schema = Arc::clone(schema);
                let source = match dealt {
                    true => ReplaySource::Batches {
                        schema,
                        batches: read.remove(0).1,
                    },
                    false => ReplaySource::Partitioned {
                        schema,
                        partitions: read.into_iter().map(|(_, batches)| batches).collect(),
                    },
                };
                ctx.register_stream(&self.name, source, options)
            }
        }
    }

    pub(super) fn encode(&self, buf: &mut Vec<u8>) {
        put_bytes(buf, self.name.as_bytes());
        put_pairs(buf, &self.options);
        match &self.source {
            StreamSource::Files(location) => {
                buf.push(0);
                put_bytes(buf, location.as_bytes());
            }
            StreamSource::Generator { kind, parameters } => {
                buf.push(1);
                put_bytes(buf, kind.as_bytes());
                put_pairs(buf, parameters);
            }
            StreamSource::Batches { partitions, dealt } => {
                buf.push(2 + u8::from(*dealt));
                put_u64(buf, partitions.len() as u64);
                for partition in partitions {
                    put_bytes(buf, partition);
                }
            }
        }
    }

    pub(super) fn decode(reader: &mut Reader) -> Result<Self> {
        let name = reader.string()?;
        let options = reader.pairs()?;
        let source = match reader.byte()? {
            0 => StreamSource::Files(reader.string()?),
            1 => StreamSource::Generator {
                kind: reader.string()?,
                parameters: reader.pairs()?,
            },
            kind @ (2 | 3) => {
                let count = reader.u64()? as usize;
                StreamSource::Batches {
                    partitions: (0..count)
                        .map(|_| reader.bytes().map(<[u8]>::to_vec))
                        .collect::<Result<_>>()?,
                    dealt: kind == 3,
                }
            }
            other => return plan_err!("a stream description of unknown kind {other}"),
        };
        Ok(Self {
            name,
            source,
            options,
        })
    }
}

/// The context's Freshet settings that differ from the defaults, as `KEY=VALUE`.
pub fn context_settings(ctx: &StreamingContext) -> Vec<String> {
    let state = ctx.session().state();
    let Some(options) = state.config().options().extensions.get::<FreshetOptions>() else {
        return Vec::new();
    };
    let defaults = FreshetOptions::default().entries();
    options
        .entries()
        .into_iter()
        .filter(|entry| {
            entry.value.is_some()
                && !defaults
                    .iter()
                    .any(|default| default.key == entry.key && default.value == entry.value)
        })
        .map(|entry| format!("{}={}", entry.key, entry.value.unwrap_or_default()))
        .collect()
}

fn owned(pairs: Vec<(&'static str, String)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
}

fn put_pairs(buf: &mut Vec<u8>, pairs: &[(String, String)]) {
    put_u64(buf, pairs.len() as u64);
    for (key, value) in pairs {
        put_bytes(buf, key.as_bytes());
        put_bytes(buf, value.as_bytes());
    }
}

fn ipc_bytes(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    Ok(writer.into_inner()?)
}

fn from_ipc_bytes(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((schema, batches))
}
