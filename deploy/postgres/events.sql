-- An event table the populator can follow with its default column names. The order column
-- `id` is assigned by the inserting statement (bigserial); the index on (execution_id, id)
-- serves the populator's read of one execution in log order.

CREATE TABLE IF NOT EXISTS events (
  id            bigserial PRIMARY KEY,
  execution_id  text  NOT NULL,
  event_id      text  NOT NULL,
  prev_event_id text,
  parent_execution_id text,
  payload       jsonb NOT NULL,
  UNIQUE (execution_id, event_id)
);

CREATE INDEX IF NOT EXISTS events_execution_order ON events (execution_id, id);
