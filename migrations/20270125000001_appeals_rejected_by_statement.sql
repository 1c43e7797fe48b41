-- A rejected appeal is final: an appeal of a decision whose earlier appeal was rejected is
-- refused. The check reads a statement's rejected appeals here (its open one through
-- appeals_one_open_idx), never by a scan of every appeal.
CREATE INDEX appeals_rejected_idx ON appeals (statement_id) WHERE outcome = 'rejected';
