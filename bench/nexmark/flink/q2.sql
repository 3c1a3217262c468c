-- Nexmark q2 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0
