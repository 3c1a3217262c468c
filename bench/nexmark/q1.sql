-- Nexmark q1: currency conversion, dollars to euros. Flink types the price DECIMAL(23, 3);
-- DataFusion reads 0.908 as a DOUBLE, so the price here is a DOUBLE.
SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
