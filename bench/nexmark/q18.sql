-- Nexmark q18: the last bid of each bidder on each auction (keep-last de-duplication; of
-- bids at equal times, the one that arrived last).
SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
    FROM bid
)
WHERE rank_number <= 1
