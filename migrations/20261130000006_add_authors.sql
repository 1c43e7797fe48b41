-- The author of an entity (e.g. the user:77 who wrote post:9842): an automated action on the
-- entity records a derived signal on its author, so repeated actions escalate to the author.
ALTER TABLE events ADD COLUMN author TEXT;
ALTER TABLE entities ADD COLUMN author TEXT;
