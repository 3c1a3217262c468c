-- Nexmark q0: pass-through (the cost of reading and writing the bids).
SELECT auction, bidder, price, date_time, extra FROM bid
