-- Nexmark q20: expand bids with their auction's details (a regular join), for auctions of
-- category 10. The two times and extras are named apart (Flink's sink names them so).
SELECT auction, bidder, price, channel, url, b.date_time AS date_time, b.extra AS extra,
       item_name, description, initial_bid, reserve, a.date_time AS auction_date_time, expires,
       seller, category, a.extra AS auction_extra
FROM bid AS b INNER JOIN auction AS a ON b.auction = a.id
WHERE a.category = 10
