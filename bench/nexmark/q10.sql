-- Nexmark q10: log to a file system, each bid with its day and minute (Flink writes them to
-- partitioned files; here they are columns, and `--output` picks the file). Flink's
-- DATE_FORMAT is `to_char` with chrono's format.
SELECT auction, bidder, price, date_time, extra,
       to_char(date_time, '%Y-%m-%d') AS dt, to_char(date_time, '%H:%M') AS hm
FROM bid
