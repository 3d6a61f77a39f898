-- The leasehold fence, for PostgreSQL 14 or later (leasehold fence sql --dialect postgres).
-- Apply it as is, as often as you like: every statement is idempotent.
-- Call SELECT leasehold_fence(task, token) inside the transaction that writes.

CREATE TABLE IF NOT EXISTS leasehold_fence (
  task       text        PRIMARY KEY,
  token      bigint      NOT NULL CHECK (token >= 1),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- The guard: no statement may lower a task's token, whoever writes the row.
CREATE OR REPLACE FUNCTION leasehold_fence_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.token < OLD.token THEN
    RAISE EXCEPTION USING ERRCODE = 'LH001',
      MESSAGE = format('leasehold_fence: stale token %s for task %L: highest seen is %s', NEW.token, OLD.task, OLD.token);
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER leasehold_fence_guard
  BEFORE UPDATE ON leasehold_fence
  FOR EACH ROW EXECUTE FUNCTION leasehold_fence_guard();

-- The check: records a higher token, accepts an equal one, and (through the guard) refuses a
-- lower one with SQLSTATE LH001. The row lock it takes orders concurrent holders of a task.
-- Returns the token recorded.
CREATE OR REPLACE FUNCTION leasehold_fence(task text, token bigint) RETURNS bigint
LANGUAGE sql AS $$
  INSERT INTO leasehold_fence AS f (task, token) VALUES ($1, $2)
  ON CONFLICT (task) DO UPDATE SET token = excluded.token, updated_at = now()
  RETURNING f.token
$$;
