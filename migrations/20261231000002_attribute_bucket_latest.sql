-- latest_in: a number attribute's latest value per receive minute, beside its largest, so a
-- window's latest is its newest bucket's (the events not folded yet are newer still). NULL for
-- string and boolean attributes, and for buckets folded before this column existed (latest_in
-- reads 0.0 there, as for a window without the attribute).
ALTER TABLE attribute_buckets ADD COLUMN latest DOUBLE PRECISION;
