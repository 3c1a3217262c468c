-- Nexmark q1 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
