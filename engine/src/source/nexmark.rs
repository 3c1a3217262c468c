//! The Nexmark auction streams `person`, `auction` and `bid` (`generator:nexmark`).
//!
//! Nexmark models an online auction site as one sequence of events: event `n` is a new person,
//! a new auction or a bid, by `n % 50` (0: person, 1–3: auction, 4–49: bid). The three tables
//! are the three kinds of event, and row `j` of a table is a fixed event number (person `j` is
//! event `50 j`, auction `j` is event `50 (j / 3) + 1 + j % 3`, bid `j` is event
//! `50 (j / 46) + 4 + j % 46`). Every value of an event is a function of the seed and the
//! event number alone — each event draws from its own counter-based random stream — so each
//! table, and each partition of a table, is generated on its own and still agrees with the
//! others on ids and times, at any split.
//!
//! The values follow the standard generator (Apache Beam's and the nexmark/nexmark
//! repository's `generator/model/*Generator.java`):
//! - ids are dense from 1000; a person's id is its number among people, an auction's among
//!   auctions;
//! - an auction's seller is, 3 times in 4, the first of the last 100 people (a hot seller),
//!   else one of the last 1 000 people (or up to 10 not yet created);
//! - a bid's auction is, 1 time in 2, the first of the last 100 auctions (a hot auction), else
//!   one of the last 100 (or up to 10 not yet created); its bidder is, 3 times in 4, the second
//!   of the last 100 people, else one of the last 1 000;
//! - prices are `round(10^(6u) * 100)`, a reserve is the initial bid plus another price, the
//!   category is 10–14, an auction expires `1 + U[0, 2h)` ms after it starts, `h` being the time
//!   until 100 more auctions exist;
//! - half the bids come from one of four hot channels (Google, Facebook, Baidu, Apple) with
//!   that channel's url, the rest from `channel-k` of 10 000, 9 in 10 of whose urls carry
//!   `&channel_id=`;
//! - `extra` pads each row to the standard average sizes (person 200 B, auction 500 B,
//!   bid 100 B) with a slice of a fixed random text.
//!
//! Event time is a base time (2015-07-15T00:00:00Z, Beam's) plus `n` times the inter-event
//! delay (10 µs by default: 100 000 events per second of event time), moved back by up to
//! `disorder_ms` when asked. Where Flink's generator differs, on purpose: the bidder id's
//! offset of 1000 is added once (Flink adds it twice, so no bidder is a person: nexmark
//! issue 30), and nothing depends on an unseeded random source.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Array, StringViewArray, StringViewBuilder, TimestampMillisecondArray,
};
use datafusion::arrow::buffer::{Buffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{Result, internal_datafusion_err, plan_err};

use super::generator::splitmix64;

/// Events in one round of the 1 : 3 : 46 mix.
const ROUND: u64 = 50;
const PERSONS_PER_ROUND: u64 = 1;
const AUCTIONS_PER_ROUND: u64 = 3;
const BIDS_PER_ROUND: u64 = 46;
/// Ids of people and auctions start here; categories at 10.
const FIRST_ID: i64 = 1000;
const FIRST_CATEGORY: i64 = 10;
const CATEGORIES: u64 = 5;
/// People and auctions still active, and the ids allowed ahead of the last one created.
const ACTIVE_PEOPLE: u64 = 1000;
const IN_FLIGHT_AUCTIONS: u64 = 100;
const ID_LEAD: u64 = 10;
/// One in `HOT_*_RATIO` ids is drawn at random; the others are the hot one.
const HOT_SELLERS_RATIO: u64 = 4;
const HOT_AUCTIONS_RATIO: u64 = 2;
const HOT_BIDDERS_RATIO: u64 = 4;
/// Hot people and auctions are the first of each block of this many.
const HOT_BLOCK: u64 = 100;
const CHANNELS: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// Average row sizes in bytes, reached by padding `extra`.
const PERSON_BYTES: usize = 200;
const AUCTION_BYTES: usize = 500;
const BID_BYTES: usize = 100;
/// The random text `extra` is sliced from.
const EXTRA_TEXT_BYTES: usize = 64 * 1024;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// Beam's base time of the event sequence: 2015-07-15T00:00:00Z.
pub const NEXMARK_BASE_TIME_MS: i64 = 1_436_918_400_000;
/// Events per second of event time unless `event_rate` says otherwise.
pub const NEXMARK_EVENT_RATE: u64 = 100_000;

/// One of the three Nexmark streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NexmarkTable {
    Person,
    Auction,
    Bid,
}

impl NexmarkTable {
    pub const ALL: [NexmarkTable; 3] = [Self::Person, Self::Auction, Self::Bid];

    pub fn name(self) -> &'static str {
        match self {
            Self::Person => "person",
            Self::Auction => "auction",
            Self::Bid => "bid",
        }
    }

    /// The table named `name`, if it is one of the three.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The table's rows in one round of 50 events, and the offset of its first in the round.
    fn per_round(self) -> (u64, u64) {
        match self {
            Self::Person => (PERSONS_PER_ROUND, 0),
            Self::Auction => (AUCTIONS_PER_ROUND, PERSONS_PER_ROUND),
            Self::Bid => (BIDS_PER_ROUND, PERSONS_PER_ROUND + AUCTIONS_PER_ROUND),
        }
    }

    /// The event number of the table's row `row`.
    pub fn event_of_row(self, row: u64) -> u64 {
        let (per_round, offset) = self.per_round();
        row / per_round * ROUND + offset + row % per_round
    }

    /// How many of the first `events` events are rows of this table.
    pub fn rows_among(self, events: u64) -> u64 {
        let (per_round, offset) = self.per_round();
        events / ROUND * per_round + (events % ROUND).saturating_sub(offset).min(per_round)
    }

    /// The table's share of the events (1/50, 3/50 or 46/50).
    pub fn share(self) -> f64 {
        self.per_round().0 as f64 / ROUND as f64
    }

    pub fn schema(self) -> SchemaRef {
        let time = || DataType::Timestamp(TimeUnit::Millisecond, None);
        let field = |name: &str, data_type: DataType| Field::new(name, data_type, false);
        let fields = match self {
            Self::Person => vec![
                field("id", DataType::Int64),
                field("name", DataType::Utf8View),
                field("email_address", DataType::Utf8View),
                field("credit_card", DataType::Utf8View),
                field("city", DataType::Utf8View),
                field("state", DataType::Utf8View),
                field("date_time", time()),
                field("extra", DataType::Utf8View),
            ],
            Self::Auction => vec![
                field("id", DataType::Int64),
                field("item_name", DataType::Utf8View),
                field("description", DataType::Utf8View),
                field("initial_bid", DataType::Int64),
                field("reserve", DataType::Int64),
                field("date_time", time()),
                field("expires", time()),
                field("seller", DataType::Int64),
                field("category", DataType::Int64),
                field("extra", DataType::Utf8View),
            ],
            Self::Bid => vec![
                field("auction", DataType::Int64),
                field("bidder", DataType::Int64),
                field("price", DataType::Int64),
                field("channel", DataType::Utf8View),
                field("url", DataType::Utf8View),
                field("date_time", time()),
                field("extra", DataType::Utf8View),
            ],
        };
        Arc::new(Schema::new(fields))
    }
}

impl std::fmt::Display for NexmarkTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters every table of one event sequence shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NexmarkClock {
    pub seed: u64,
    /// Event time of event 0.
    pub start_ms: i64,
    /// Events per second of event time.
    pub event_rate: u64,
    /// The largest amount an event's time moves back.
    pub disorder_ms: i64,
}

impl NexmarkClock {
    /// Event `n`'s time in event order, before any disorder.
    fn in_order_ms(&self, n: u64) -> i64 {
        let since_start = match n.checked_mul(1000) {
            Some(ms_times_rate) => ms_times_rate / self.event_rate,
            None => (n as u128 * 1000 / self.event_rate as u128) as u64,
        };
        // Saturating: a start near the end of time stays there rather than wrapping around.
        self.start_ms
            .saturating_add(since_start.min(i64::MAX as u64) as i64)
    }

    /// Event `n`'s time.
    pub fn time_ms(&self, n: u64) -> i64 {
        let in_order = self.in_order_ms(n);
        if self.disorder_ms == 0 {
            return in_order;
        }
        let jitter = splitmix64(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17))
            % (self.disorder_ms as u64 + 1);
        in_order - jitter as i64
    }
}

/// The strings a sequence draws from, made once per seed: the channels' names (the four hot
/// ones, then `channel-0` …), their urls, and the text `extra` is sliced from. All ASCII, kept
/// as Arrow buffers that the string columns view without copying.
#[derive(Debug)]
pub struct NexmarkStrings {
    channel_names: SharedText,
    channel_urls: SharedText,
    extra_text: Buffer,
}

impl NexmarkStrings {
    pub fn new(seed: u64) -> Self {
        // Streams numbered past any event's, so that they never meet one.
        let mut random = EventRandom::new(seed, u64::MAX);
        let mut names: Vec<String> = HOT_CHANNELS.iter().map(|c| c.to_string()).collect();
        let mut urls: Vec<String> = HOT_CHANNELS.iter().map(|_| base_url(&mut random)).collect();
        for channel in 0..CHANNELS {
            let mut url = base_url(&mut random);
            if random.below(10) > 0 {
                // As Flink's: Math.abs(Integer.reverse(i)).
                let id = (channel as u32).reverse_bits() as i32;
                url.push_str(&format!("&channel_id={}", id.wrapping_abs()));
            }
            names.push(format!("channel-{channel}"));
            urls.push(url);
        }
        let mut random = EventRandom::new(seed, u64::MAX - 1);
        let extra_text: Vec<u8> = (0..EXTRA_TEXT_BYTES)
            .map(|_| b'a' + random.below(26) as u8)
            .collect();
        Self {
            channel_names: SharedText::new(&names),
            channel_urls: SharedText::new(&urls),
            extra_text: Buffer::from_vec(extra_text),
        }
    }

    /// Where in the text a slice making `current` bytes `average` on average lies (empty past
    /// it): offset and length.
    fn extra(&self, random: &mut EventRandom, current: usize, average: usize) -> (u32, u32) {
        let Some(wanted) = average.checked_sub(current) else {
            return (0, 0);
        };
        let delta = (wanted as f64 * 0.2).round() as usize;
        let size = wanted - delta
            + match delta {
                0 => 0,
                _ => random.below(2 * delta as u64) as usize,
            };
        let offset = random.below((self.extra_text.len() - size) as u64);
        (offset as u32, size as u32)
    }
}

/// Strings laid end to end in one buffer, with the view of each into it (as block 0).
#[derive(Debug)]
struct SharedText {
    bytes: Buffer,
    views: Vec<u128>,
}

impl SharedText {
    fn new(strings: &[String]) -> Self {
        let mut bytes = Vec::new();
        let spans: Vec<(u32, u32)> = strings
            .iter()
            .map(|s| {
                let span = (bytes.len() as u32, s.len() as u32);
                bytes.extend_from_slice(s.as_bytes());
                span
            })
            .collect();
        let bytes = Buffer::from_vec(bytes);
        let views = spans
            .into_iter()
            .map(|(offset, len)| ascii_view(&bytes, 0, offset, len))
            .collect();
        Self { bytes, views }
    }
}

/// The view of `len` bytes at `offset` of `block` (block number `index`): Arrow's view
/// layout (the length, then up to 12 bytes inline or a 4-byte prefix, the block and the
/// offset), made here because arrow's `make_view` is not inlined and took a fifth of a bid's
/// time.
#[inline]
fn ascii_view(block: &Buffer, index: u32, offset: u32, len: u32) -> u128 {
    let data = &block[offset as usize..(offset + len) as usize];
    if len <= 12 {
        let mut inline = [0u8; 16];
        inline[..4].copy_from_slice(&len.to_le_bytes());
        inline[4..4 + data.len()].copy_from_slice(data);
        u128::from_le_bytes(inline)
    } else {
        let prefix = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        len as u128 | (prefix as u128) << 32 | (index as u128) << 64 | (offset as u128) << 96
    }
}

/// A Utf8View column whose rows view slices of ASCII-only buffers: nothing is copied.
struct AsciiViews {
    views: Vec<u128>,
    blocks: Vec<Buffer>,
}

impl AsciiViews {
    fn new(blocks: Vec<Buffer>, capacity: usize) -> Self {
        Self {
            views: Vec::with_capacity(capacity),
            blocks,
        }
    }

    /// Views `len` bytes at `offset` of block `block`.
    #[inline]
    fn push(&mut self, block: usize, offset: u32, len: u32) {
        let view = ascii_view(&self.blocks[block], block as u32, offset, len);
        self.views.push(view);
    }

    /// Adds a view made beforehand (of block 0).
    #[inline]
    fn push_view(&mut self, view: u128) {
        self.views.push(view);
    }

    fn finish(self) -> StringViewArray {
        // SAFETY: every view was made by `ascii_view` from an in-bounds slice of its block
        // (it slices the block, which checks the bounds), and the blocks hold ASCII only, so
        // every slice is valid UTF-8. Validating each row again would cost more than making it.
        unsafe { StringViewArray::new_unchecked(ScalarBuffer::from(self.views), self.blocks, None) }
    }
}

/// Rows `rows` of `table` as one batch, of the columns `columns` (indices into the table's
/// schema, in that order) or of all of them. A bid's values are the same whichever columns
/// are asked for: the random draws of every value are made, only the work of building an
/// unwanted column (a price's exponential, the padding text) is left out.
pub fn nexmark_batch(
    table: NexmarkTable,
    clock: &NexmarkClock,
    strings: &NexmarkStrings,
    rows: impl Iterator<Item = u64>,
    columns: Option<&[usize]>,
) -> Result<RecordBatch> {
    let schema = table.schema();
    let events = rows.map(|row| table.event_of_row(row));
    let all = match table {
        NexmarkTable::Person => people(clock, strings, events),
        NexmarkTable::Auction => auctions(clock, strings, events),
        NexmarkTable::Bid => bids(clock, strings, events, columns),
    };
    let Some(columns) = columns else {
        let all: Vec<ArrayRef> = all.into_iter().flatten().collect();
        return Ok(RecordBatch::try_new(schema, all)?);
    };
    let projected = Arc::new(schema.project(columns)?);
    // The event count, for a batch of no columns (`COUNT(*)` reads none).
    let rows = all.iter().flatten().next().map_or(0, |column| column.len());
    let chosen: Vec<ArrayRef> = columns
        .iter()
        .map(|&index| {
            all.get(index)
                .cloned()
                .flatten()
                .ok_or_else(|| internal_datafusion_err!("Nexmark column {index} was not built"))
        })
        .collect::<Result<_>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(
        projected, chosen, &options,
    )?)
}

fn people(
    clock: &NexmarkClock,
    strings: &NexmarkStrings,
    events: impl Iterator<Item = u64>,
) -> Vec<Option<ArrayRef>> {
    let (mut ids, mut times) = (Vec::new(), Vec::new());
    let mut names = StringViewBuilder::new();
    let mut emails = StringViewBuilder::new();
    let mut cards = StringViewBuilder::new();
    let mut cities = StringViewBuilder::new();
    let mut states = StringViewBuilder::new();
    let mut extras = AsciiViews::new(vec![strings.extra_text.clone()], 0);
    let mut text = String::new();
    for n in events {
        let mut random = EventRandom::new(clock.seed, n);
        ids.push(last_person(n) as i64 + FIRST_ID);
        let name_start = text.len();
        text.push_str(FIRST_NAMES[random.below(FIRST_NAMES.len() as u64) as usize]);
        text.push(' ');
        text.push_str(LAST_NAMES[random.below(LAST_NAMES.len() as u64) as usize]);
        names.append_value(&text[name_start..]);
        let email_start = text.len();
        push_random_string(&mut random, &mut text, 7, ' ');
        text.push('@');
        push_random_string(&mut random, &mut text, 5, ' ');
        text.push_str(".com");
        emails.append_value(&text[email_start..]);
        let card_start = text.len();
        for group in 0..4 {
            if group > 0 {
                text.push(' ');
            }
            text.push_str(&format!("{:04}", random.below(10_000)));
        }
        cards.append_value(&text[card_start..]);
        let city = US_CITIES[random.below(US_CITIES.len() as u64) as usize];
        let state = US_STATES[random.below(US_STATES.len() as u64) as usize];
        cities.append_value(city);
        states.append_value(state);
        let current = 8 + (text.len() - name_start) + city.len() + state.len();
        let (offset, len) = strings.extra(&mut random, current, PERSON_BYTES);
        extras.push(0, offset, len);
        times.push(clock.time_ms(n));
        text.clear();
    }
    vec![
        Some(Arc::new(Int64Array::from(ids))),
        Some(Arc::new(names.finish())),
        Some(Arc::new(emails.finish())),
        Some(Arc::new(cards.finish())),
        Some(Arc::new(cities.finish())),
        Some(Arc::new(states.finish())),
        Some(Arc::new(TimestampMillisecondArray::from(times))),
        Some(Arc::new(extras.finish())),
    ]
}

fn auctions(
    clock: &NexmarkClock,
    strings: &NexmarkStrings,
    events: impl Iterator<Item = u64>,
) -> Vec<Option<ArrayRef>> {
    let (mut ids, mut initial_bids, mut reserves) = (Vec::new(), Vec::new(), Vec::new());
    let (mut times, mut expires, mut sellers, mut categories) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut item_names = StringViewBuilder::new();
    let mut descriptions = StringViewBuilder::new();
    let mut extras = AsciiViews::new(vec![strings.extra_text.clone()], 0);
    let mut text = String::new();
    // Events until 100 more auctions exist: an auction's length is on average that long.
    let horizon_events = IN_FLIGHT_AUCTIONS * ROUND / AUCTIONS_PER_ROUND;
    for n in events {
        let mut random = EventRandom::new(clock.seed, n);
        let time = clock.time_ms(n);
        ids.push(last_auction(n) + FIRST_ID);
        let seller = if random.below(HOT_SELLERS_RATIO) > 0 {
            last_person(n) / HOT_BLOCK * HOT_BLOCK
        } else {
            random_person(n, &mut random)
        };
        sellers.push(seller as i64 + FIRST_ID);
        categories.push(FIRST_CATEGORY + random.below(CATEGORIES) as i64);
        let initial_bid = price(&mut random);
        initial_bids.push(initial_bid);
        let horizon = clock.in_order_ms(n + horizon_events) - time;
        expires.push(time + 1 + random.below((horizon * 2).max(1) as u64) as i64);
        push_random_string(&mut random, &mut text, 20, ' ');
        item_names.append_value(&text);
        let name_len = text.len();
        text.clear();
        push_random_string(&mut random, &mut text, 100, ' ');
        descriptions.append_value(&text);
        let current = 8 + name_len + text.len() + 40;
        text.clear();
        reserves.push(initial_bid + price(&mut random));
        let (offset, len) = strings.extra(&mut random, current, AUCTION_BYTES);
        extras.push(0, offset, len);
        times.push(time);
    }
    vec![
        Some(Arc::new(Int64Array::from(ids))),
        Some(Arc::new(item_names.finish())),
        Some(Arc::new(descriptions.finish())),
        Some(Arc::new(Int64Array::from(initial_bids))),
        Some(Arc::new(Int64Array::from(reserves))),
        Some(Arc::new(TimestampMillisecondArray::from(times))),
        Some(Arc::new(TimestampMillisecondArray::from(expires))),
        Some(Arc::new(Int64Array::from(sellers))),
        Some(Arc::new(Int64Array::from(categories))),
        Some(Arc::new(extras.finish())),
    ]
}

fn bids(
    clock: &NexmarkClock,
    strings: &NexmarkStrings,
    events: impl Iterator<Item = u64>,
    columns: Option<&[usize]>,
) -> Vec<Option<ArrayRef>> {
    let wanted = |index: usize| columns.is_none_or(|columns| columns.contains(&index));
    let (want_price, want_channel, want_url, want_extra) =
        (wanted(2), wanted(3), wanted(4), wanted(6));
    let (lower, _) = events.size_hint();
    let mut auctions = Vec::with_capacity(lower);
    let mut bidders = Vec::with_capacity(lower);
    let mut prices = Vec::with_capacity(if want_price { lower } else { 0 });
    let mut times = Vec::with_capacity(lower);
    let mut channels = AsciiViews::new(vec![strings.channel_names.bytes.clone()], lower);
    let mut urls = AsciiViews::new(vec![strings.channel_urls.bytes.clone()], lower);
    let mut extras = AsciiViews::new(vec![strings.extra_text.clone()], lower);
    for n in events {
        let mut random = EventRandom::new(clock.seed, n);
        let auction = if random.below(HOT_AUCTIONS_RATIO) > 0 {
            last_auction(n) as u64 / HOT_BLOCK * HOT_BLOCK
        } else {
            random_auction(n, &mut random)
        };
        auctions.push(auction as i64 + FIRST_ID);
        let bidder = if random.below(HOT_BIDDERS_RATIO) > 0 {
            last_person(n) / HOT_BLOCK * HOT_BLOCK + 1
        } else {
            random_person(n, &mut random)
        };
        bidders.push(bidder as i64 + FIRST_ID);
        // The draw is made either way, so that the draws after it are the same.
        let price_draw = random.unit();
        if want_price {
            prices.push(price_of(price_draw));
        }
        // The hot channels come first among the channels.
        let channel = if random.below(2) > 0 {
            random.below(HOT_CHANNELS.len() as u64) as usize
        } else {
            HOT_CHANNELS.len() + random.below(CHANNELS) as usize
        };
        if want_channel {
            channels.push_view(strings.channel_names.views[channel]);
        }
        if want_url {
            urls.push_view(strings.channel_urls.views[channel]);
        }
        // The padding's draws come last: left out with the padding.
        if want_extra {
            let (offset, len) = strings.extra(&mut random, 32, BID_BYTES);
            extras.push(0, offset, len);
        }
        times.push(clock.time_ms(n));
    }
    vec![
        Some(Arc::new(Int64Array::from(auctions))),
        Some(Arc::new(Int64Array::from(bidders))),
        want_price.then(|| Arc::new(Int64Array::from(prices)) as ArrayRef),
        want_channel.then(|| Arc::new(channels.finish()) as ArrayRef),
        want_url.then(|| Arc::new(urls.finish()) as ArrayRef),
        Some(Arc::new(TimestampMillisecondArray::from(times))),
        want_extra.then(|| Arc::new(extras.finish()) as ArrayRef),
    ]
}

/// The newest person at event `n` (base 0): event `n`'s own if it is a person.
fn last_person(n: u64) -> u64 {
    n / ROUND * PERSONS_PER_ROUND
}

/// The newest auction at event `n` (base 0; -1 before the first).
fn last_auction(n: u64) -> i64 {
    let (round, offset) = ((n / ROUND) as i64, n % ROUND);
    let first = PERSONS_PER_ROUND;
    let last_in_round = AUCTIONS_PER_ROUND as i64 - 1;
    match offset {
        o if o < first => (round - 1) * AUCTIONS_PER_ROUND as i64 + last_in_round,
        o if o < first + AUCTIONS_PER_ROUND => {
            round * AUCTIONS_PER_ROUND as i64 + (o - first) as i64
        }
        _ => round * AUCTIONS_PER_ROUND as i64 + last_in_round,
    }
}

/// One of the active people at event `n`, or one of the next few not yet created.
fn random_person(n: u64, random: &mut EventRandom) -> u64 {
    let people = last_person(n) + 1;
    let active = people.min(ACTIVE_PEOPLE);
    people - active + random.below(active + ID_LEAD)
}

/// One of the auctions in flight at event `n`, or one of the next few not yet created.
fn random_auction(n: u64, random: &mut EventRandom) -> u64 {
    let last = last_auction(n).max(0) as u64;
    let first = last.saturating_sub(IN_FLIGHT_AUCTIONS);
    first + random.below(last - first + 1 + ID_LEAD)
}

/// `round(10^(6u) * 100)`, rounding as Java's `Math.round` (half up; the value is positive,
/// so truncating `x + 0.5` is its floor).
fn price(random: &mut EventRandom) -> i64 {
    price_of(random.unit())
}

/// The price for the uniform draw `unit`: `round(10^(6 * unit) * 100)`.
fn price_of(unit: f64) -> i64 {
    ((unit * 6.0 * std::f64::consts::LN_10).exp() * 100.0 + 0.5) as i64
}

/// `https://www.nexmark.com/xxx/xxx/xxx/item.htm?query=1` with three random words.
fn base_url(random: &mut EventRandom) -> String {
    let mut url = String::from("https://www.nexmark.com/");
    for _ in 0..3 {
        push_random_string(random, &mut url, 5, '_');
        url.push('/');
    }
    url.push_str("item.htm?query=1");
    url
}

/// Appends 3 to `max_len - 1` random letters (one in 13 being `special`), trimmed of spaces.
fn push_random_string(random: &mut EventRandom, out: &mut String, max_len: u64, special: char) {
    let len = 3 + random.below(max_len - 3);
    let start = out.len();
    let mut bits = 0u64;
    for at in 0..len {
        // Two characters from each draw: 16 bits pick special or not, 16 bits the letter.
        if at % 2 == 0 {
            bits = random.next_u64();
        } else {
            bits >>= 32;
        }
        if (bits & 0xFFFF) * 13 < 0x1_0000 {
            out.push(special);
        } else {
            out.push((b'a' + ((((bits >> 16) & 0xFFFF) * 26) >> 16) as u8) as char);
        }
    }
    let trimmed = out[start..].trim();
    if trimmed.len() != len as usize {
        let trimmed = trimmed.to_string();
        out.truncate(start);
        out.push_str(&trimmed);
    }
}

/// A counter-based random stream: one per (seed, event), independent of every other.
struct EventRandom(u64);

impl EventRandom {
    fn new(seed: u64, event: u64) -> Self {
        Self(splitmix64(seed ^ splitmix64(event)))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix64(self.0)
    }

    /// Uniform in `[0, n)`, `n > 0`.
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Rows of Nexmark q13's bounded side input.
pub const SIDE_INPUT_ROWS: i64 = 10_000;

/// Nexmark q13's bounded table `side_input(key, value)`: rows `(i, i)` for `i` below 10 000,
/// as the standard `SideInputGenerator` writes them.
pub fn nexmark_side_input() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
    ]));
    let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..SIDE_INPUT_ROWS));
    RecordBatch::try_new(schema, vec![Arc::clone(&column), column])
        .unwrap_or_else(|_| unreachable!("two Int64 columns of equal length"))
}

/// Parses `events`: a count or `unbounded`.
pub fn parse_events(value: &str) -> Result<Option<u64>> {
    if value == "unbounded" {
        return Ok(None);
    }
    match crate::options::parse_count("events", value)? {
        0 => plan_err!("option events={value}: must be at least 1"),
        n => Ok(Some(n as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{Int64Type, TimestampMillisecondType};

    fn clock() -> NexmarkClock {
        NexmarkClock {
            seed: 7,
            start_ms: NEXMARK_BASE_TIME_MS,
            event_rate: NEXMARK_EVENT_RATE,
            disorder_ms: 0,
        }
    }

    #[test]
    fn rows_map_to_the_events_of_their_kind() {
        for table in NexmarkTable::ALL {
            let mut row = 0;
            for n in 0..1_000u64 {
                let kind = match n % 50 {
                    0 => NexmarkTable::Person,
                    1..=3 => NexmarkTable::Auction,
                    _ => NexmarkTable::Bid,
                };
                assert_eq!(table.rows_among(n), row, "{table} rows among {n} events");
                if kind == table {
                    assert_eq!(table.event_of_row(row), n, "{table} row {row}");
                    row += 1;
                }
            }
        }
    }

    #[test]
    fn ids_are_dense_and_references_point_at_recent_ids() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        let people = nexmark_batch(NexmarkTable::Person, &clock, &strings, 0..200, None).unwrap();
        let ids = people.column(0).as_primitive::<Int64Type>();
        assert!(ids.values().iter().copied().eq(1000..1200));
        let auctions =
            nexmark_batch(NexmarkTable::Auction, &clock, &strings, 0..600, None).unwrap();
        let ids = auctions.column(0).as_primitive::<Int64Type>();
        assert!(ids.values().iter().copied().eq(1000..1600));
        let bids = nexmark_batch(NexmarkTable::Bid, &clock, &strings, 0..9_200, None).unwrap();
        let auction = bids.column(0).as_primitive::<Int64Type>();
        let bidder = bids.column(1).as_primitive::<Int64Type>();
        // 9 200 bids span events up to 10 000: 200 people, 600 auctions.
        assert!(
            auction
                .values()
                .iter()
                .all(|a| (1000..1600 + 10).contains(a))
        );
        assert!(
            bidder
                .values()
                .iter()
                .all(|b| (1000..1200 + 10).contains(b))
        );
        let hot = auction
            .values()
            .iter()
            .filter(|a| (*a - 1000) % 100 == 0)
            .count();
        assert!(hot > 4_000, "about half the bids go to hot auctions: {hot}");
    }

    #[test]
    fn every_column_is_valid_arrow() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        for table in NexmarkTable::ALL {
            let batch = nexmark_batch(table, &clock, &strings, 0..3_000, None).unwrap();
            for column in batch.columns() {
                column.to_data().validate_full().unwrap();
            }
        }
    }

    #[test]
    fn an_event_is_the_same_whatever_batch_makes_it() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        let whole = nexmark_batch(NexmarkTable::Bid, &clock, &strings, 0..100, None).unwrap();
        let alone = nexmark_batch(NexmarkTable::Bid, &clock, &strings, 57..58, None).unwrap();
        assert_eq!(whole.slice(57, 1), alone);
        let other_seed = nexmark_batch(
            NexmarkTable::Bid,
            &clock,
            &NexmarkStrings::new(8),
            0..100,
            None,
        );
        assert_ne!(whole, other_seed.unwrap(), "the strings depend on the seed");
    }

    #[test]
    fn rows_reach_the_standard_average_sizes() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        for (table, average, columns) in [
            (NexmarkTable::Person, 200.0, vec![1, 2, 3, 4, 5, 7]),
            (NexmarkTable::Auction, 500.0, vec![1, 2, 9]),
            (NexmarkTable::Bid, 100.0, vec![6]),
        ] {
            let batch = nexmark_batch(table, &clock, &strings, 0..2_000, None).unwrap();
            let fixed = match table {
                NexmarkTable::Person => 8.0,
                NexmarkTable::Auction => 40.0 + 8.0,
                NexmarkTable::Bid => 32.0,
            };
            let bytes: usize = columns
                .iter()
                .flat_map(|c| batch.column(*c).as_string_view().iter())
                .map(|s| s.unwrap().len())
                .sum();
            let mean = fixed + bytes as f64 / 2_000.0;
            assert!((mean - average).abs() < average * 0.05, "{table}: {mean}");
        }
    }

    #[test]
    fn times_follow_the_event_rate_and_auctions_expire_after_they_start() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        let auctions =
            nexmark_batch(NexmarkTable::Auction, &clock, &strings, 0..3_000, None).unwrap();
        let start = auctions
            .column(5)
            .as_primitive::<TimestampMillisecondType>();
        let expires = auctions
            .column(6)
            .as_primitive::<TimestampMillisecondType>();
        assert!(
            start
                .values()
                .iter()
                .zip(expires.values())
                .all(|(s, e)| e > s)
        );
        // Auction 2 999 is event 49 951: 499.51 ms after the base time at 10 µs an event.
        assert_eq!(start.value(2_999), NEXMARK_BASE_TIME_MS + 499);
        let mean_length = expires
            .values()
            .iter()
            .zip(start.values())
            .map(|(e, s)| (e - s) as f64)
            .sum::<f64>()
            / 3_000.0;
        // The time of 1 666 events is 16.66 ms: lengths are uniform up to twice that.
        assert!((10.0..25.0).contains(&mean_length), "{mean_length}");
    }

    #[test]
    fn columns_asked_for_are_those_of_the_whole_batch() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        for table in NexmarkTable::ALL {
            let whole = nexmark_batch(table, &clock, &strings, 0..5_000, None).unwrap();
            let columns = whole.num_columns();
            for chosen in [
                vec![0],
                vec![columns - 2, 0],
                vec![2, 5],
                vec![columns - 1, 3, 1],
            ] {
                let part = nexmark_batch(table, &clock, &strings, 0..5_000, Some(&chosen)).unwrap();
                assert_eq!(
                    part,
                    whole.project(&chosen).unwrap(),
                    "{table:?} {chosen:?}"
                );
            }
        }
    }

    #[test]
    fn prices_and_urls_follow_the_standard_shapes() {
        let (clock, strings) = (clock(), NexmarkStrings::new(7));
        let bids = nexmark_batch(NexmarkTable::Bid, &clock, &strings, 0..10_000, None).unwrap();
        let prices = bids.column(2).as_primitive::<Int64Type>();
        assert!(
            prices
                .values()
                .iter()
                .all(|p| (100..=100_000_000).contains(p))
        );
        let channels = bids.column(3).as_string_view();
        let urls = bids.column(4).as_string_view();
        let hot = channels
            .iter()
            .flatten()
            .filter(|c| HOT_CHANNELS.contains(c))
            .count();
        assert!((4_500..5_500).contains(&hot), "{hot}");
        let with_id = urls
            .iter()
            .zip(channels.iter())
            .filter(|(_, c)| c.unwrap().starts_with("channel-"))
            .filter(|(u, _)| u.unwrap().contains("&channel_id="))
            .count();
        assert!(with_id * 10 > (10_000 - hot) * 8, "{with_id}");
        assert!(
            urls.iter()
                .all(|u| u.unwrap().starts_with("https://www.nexmark.com/"))
        );
    }
}
