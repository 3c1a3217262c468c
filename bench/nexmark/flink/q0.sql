-- Nexmark q0 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT auction, bidder, price, date_time, extra FROM bid
