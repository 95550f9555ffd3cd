-- 0004_resets: calendar-aligned resets of tenant budgets.
--
-- Applied by the migration runner (server/store/store_pg.c) inside one transaction,
-- together with its schema_migrations row, so no transaction control here.
-- Table and function names are unqualified: the connection's search_path picks the schema.
--
-- A tenant budget with reset_period 2 (daily) or 3 (monthly) counts usage per period of
-- the tenant's time zone (tenants.time_zone). The row keeps the period it counts
-- (period_start) and when it ends (next_reset_at); the store applies a due reset under
-- the tenant row's lock when it reads the path, and the sweeper applies it for tenants
-- nobody calls for. Only one reset is ever applied per boundary: it is a conditional
-- UPDATE (next_reset_at <= now) on a locked row, which moves next_reset_at past now.
--
-- Boundaries are computed on the tenant's wall clock and converted back, so that they are
-- local midnights whatever the UTC offset and its DST changes: a day in which clocks
-- spring forward lasts 23 hours, not 24.

-- The start of the period (2 daily, 3 monthly) that contains `at` in time zone tz.
CREATE FUNCTION cg_period_start(period smallint, tz text, at timestamptz) RETURNS timestamptz
    LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE period
        WHEN 2 THEN date_trunc('day', at AT TIME ZONE tz) AT TIME ZONE tz
        WHEN 3 THEN date_trunc('month', at AT TIME ZONE tz) AT TIME ZONE tz
    END
$$;

-- The end of that period: the next local midnight, or the first day of the next month.
CREATE FUNCTION cg_period_next(period smallint, tz text, at timestamptz) RETURNS timestamptz
    LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE period
        WHEN 2 THEN (date_trunc('day', at AT TIME ZONE tz) + interval '1 day') AT TIME ZONE tz
        WHEN 3 THEN (date_trunc('month', at AT TIME ZONE tz) + interval '1 month') AT TIME ZONE tz
    END
$$;

ALTER TABLE scopes
    ADD COLUMN period_start  timestamptz NULL,  -- with a reset period: the current period
    ADD COLUMN next_reset_at timestamptz NULL;  -- its end, when the next reset is due

-- Rows stored with a reset period before this migration count from the current period.
UPDATE scopes s
   SET period_start = cg_period_start(s.reset_period, t.time_zone, now()),
       next_reset_at = cg_period_next(s.reset_period, t.time_zone, now())
  FROM tenants t
 WHERE t.tenant_id = s.tenant_id AND s.reset_period <> 1;

ALTER TABLE scopes ADD CONSTRAINT scopes_period
    CHECK ((reset_period = 1) = (period_start IS NULL)
           AND (period_start IS NULL) = (next_reset_at IS NULL)
           AND (next_reset_at IS NULL OR next_reset_at > period_start));
