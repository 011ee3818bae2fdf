-- The GPU built-ins through SQL on a real GPU (run by on-device.sh with `accelsql --timing -f`):
-- each call must be placed on the GPU and run GPU batches (accelsql.udf_calls.gpu_batches > 0,
-- cpu_fallback_batches = 0), and agree with a CPU formula.
SELECT param_name, param_value FROM exa_metadata WHERE param_name LIKE 'accelerator%';
SELECT * FROM accelsql.gpu_devices;

-- 20K embeddings of 128 FLOATs, and 1M rows of coordinates and option inputs.
CREATE TABLE emb AS
  SELECT id, array_agg(CAST(random() - 0.5 AS FLOAT) ORDER BY j) AS emb
  FROM (SELECT a.value AS id, b.value AS j FROM generate_series(1, 20000) a, generate_series(1, 128) b)
  GROUP BY id;
CREATE TABLE pts AS
  SELECT value AS id, random() * 180 - 90 AS lat1, random() * 360 - 180 AS lon1,
         random() * 180 - 90 AS lat2, random() * 360 - 180 AS lon2,
         50 + random() * 100 AS spot, 50 + random() * 100 AS strike, 0.1 + random() * 2 AS years,
         random() * 0.05 AS rate, 0.05 + random() * 0.5 AS vol
  FROM generate_series(1, 1000000);

-- Cosine similarity vs DataFusion's cosine_distance (CPU), and the top 5.
SELECT count(*) AS rows_compared,
       max(abs(cosine_similarity(emb, array_repeat(CAST(0.25 AS FLOAT), 128))
               - (1 - cosine_distance(emb, array_repeat(CAST(0.25 AS FLOAT), 128))))) AS max_abs_diff
FROM emb;
SELECT id, cosine_similarity(emb, array_repeat(CAST(0.25 AS FLOAT), 128)) AS s FROM emb ORDER BY s DESC LIMIT 5;
SELECT id, l2_distance(emb, array_repeat(CAST(0.0 AS FLOAT), 128)) AS d,
       sqrt(dot_product(emb, emb)) AS norm FROM emb ORDER BY id LIMIT 3;

-- Haversine vs the formula in SQL.
SELECT max(abs(haversine_km(lat1, lon1, lat2, lon2) - 2 * 6371.0088 * asin(sqrt(
         power(sin(radians(lat2 - lat1) / 2), 2)
         + cos(radians(lat1)) * cos(radians(lat2)) * power(sin(radians(lon2 - lon1) / 2), 2))))) AS max_abs_diff_km
FROM pts;

-- Black–Scholes: put–call parity C - P = S - K·e^(-rT). Two GPU calls in one select: the first
-- gets the GPU, the other runs on the CPU (udf_calls says which), so this also compares the two.
SELECT max(abs(black_scholes_call(spot, strike, years, rate, vol) - black_scholes_put(spot, strike, years, rate, vol)
               - (spot - strike * exp(-rate * years)))) AS parity_error
FROM pts;
SELECT sum(black_scholes_call(spot, strike, years, rate, vol)) AS call_sum FROM pts;
SELECT sum(black_scholes_put(spot, strike, years, rate, vol)) AS put_sum FROM pts;

-- The set UDF: top 5 by cosine, scores on the GPU.
SELECT row_id, score FROM (SELECT vector_topk(id, emb, array_repeat(CAST(0.25 AS FLOAT), 128), 5) FROM emb) ORDER BY score DESC;

-- Without GROUP BY the top-k runs per partition, then one merge: the same 50 rows as cosine +
-- ORDER BY … LIMIT (0 differ).
SELECT count(*) AS topk_rows_differing FROM (
  SELECT row_id FROM (SELECT vector_topk(id, emb, array_repeat(CAST(0.25 AS FLOAT), 128), 50) FROM emb)
  EXCEPT
  SELECT id FROM (SELECT id, cosine_similarity(emb, array_repeat(CAST(0.25 AS FLOAT), 128)) AS s
                  FROM emb ORDER BY s DESC LIMIT 50));
-- Grouped top-k, the groups gathered (default) and sorted: the same answers.
SET accelsql.set_grouping = 'sort';
SELECT 'sort' AS grouping, count(*) AS n, sum(row_id) AS ids, round(sum(score), 9) AS scores
FROM (SELECT g, vector_topk(id, emb, array_repeat(CAST(0.25 AS FLOAT), 128), 3)
      FROM (SELECT id % 16 AS g, id, emb FROM emb) GROUP BY g);
SET accelsql.set_grouping = 'gather';
SELECT 'gather' AS grouping, count(*) AS n, sum(row_id) AS ids, round(sum(score), 9) AS scores
FROM (SELECT g, vector_topk(id, emb, array_repeat(CAST(0.25 AS FLOAT), 128), 3)
      FROM (SELECT id % 16 AS g, id, emb FROM emb) GROUP BY g);

EXPLAIN ANALYZE SELECT sum(haversine_km(lat1, lon1, lat2, lon2)) FROM pts;

-- Where each call ran.
SELECT statement_id, udf, placement, reason, devices, instances, rows_in, gpu_batches,
       cpu_fallback_batches, fallback_reason, round(elapsed_ms, 1) AS ms
FROM accelsql.udf_calls ORDER BY statement_id, call_id;
