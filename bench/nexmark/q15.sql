-- Nexmark q15: bidding statistics per day, over the whole stream (an updating result).
-- Flink's DATE_FORMAT is `to_char` with chrono's format.
SELECT to_char(date_time, '%Y-%m-%d') AS day,
     COUNT(*) AS total_bids,
     COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
     COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
     COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
     COUNT(DISTINCT bidder) AS total_bidders,
     COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
     COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
     COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
     COUNT(DISTINCT auction) AS total_auctions,
     COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
     COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
     COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY to_char(date_time, '%Y-%m-%d')
