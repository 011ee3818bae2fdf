-- accelsql quick start: runs on any machine, with or without GPUs.
--
--   cargo run -p accelsql-cli -- -f examples/quickstart.sql
--   cargo run -p accelsql-cli -- --simulated-gpus 2 -f examples/quickstart.sql   # pretend to have 2 GPUs
--
-- Each statement's result is printed in turn; the first failing statement stops the script and
-- is reported as `ERROR at examples/quickstart.sql:LINE (statement N): [CODE] message`.

-- 1. A small table: five cities with their coordinates in degrees. It is kept in the data
--    directory (a Delta Lake table under ~/.local/share/accelsql/tables/public/cities, or
--    --data-dir DIR; --in-memory keeps it in memory), so running the script again replaces it.
CREATE OR REPLACE TABLE cities (name VARCHAR, country VARCHAR, lat DOUBLE, lon DOUBLE);
INSERT INTO cities VALUES
    ('Berlin',    'DE', 52.5200,  13.4050),
    ('Paris',     'FR', 48.8566,   2.3522),
    ('Madrid',    'ES', 40.4168,  -3.7038),
    ('New York',  'US', 40.7128, -74.0060),
    ('Tokyo',     'JP', 35.6762, 139.6503);

-- 2. Plain SQL over it (DataFusion underneath): the cities north of 45 degrees.
SELECT name, country, lat
FROM cities
WHERE lat > 45
ORDER BY lat DESC;

-- 3. What this node offers: EXA_METADATA says whether an accelerator was detected, how many
--    NVIDIA GPUs there are and where the device list comes from (nvml or simulated).
SELECT param_name, param_value FROM exa_metadata;

-- 4. The GPUs themselves, one row per device (no rows on a machine without GPUs).
SELECT index, name, memory_total, memory_free, simulated FROM accelsql.gpu_devices;

-- 5. The built-in GPU-capable UDF haversine_km(lat1, lon1, lat2, lon2): great-circle distance in
--    km. It is annotated GpuNvidia|None, so it runs on a GPU when one is free and on the CPU
--    otherwise; the answer is the same either way.
SELECT a.name AS from_city, b.name AS to_city,
       round(haversine_km(a.lat, a.lon, b.lat, b.lon), 1) AS km
FROM cities a JOIN cities b ON a.name < b.name
ORDER BY km;

-- 6. EXPLAIN shows the plan plus a `gpu_placement` row: which call got the GPUs (at most one per
--    query block) or why it runs on the CPU (e.g. no GPU on this node).
EXPLAIN SELECT name, haversine_km(lat, lon, 48.8566, 2.3522) AS km_to_paris FROM cities;

-- 7. The UDF calls this session made, where each ran and how many rows it saw.
SELECT udf, placement, reason, rows_in FROM accelsql.udf_calls;
