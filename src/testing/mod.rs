//! Test support used by Freshet's own tests and open to embedders: the differential oracle
//! ([`Differential`]) that checks a streaming query against DataFusion batch SQL on the same
//! bounded data, a random stream generator ([`RandomStream`]) for it to run on, and the SQL
//! fuzzer ([`fuzz`]): random queries over random tables against batch SQL.

mod cells;
pub mod fuzz;
mod oracle;
mod random;
mod rng;

pub use cells::display_rows;
pub use freshet_bench::compare::{FLOAT_TOLERANCE, compare_results, contains_results};
pub use oracle::{Differential, TestSource, TestTable, without_op_column};
pub use random::RandomStream;
pub use rng::TestRng;
