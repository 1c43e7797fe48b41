-- The guard reads a rule's latest actions after each reversal of one of them.
CREATE INDEX actions_rule_idx ON actions (rule, id DESC);
