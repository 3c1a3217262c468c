-- Nexmark q13: bounded side input join, each bid with the value of its auction's key in the
-- bounded table side_input(key, value) (`freshet gen nexmark` writes side_input.csv; register
-- it with --table side_input=DIR/side_input.csv,bounded=true). The standard query joins
-- FOR SYSTEM_TIME AS OF a processing time; a lookup into a bounded table is that join.
SELECT b.auction, b.bidder, b.price, b.date_time, s.value
FROM bid b JOIN side_input s ON b.auction % 10000 = s.key
