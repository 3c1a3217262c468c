-- Nexmark q19: the 10 highest bids of each auction (top-N; of equal prices, the earlier
-- arrival ranks first).
SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
    FROM bid
)
WHERE rank_number <= 10
