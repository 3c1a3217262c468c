-- Nexmark q2: selection, the bids of every 123rd auction (Flink's MOD(auction, 123) is `%`).
SELECT auction, price FROM bid WHERE auction % 123 = 0
