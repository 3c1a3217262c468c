"""The reference scenarios' queries (docs/scenarios.md) as the comparison scripts and the
Python package's tests run them through `freshet query` and the Python package: one copy for
all of them."""

FRESHET_SQL = {
    "S0": "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100",
    "S1": "SELECT symbol, price, LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, "
          "ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, "
          "AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg "
          "FROM market_data",
    "S2": "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, MIN(price) AS min_price, "
          "MAX(price) AS max_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY symbol",
    "S3a": "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity "
           "FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
    "S3b": "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price FROM market_data "
           "GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES",
}
